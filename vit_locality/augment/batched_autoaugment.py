"""Per-sample AutoAugment for a whole uint8 batch on its own device, distributed exactly like torchvision.

`v2.AutoAugment` draws one sub-policy per call, so a per-sample protocol has to call it image by image in the
data workers. Here a batch draws its per-image choices at once (`draw`) and `apply` runs them on the whole batch,
first op then second op. The policy tables, magnitude bins and op dispatch are torchvision's own (`v2.AutoAugment`,
private there, hence reached through `upstream`), called, not copied, so the batched path cannot drift from the
per-sample one: `grouped` calls torchvision's ops on the images that drew each; `select`, the GPU path, runs every
image's op in a fixed list of whole-batch tensor ops (autoaugment_ops.py) from tables read off torchvision's own
kernels once (autoaugment_tables.py): no host reads, no tensors from Python values, a host cost per batch that does
not grow with the batch (benchmarks/host_work.py measures it).

Draw order. Per image torchvision calls `torch.randint(n_sub, ())`, then for each of the two ops
`torch.rand(()) <= p` (skip the op when false) and, only for an applied signed op, `torch.rand(()) <= 0.5`
(negate the magnitude when true): 3 to 5 draws per image, their number depending on earlier draws.
`draw` takes one `randint` per image and a (B, 4) block of uniforms, and reads each image's block the way
torchvision reads its stream (one comparison with per-sub-policy thresholds, then one gather): column 0 is op 1's
flag, op 1's sign takes the next column only when op 1 needed one, op 2's flag and sign take the columns after
that. Every flag and sign is thus a fresh uniform, so the distribution is exactly torchvision's; on the CPU
default generator `draw(1)` after `torch.manual_seed(s)` also makes the very choice `v2.AutoAugment` makes after
the same seed. For B > 1 the uniforms come from one block instead of being interleaved image by image, so a batch is
not the same sample as B consecutive torchvision calls (only the same distribution). The draws are the ones this
module always made, value for value, for the same generator state.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch
from torchvision.transforms import v2

from vit_locality.augment.autoaugment_ops import apply_slots
from vit_locality.augment.autoaugment_tables import NUM_OPS, _magnitude, pixel_tables
from vit_locality.upstream import apply_autoaugment_op, autoaugment_space, autoaugment_sub_policies

__all__ = ["AutoAugmentDraws", "BatchedAutoAugment", "apply", "draw"]

_SIGN_P = 0.5
_NEVER = -1.0  # a threshold no uniform in [0, 1) is <=


@dataclass(frozen=True)
class AutoAugmentDraws:
    """The random choices of a batch, as torchvision would draw them image by image.

    `negative` is only true for an applied, signed op whose sign draw came out negative (torchvision draws no
    sign otherwise); `apply` ignores it for unsigned ops anyway.
    """

    policy: str
    sub_policy: torch.Tensor  # (B,) int64, index into the policy's sub-policy list
    applied: torch.Tensor  # (B, 2) bool, op k of the sub-policy is applied
    negative: torch.Tensor  # (B, 2) bool, op k's magnitude is negated

    def __len__(self) -> int:
        return int(self.sub_policy.shape[0])

    def to(self, device: torch.device | str) -> AutoAugmentDraws:
        """Move the draws next to the images they will be applied to."""
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
    # (P, 3, 4) float32: per sub-policy the thresholds `draw` compares the uniforms u0..u3 with, 3 rows of 4:
    # [p1, p2, p2, -] for the flags, [-, s1, s2, s2] for the signs (0.5 if the op is signed, else never) and
    # [p1 if op 1 is signed, -, -, -] for "op 1 took a sign draw". The probabilities are float32, compared in float32
    # as torchvision's `torch.rand(()) <= p`.
    thresholds: torch.Tensor
    columns: torch.Tensor  # (1, 4) int64: the columns of [flag 1, flag 2, sign 1, sign 2] ...
    shifted: torch.Tensor  # (1, 4) int64: ... and where op 2 reads them once op 1 took a sign draw

    def run(self, key: int, images: torch.Tensor) -> torch.Tensor:
        """The op of `key` (op id x 2 + negative) on `images`, through torchvision."""
        name, bin_ = self.specs[key // 2]
        magnitude = _magnitude(name, bin_, bool(key % 2), *images.shape[-2:])
        return apply_autoaugment_op(self.augment, images, name, magnitude)


def _thresholds(sub: tuple, space: dict) -> list[float]:
    """One sub-policy's row of `_Table.thresholds`."""
    (name1, p1, _), (name2, p2, _) = sub
    sign1, sign2 = (_SIGN_P if space[n][1] else _NEVER for n in (name1, name2))
    return [p1, p2, p2, _NEVER, _NEVER, sign1, sign2, sign2, p1 if space[name1][1] else _NEVER, *[_NEVER] * 3]


