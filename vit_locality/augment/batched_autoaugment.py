"""Per-sample AutoAugment for a whole uint8 batch on its own device, distributed exactly like torchvision.

`v2.AutoAugment` draws one sub-policy per call, so a per-sample protocol has to call it image by image in the
data workers. Here a batch draws its per-image choices at once (`draw`) and `apply` runs them on the whole batch,
first op then second op, without host reads on a GPU. The policy tables, magnitude bins and op dispatch are
torchvision's own (`v2.AutoAugment`, private there, hence reached through `upstream`), called, not copied, so the
batched path cannot drift from the per-sample one.

Draw order. Per image torchvision calls `torch.randint(n_sub, ())`, then for each of the two ops
`torch.rand(()) <= p` (skip the op when false) and, only for an applied signed op, `torch.rand(()) <= 0.5`
(negate the magnitude when true): 3 to 5 draws per image, their number depending on earlier draws.
`draw` takes one `randint` per image and a (B, 4) block of uniforms, and reads each image's block the way
torchvision reads its stream: column 0 is op 1's flag, op 1's sign takes the next column only when op 1
needed one, op 2's flag and sign take the columns after that. Every flag and sign is thus a fresh uniform,
so the distribution is exactly torchvision's; on the CPU default generator `draw(1)` after
`torch.manual_seed(s)` also makes the very choice `v2.AutoAugment` makes after the same seed. For B > 1 the
uniforms come from one block instead of being interleaved image by image, so a batch is not the same
sample as B consecutive torchvision calls (only the same distribution).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch
from torchvision.transforms import v2

from vit_locality.augment.per_sample import autoaugment_policy
from vit_locality.upstream import apply_autoaugment_op, autoaugment_space, autoaugment_sub_policies

__all__ = ["AutoAugmentDraws", "BatchedAutoAugment", "apply", "draw"]

# torchvision's AutoAugment.forward asks its magnitude functions for this many bins.
_NUM_BINS = 10
_NUM_OPS = 2
_SIGN_P = 0.5


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


@dataclass(frozen=True)
class _Table:
    """A policy's sub-policies as tensors, with each distinct (op name, magnitude bin) given one id."""

    augment: v2.AutoAugment  # the per-sample transform itself, whose ops `apply` calls on sub-batches
    specs: tuple[tuple[str, int | None], ...]  # id -> (op name, magnitude bin or None)
    op_id: torch.Tensor  # (P, 2) int64
    prob: torch.Tensor  # (P, 2) float32, compared in float32 like torchvision's `torch.rand(()) <= p`
    signed: torch.Tensor  # (P, 2) bool
    # Per op slot, every key (op id x 2 + negative) it can draw: signed ops with both signs. Python numbers, so
    # `select` reads nothing from a device to know them.
    slot_keys: tuple[tuple[int, ...], ...]

    def run(self, key: int, images: torch.Tensor) -> torch.Tensor:
        """The op of `key` (op id x 2 + negative) on `images`, through torchvision."""
        name, bin_ = self.specs[key // 2]
        magnitude = _magnitude(name, bin_, bool(key % 2), *images.shape[-2:])
        return apply_autoaugment_op(self.augment, images, name, magnitude)


@cache
def _table(policy: str, device: str) -> _Table:
    """Built once per policy and device from torchvision's own sub-policy list and augmentation space."""
    augment = v2.AutoAugment(autoaugment_policy(policy))
    space = autoaugment_space()
    specs: dict[tuple[str, int | None], int] = {}
    op_id, prob, signed = [], [], []
    slot_keys: list[set[int]] = [set() for _ in range(_NUM_OPS)]
    for sub in autoaugment_sub_policies(augment):
        op_id.append([specs.setdefault((name, bin_), len(specs)) for name, _, bin_ in sub])
        prob.append([p for _, p, _ in sub])
        signed.append([space[name][1] for name, _, _ in sub])
        for keys, id_, sign in zip(slot_keys, op_id[-1], signed[-1], strict=True):
            keys.update((id_ * 2, id_ * 2 + 1) if sign else (id_ * 2,))
    return _Table(
        augment=augment,
        specs=tuple(specs),
        op_id=torch.tensor(op_id, dtype=torch.int64, device=device),
        prob=torch.tensor(prob, dtype=torch.float32, device=device),
        signed=torch.tensor(signed, dtype=torch.bool, device=device),
        slot_keys=tuple(tuple(sorted(keys)) for keys in slot_keys),
    )


def draw(
    batch_size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    *,
    policy: str = "cifar10",
) -> AutoAugmentDraws:
    """Draw every image's sub-policy, op flags and signs at once (see the module docstring for the order)."""
    if device is None:
        device = generator.device if generator is not None else torch.device("cpu")
    device = torch.device(device)
    table = _table(policy, str(device))
    sub = torch.randint(len(table.op_id), (batch_size,), generator=generator, device=device)
    uniforms = torch.rand((batch_size, 4), generator=generator, device=device)
    prob, signed = table.prob[sub], table.signed[sub]

    applied, negative = [], []
    column = torch.zeros(batch_size, 1, dtype=torch.int64, device=device)
    for k in range(_NUM_OPS):
        flag = uniforms.gather(1, column).squeeze(1) <= prob[:, k]
        takes_sign = flag & signed[:, k]
        sign_u = uniforms.gather(1, column + 1).squeeze(1)
        applied.append(flag)
        negative.append(takes_sign & (sign_u <= _SIGN_P))
        column = column + 1 + takes_sign.long().unsqueeze(1)
    return AutoAugmentDraws(policy, sub, torch.stack(applied, 1), torch.stack(negative, 1))


@cache
def _magnitude(name: str, bin_: int | None, negative: bool, height: int, width: int) -> float:
    """The magnitude torchvision's forward would pass for this op, bin and sign at this image size (computed once:
    torchvision's tables are CPU tensors, read here as Python numbers)."""
    magnitudes_fn, signed = autoaugment_space()[name]
    magnitudes = magnitudes_fn(_NUM_BINS, height, width)
    if magnitudes is None:
        return 0.0
    magnitude = float(magnitudes[bin_])
    return -magnitude if signed and negative else magnitude


def _autocontrast(images: torch.Tensor) -> torch.Tensor:
    """torchvision's `autocontrast_image` for uint8 with its arithmetic step for step, but the flat channels' minimum
    and scale replaced by `torch.where` instead of a boolean-mask assignment, which reads the mask's count on the
    host (a sync on a GPU). The pixel tests hold it to torchvision's output."""
    bound = 255.0
    pixels = images.to(torch.float32)
    minimum = pixels.amin(dim=(-2, -1), keepdim=True)
    maximum = pixels.amax(dim=(-2, -1), keepdim=True)
    flat = maximum == minimum
    inv_scale = maximum.sub_(minimum).mul_(1.0 / bound)
    minimum = torch.where(flat, 0.0, minimum)
    inv_scale = torch.where(flat, 1.0, inv_scale)
    return pixels.sub_(minimum).div_(inv_scale).clamp_(0, bound).to(images.dtype)


GROUPINGS = ("select", "grouped")
# The grouping `apply` uses by device type: on a CPU host reads are free and arithmetic is the cost (select did
# about 11x grouped's work at batch 16), elsewhere (a GPU) a host read stalls the queue: select.
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


def _selected(out: torch.Tensor, rows: torch.Tensor, keys: torch.Tensor, table: _Table, slot: int) -> torch.Tensor:
    """Every key the slot can draw applied to the whole batch, each image taking its own key's result with
    `torch.where`: more arithmetic (one whole-batch call per key), no host read, fixed shapes. AutoContrast on uint8
    runs as `_autocontrast`: torchvision's kernel syncs."""
    result = out
    for key in table.slot_keys[slot]:
        autocontrast = table.specs[key // 2][0] == "AutoContrast" and out.dtype == torch.uint8
        candidate = _autocontrast(out) if autocontrast else table.run(key, out)
        pick = (rows & (keys == key)).view(-1, 1, 1, 1)
        result = torch.where(pick, candidate, result)
    return result


def apply(images: torch.Tensor, draws: AutoAugmentDraws, grouping: str | None = None) -> torch.Tensor:
    """Apply each image's drawn sub-policy: `select` (every op on the whole batch, picked per image with
    `torch.where`: no host reads, the GPU path) or `grouped` (one op call per drawn (op, magnitude, sign) group:
    less arithmetic, but host reads); by default the device's (`GROUPING_BY_DEVICE`). The two give the same pixels.

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
    table = _table(draws.policy, str(images.device))

    out = images.clone()
    sub = draws.sub_policy
    # The training step calls this inside bf16 autocast, where torchvision's affine grid (a bmm: Rotate, Shear)
    # and sharpness kernel (a conv2d) would run in bf16 and pick neighbouring pixels or levels; the data workers
    # run them in fp32. Autocast off keeps the two paths pixel-identical.
    with torch.autocast(device_type=images.device.type, enabled=False):
        for k in range(_NUM_OPS):
            negative = draws.negative[:, k] & table.signed[sub, k]
            keys = table.op_id[sub, k] * 2 + negative.long()
            if grouping == "grouped":
                out = _grouped(out, draws.applied[:, k], keys, table)
            else:
                out = _selected(out, draws.applied[:, k], keys, table, k)
    return out


class BatchedAutoAugment(torch.nn.Module):
    """`v2.AutoAugment(policy)` applied per sample, but to a whole batch on its device in a few grouped calls."""

    def __init__(self, policy: str = "cifar10") -> None:
        super().__init__()
        autoaugment_policy(policy)  # an unknown policy fails here, not at the first batch
        self.policy = policy

    def forward(self, images: torch.Tensor, world: int = 1, rank: int = 0) -> torch.Tensor:
        """Augment a uint8 (B, C, H, W) batch, every image with its own sub-policy. Under DDP every process seeds the
        same generator, so the draws are made for the global batch (`world` x B) and this process takes its rows
        (rank, rank + world, ...: the shard order of the training sampler): ranks draw different sub-policies, and
        together exactly a one-process run's draws."""
        drawn = draw(len(images) * world, device=images.device, policy=self.policy)
        rows = torch.arange(len(images), device=images.device) * world + rank
        mine = AutoAugmentDraws(drawn.policy, drawn.sub_policy[rows], drawn.applied[rows], drawn.negative[rows])
        return apply(images, mine)

    def extra_repr(self) -> str:
        return f"policy={self.policy!r}"
