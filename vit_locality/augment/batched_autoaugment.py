"""Per-sample AutoAugment for a whole uint8 batch on its device, distributed exactly like torchvision: `draw` makes
every image's choices in torchvision's order (`draw(1)` after `torch.manual_seed(s)` on the CPU is `v2.AutoAugment`'s
choice), `apply` runs them, `grouped` through torchvision's ops, `select` (the GPU path) without host reads."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchvision.transforms import v2

from vit_locality.augment.autoaugment_tables import NUM_OPS, _magnitude, apply_slots, built_once, pixel_tables
from vit_locality.upstream import apply_autoaugment_op, autoaugment_space, autoaugment_sub_policies

_NEVER = -1.0  # a threshold no uniform in [0, 1) is <=


@dataclass(frozen=True)
class AutoAugmentDraws:
    """The random choices of a batch; `negative` is true only for an applied, signed op whose sign came out negative."""

    policy: str
    sub_policy: torch.Tensor  # (B,) int64, index into the policy's sub-policy list
    applied: torch.Tensor  # (B, 2) bool, op k of the sub-policy is applied
    negative: torch.Tensor  # (B, 2) bool, op k's magnitude is negated

    def __len__(self) -> int:
        return int(self.sub_policy.shape[0])

    def to(self, device: torch.device | str) -> AutoAugmentDraws:
        return AutoAugmentDraws(
            self.policy, self.sub_policy.to(device), self.applied.to(device), self.negative.to(device)
        )

    def rows(self, rows: torch.Tensor) -> AutoAugmentDraws:
        """The draws of these images (a process's rows of the global batch)."""
        return AutoAugmentDraws(self.policy, self.sub_policy[rows], self.applied[rows], self.negative[rows])


@dataclass(frozen=True)
class _Table:
    """A policy's sub-policies as tensors, with each distinct (op name, magnitude bin) given one id."""

    augment: v2.AutoAugment  # the per-sample transform itself, whose ops `grouped` calls on sub-batches
    specs: tuple[tuple[str, int | None], ...]  # id -> (op name, magnitude bin or None)
    op_id: torch.Tensor  # (P, 2) int64
    signed: torch.Tensor  # (P, 2) bool
    # (P, 3, 4) float32: per sub-policy the thresholds `draw` compares the uniforms u0..u3 with: [p1, p2, p2, -]
    # (flags), [-, s1, s2, s2] (signs: 0.5 or never) and [p1 if op 1 is signed, -, -, -] (op 1 took a sign draw).
    thresholds: torch.Tensor
    columns: torch.Tensor  # (1, 4) int64: the columns of [flag 1, flag 2, sign 1, sign 2] ...
    shifted: torch.Tensor  # (1, 4) int64: ... and where op 2 reads them once op 1 took a sign draw

    def run(self, key: int, images: torch.Tensor) -> torch.Tensor:
        """The op of `key` (op id x 2 + negative) on `images`, through torchvision."""
        name, bin_ = self.specs[key // 2]
        magnitude = _magnitude(name, bin_, bool(key % 2), *images.shape[-2:])
        return apply_autoaugment_op(self.augment, images, name, magnitude)


@built_once
def _table(policy: str, device: str) -> _Table:
    """Built once per policy and device from torchvision's own sub-policy list and augmentation space."""
    augment = v2.AutoAugment(v2.AutoAugmentPolicy(policy))
    space = autoaugment_space()
    specs: dict[tuple[str, int | None], int] = {}
    op_id, signed, thresholds = [], [], []
    for sub in autoaugment_sub_policies(augment):
        op_id.append([specs.setdefault((name, bin_), len(specs)) for name, _, bin_ in sub])
        signed.append([space[name][1] for name, _, _ in sub])
        (name1, p1, _), (name2, p2, _) = sub
        s1, s2 = (0.5 if space[n][1] else _NEVER for n in (name1, name2))  # the sign draws' thresholds
        thresholds.append([p1, p2, p2, _NEVER, _NEVER, s1, s2, s2, p1 if s1 > 0 else _NEVER, *[_NEVER] * 3])
    return _Table(  # made on the host and copied once to the device
        augment=augment,
        specs=tuple(specs),
        op_id=torch.tensor(op_id, dtype=torch.int64).to(device),
        signed=torch.tensor(signed, dtype=torch.bool).to(device),
        thresholds=torch.tensor(thresholds, dtype=torch.float32).view(-1, 3, 4).to(device),
        columns=torch.tensor([[0, 1, 5, 6]], dtype=torch.int64).to(device),
        shifted=torch.tensor([[0, 2, 5, 7]], dtype=torch.int64).to(device),
    )


def draw(
    batch_size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    *,
    policy: str = "cifar10",
) -> AutoAugmentDraws:
    """Draw every image's sub-policy, op flags and signs at once: per image torchvision draws `randint(n_sub)`, then
    per op `rand() <= p` (applied) and, for an applied signed op only, `rand() <= 0.5` (negative)."""
    if device is None:
        device = generator.device if generator is not None else torch.device("cpu")
    device = torch.device(device)
    table = _table(policy, str(device))
    sub = torch.randint(len(table.op_id), (batch_size,), generator=generator, device=device)
    uniforms = torch.rand((batch_size, 1, 4), generator=generator, device=device)  # the same stream as (B, 4)
    # (B, 12): the 4 uniforms against each of the sub-policy's 3 rows of thresholds, broadcast rather than repeated
    answers = (uniforms <= table.thresholds.index_select(0, sub)).view(-1, 12)
    took_sign = answers[:, 8:9]  # op 1 applied and signed: op 2 reads one column further
    picked = answers.gather(1, torch.where(took_sign, table.shifted, table.columns))
    applied = picked[:, :2]
    return AutoAugmentDraws(policy, sub, applied, picked[:, 2:] & applied)


GROUPINGS = ("select", "grouped")
GROUPING_BY_DEVICE = {"cpu": "grouped"}  # elsewhere (a GPU) select: a host read stalls the queue


def _grouped(out: torch.Tensor, rows: torch.Tensor, keys: torch.Tensor, table: _Table) -> torch.Tensor:
    """One op call per drawn key on the images that drew it: the least work, but the host reads the groups."""
    rows = rows.nonzero().squeeze(1)
    if rows.numel() == 0:
        return out
    keys, order = keys[rows].sort(stable=True)
    group_keys, counts = torch.unique_consecutive(keys, return_counts=True)
    for key, idx in zip(group_keys.tolist(), rows[order].split(counts.tolist()), strict=True):
        out[idx] = table.run(key, out[idx])
    return out


def prepare(policy: str, device: torch.device | str, height: int, width: int) -> None:
    """Build the policy's tables for this device and image size before the first step, so no step builds one."""
    _table(policy, str(torch.device(device)))
    if min(height, width) > 2:
        pixel_tables(policy, str(torch.device(device)), height, width)


def apply(images: torch.Tensor, draws: AutoAugmentDraws, grouping: str | None = None) -> torch.Tensor:
    """Apply each image's drawn sub-policy, `select` or `grouped` (default by device), both torchvision's pixels;
    `select` covers uint8 RGB images only. The input is not modified."""
    if images.ndim != 4:
        raise ValueError(f"expected a (B, C, H, W) batch, got shape {tuple(images.shape)}")
    if len(draws) != images.shape[0]:
        raise ValueError(f"{len(draws)} draws for a batch of {images.shape[0]} images")
    grouping = grouping or GROUPING_BY_DEVICE.get(images.device.type, "select")
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping={grouping!r}: allowed values are {', '.join(GROUPINGS)}")
    draws = draws.to(images.device)
    # Autocast off: in bf16 the affine grid and sharpness kernel would pick other pixels than the workers' fp32.
    with torch.autocast(device_type=images.device.type, enabled=False):
        # select's tables cover uint8 RGB images larger than the sharpness kernel (the protocol's)
        if grouping == "select" and images.dtype == torch.uint8 and images.shape[1] == 3 and min(images.shape[-2:]) > 2:
            tables = pixel_tables(draws.policy, str(images.device), *images.shape[-2:])
            return apply_slots(images, draws.sub_policy, draws.applied, draws.negative, tables)
        table = _table(draws.policy, str(images.device))
        out, sub = images.clone(), draws.sub_policy
        for k in range(NUM_OPS):
            negative = draws.negative[:, k] & table.signed[sub, k]
            out = _grouped(out, draws.applied[:, k], table.op_id[sub, k] * 2 + negative.long(), table)
    return out


class BatchedAutoAugment(torch.nn.Module):
    """`v2.AutoAugment(policy)` applied per sample, but to a whole batch on its device in one pass (`apply`)."""

    def __init__(self, policy: str = "cifar10", grouping: str | None = None) -> None:
        super().__init__()
        self.policy = policy
        self.grouping = grouping  # apply's; None: the device's default (a compiled step sets select)

    def forward(self, images: torch.Tensor, world: int = 1, rank: int = 0) -> torch.Tensor:
        """Augment a uint8 batch; under DDP draw for the global batch and keep rows rank, rank + world, ..."""
        drawn = draw(len(images) * world, device=images.device, policy=self.policy)
        if world > 1:
            drawn = drawn.rows(torch.arange(len(images), device=images.device) * world + rank)
        return apply(images, drawn, self.grouping)

    def extra_repr(self) -> str:
        return f"policy={self.policy!r}"
