"""Batch mixing on the device: `mix_batch`, the one entry point the LightningModule calls.

CutMix (Yun et al. 2019) pastes into every image one box of its partner (a random permutation), the box's size set
by one Beta(alpha, alpha) draw per batch; lambda, the share of the image kept, is corrected to the pasted area. MixUp
(Zhang et al. 2018), CutMix's spatially global control, blends every image whole with its partner: lambda x own +
(1 - lambda) x partner. The soft targets mix the labels with the same weights. A protocol runs one of the two, never
both (the `aug` section refuses it); label smoothing happens once, in the loss. Every draw uses torch's global
generator of the batch's device, which the run reseeds per epoch (exact resume).

No host reads (on a GPU each one stalls the step): the lambdas, boxes, partners and the per-batch CutMix coin
(`aug.cutmix_prob`) stay tensors on the batch's device, and a batch the coin leaves unmixed is selected with
`torch.where`, so with `cutmix_prob < 1` every batch draws CutMix's lambda, box and partners, used or not. Lambda is
drawn as torch's `Beta.sample` draws it, so on a CPU a cell with `cutmix_prob=1` keeps the stream it always had.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch

from vit_locality.config.protocol import TrainingProtocol


def _beta(alpha: float, device: torch.device) -> torch.Tensor:
    """One Beta(alpha, alpha) draw on `device`, float32, as `torch.distributions.Beta(alpha, alpha).sample()` makes it
    (the same generator calls), without its argument checks, which read the host."""
    return torch._sample_dirichlet(_constant(("concentration", float(alpha)), str(device)))[0]


def _one_hot(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """float32 one-hot rows, the labels' rows of the identity: `F.one_hot` checks the labels' range on the host (a
    sync on a GPU)."""
    return _constant(("eye", num_classes), str(labels.device)).index_select(0, labels)


@cache
def _constant(what: tuple, device: str) -> torch.Tensor:
    """The constants of a batch, made once per device: every op a batch dispatches costs the host time a GPU waits
    for, and a tensor made from Python values is a copy to the device. `what` names one:
    ("concentration", alpha): Beta(alpha, alpha)'s, (2,) float32; ("eye", n): the (n, n) float32 identity;
    ("halves", H, W): [H / 2, W / 2] float64; ("limits", H, W): [H, W] int64; ("pixels", H, W): every pixel's
    (y, x), (H, W, 2)."""
    kind, *args = what
    if kind == "concentration":
        return torch.full((2,), args[0], device=device)
    if kind == "eye":
        return torch.eye(args[0], dtype=torch.float32, device=device)
    height, width = args  # the per-size ones are made on the host and copied once
    if kind == "pixels":
        ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
        return torch.stack([ys, xs], 2).to(device)
    if kind == "halves":
        return torch.tensor([height / 2, width / 2], dtype=torch.float64).to(device)
    return torch.tensor(args, dtype=torch.int64).to(device)


@dataclass
class CutMixResult:
    images: torch.Tensor  # the mixed batch, same dtype as the input
    targets: torch.Tensor  # (B, num_classes) soft targets, each row sums to 1
    kept: torch.Tensor  # float64 scalar: share of each image that is its own (1 - pasted area / image area)
    partner: torch.Tensor  # (B,) index of the image pasted into each one
    bounds: torch.Tensor  # (4,) int64: top, left, bottom, right of the pasted region, exclusive bounds

    @property
    def lam(self) -> float:
        """`kept` as a Python number (a host read: for tests and reports, not the training step)."""
        return float(self.kept)

    @property
    def box(self) -> tuple[int, int, int, int]:
        """`bounds` as Python numbers (a host read)."""
        top, left, bottom, right = (int(v) for v in self.bounds.tolist())
        return top, left, bottom, right


def cutmix_batch(
    images: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    alpha: float = 1.0,
    lam: float | torch.Tensor | None = None,
) -> CutMixResult:
    """Paste one box from a permuted copy of the batch into every image; return images and soft targets.
    `lam` fixes the drawn lambda (tests). The box's (top, left) and (bottom, right) are computed as pairs, with
    the per-size constants made once (`_constant`): the same draws, in the same order, and the same arithmetic as
    one coordinate at a time, in fewer ops."""
    batch, _, height, width = images.shape
    device = images.device
    halves, limits = (
        _constant(("halves", height, width), str(device)),
        _constant(("limits", height, width), str(device)),
    )
    drawn = _beta(alpha, device).double() if lam is None else torch.as_tensor(lam, dtype=torch.float64, device=device)
    # Half the box's height and width, floor(floor(H r) / 2) = floor(H / 2 x r): halving is exact in floating point.
    half = (halves * (1.0 - drawn).sqrt()).floor().long()
    centre = torch.stack([torch.randint(height, (), device=device), torch.randint(width, (), device=device)])
    low, high = (centre - half).clamp(min=0), torch.minimum(centre + half, limits)  # top, left; bottom, right
    partner = torch.randperm(batch, device=device)

    pixels = _constant(("pixels", height, width), str(device))
    inside = ((pixels >= low) & (pixels < high)).all(2)
    mixed = torch.where(inside, images[partner], images)
    kept = 1.0 - (high - low).prod().double() / (height * width)  # high >= centre >= low: no empty side
    own = _one_hot(labels, num_classes)
    share, rest = kept.to(torch.float32), (1.0 - kept).to(torch.float32)  # each rounded from float64, as before
    targets = torch.addcmul(share * own, rest, own[partner])  # products of 0 or 1: one rounding, the sum's
    return CutMixResult(mixed, targets, kept, partner, torch.cat([low, high]))


@dataclass
class MixUpResult:
    images: torch.Tensor  # float32 (B, C, H, W), lam x own + (1 - lam) x partner, on the input's 0..255 scale
    targets: torch.Tensor  # (B, num_classes) soft targets, each row sums to 1
    weight: torch.Tensor  # float64 scalar: weight of each image's own pixels and label
    partner: torch.Tensor  # (B,) index of the image blended into each one

    @property
    def lam(self) -> float:
        """`weight` as a Python number (a host read: for tests and reports)."""
        return float(self.weight)


def mixup_batch(
    images: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    alpha: float = 1.0,
    lam: float | torch.Tensor | None = None,
) -> MixUpResult:
    """Blend every image with a permuted copy of the batch; return the blended images and soft targets.

    The uint8 batch becomes float32 (a blend has fractional values); normalising afterwards is affine, so it commutes
    with the blend. `lam` fixes the drawn lambda (tests)."""
    device = images.device
    wide = _beta(alpha, device).double() if lam is None else torch.as_tensor(lam, dtype=torch.float64, device=device)
    weight, rest = wide.to(torch.float32), (1.0 - wide).to(torch.float32)  # each rounded from float64
    partner = torch.randperm(len(images), device=device)
    pixels = images.float()
    mixed = weight * pixels + rest * pixels[partner]
    own = _one_hot(labels, num_classes)
    return MixUpResult(mixed, weight * own + rest * own[partner], wide, partner)


def cutmix_this_batch(prob: float, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """Whether CutMix mixes this batch, with probability `prob` (Yun et al.'s CIFAR recipe used 0.5), as a bool
    tensor on `device` (no host read). At 1 nothing is drawn and None says "always", so runs with the default keep
    the random stream they always had."""
    if prob >= 1.0:
        return None
    return torch.rand((), device=device) < prob


def mix_batch(
    images: torch.Tensor, labels: torch.Tensor, num_classes: int, protocol: TrainingProtocol
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch as the protocol trains on it: (images, targets for the loss, labels accuracy is measured against).

    Unmixed, the targets are the labels. Mixed, they are (B, num_classes) soft targets and accuracy is measured
    against each image's dominant label. With `cutmix_prob < 1` a batch the coin leaves alone keeps its pixels and
    gets one-hot targets (the same loss as its labels, label smoothing included)."""
    if protocol.cutmix and protocol.cutmix_prob > 0:
        coin = cutmix_this_batch(protocol.cutmix_prob, images.device)
        mixed = cutmix_batch(images, labels, num_classes, protocol.cutmix_alpha)
        if coin is None:
            return mixed.images, mixed.targets, mixed.targets.argmax(dim=1)
        own = _one_hot(labels, num_classes)
        targets = torch.where(coin, mixed.targets, own)
        return torch.where(coin, mixed.images, images), targets, targets.argmax(dim=1)
    if protocol.mixup:
        blended = mixup_batch(images, labels, num_classes, protocol.mixup_alpha)
        return blended.images, blended.targets, blended.targets.argmax(dim=1)
    return images, labels, labels