@cache
def _table(policy: str, device: str) -> _Table:
    """Built once per policy and device from torchvision's own sub-policy list and augmentation space."""
    augment = v2.AutoAugment(v2.AutoAugmentPolicy(policy))
    space = autoaugment_space()
    specs: dict[tuple[str, int | None], int] = {}
    op_id, signed, thresholds = [], [], []
    for sub in autoaugment_sub_policies(augment):
        op_id.append([specs.setdefault((name, bin_), len(specs)) for name, _, bin_ in sub])
        signed.append([space[name][1] for name, _, _ in sub])
        thresholds.append(_thresholds(sub, space))
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
    """Draw every image's sub-policy, op flags and signs at once (see the module docstring for the order).

    One comparison of the uniforms with the sub-policy's thresholds answers every question an image can ask of its
    block; whether op 1 took a sign draw then picks the columns op 2 reads, with one gather."""
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
# The grouping `apply` uses by device type: on a CPU host reads are free and the arithmetic is the cost, elsewhere
# (a GPU) a host read stalls the queue: select.
GROUPING_BY_DEVICE = {"cpu": "grouped"}


def _grouped(out: torch.Tensor, rows: torch.Tensor, keys: torch.Tensor, table: _Table) -> torch.Tensor:
    """One op call per drawn key on the images that drew it: the least work, but the groups' sizes are read by the
    host (`nonzero`, `unique_consecutive`, `tolist`), a sync per call on a GPU."""
    rows = rows.nonzero().squeeze(1)
    if rows.numel() == 0:
        return out
    keys, order = keys[rows].sort(stable=True)
    group_keys, counts = torch.unique_consecutive(keys, return_counts=True)
    for key, idx in zip(group_keys.tolist(), rows[order].split(counts.tolist()), strict=True):
        out[idx] = table.run(key, out[idx])
    return out


def _selectable(images: torch.Tensor) -> bool:
    """What `select`'s tables cover: uint8 RGB images larger than the sharpness kernel (the protocol's images)."""
    return images.dtype == torch.uint8 and images.shape[1] == 3 and min(images.shape[-2:]) > 2


def prepare(policy: str, device: torch.device | str, height: int, width: int) -> None:
    """Build the policy's tables for this device and image size now rather than at the first batch: the training
    loader calls it before its first step, so no step builds a table (torchvision's probes make tensors from
    Python values)."""
    _table(policy, str(torch.device(device)))
    if min(height, width) > 2:
        pixel_tables(policy, str(torch.device(device)), height, width)


def apply(images: torch.Tensor, draws: AutoAugmentDraws, grouping: str | None = None) -> torch.Tensor:
    """Apply each image's drawn sub-policy: `select` (every image's op in one fixed list of whole-batch tensor
    ops, autoaugment_ops.py: no host reads, no tensors from Python values, the GPU path) or `grouped` (one
    torchvision call per drawn (op, magnitude, sign) group: host reads); by default the device's
    (`GROUPING_BY_DEVICE`). The two give the same pixels, torchvision's. `select` covers uint8 RGB images (the
    protocol's); other images are grouped.

    The ops run with the per-sample transform's interpolation and fill (nearest, black) and with autocast off, so
    both paths produce the same pixels. Images whose op is not applied stay as they are; the input is not modified.
    """
    if images.ndim != 4:
        raise ValueError(f"expected a (B, C, H, W) batch, got shape {tuple(images.shape)}")
    if len(draws) != images.shape[0]:
        raise ValueError(f"{len(draws)} draws for a batch of {images.shape[0]} images")
    grouping = grouping or GROUPING_BY_DEVICE.get(images.device.type, "select")
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping={grouping!r}: allowed values are {', '.join(GROUPINGS)}")
    draws = draws.to(images.device)
    # The training step calls this inside bf16 autocast, where torchvision's affine grid (a bmm: Rotate, Shear)
    # and sharpness kernel (a conv2d) would run in bf16 and pick neighbouring pixels or levels; the data workers
    # run them in fp32. Autocast off keeps the two paths pixel-identical.
    with torch.autocast(device_type=images.device.type, enabled=False):
        if grouping == "select" and _selectable(images):
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

    def __init__(self, policy: str = "cifar10") -> None:
        super().__init__()
        self.policy = policy

    def forward(self, images: torch.Tensor, world: int = 1, rank: int = 0) -> torch.Tensor:
        """Augment a uint8 (B, C, H, W) batch, every image with its own sub-policy. Under DDP every process seeds the
        same generator, so the draws are made for the global batch (`world` x B) and this process takes its rows
        (rank, rank + world, ...: the shard order of the training sampler): ranks draw different sub-policies, and
        together exactly a one-process run's draws."""
        drawn = draw(len(images) * world, device=images.device, policy=self.policy)
        if world > 1:
            drawn = drawn.rows(torch.arange(len(images), device=images.device) * world + rank)
        return apply(images, drawn)

    def extra_repr(self) -> str:
        return f"policy={self.policy!r}"
