"""The protocol's augmentations. Per sample in the data workers: crop + flip, AutoAugment or ColorJitter, Random
Erasing. Per batch on the device (`mix_batch`): CutMix pastes one box of a partner (a random permutation), sized by a
Beta(alpha, alpha) lambda corrected to the pasted area; MixUp blends whole images; targets mix the labels alike, and
nothing is read by the host. While Lightning overfits, neither: the same pixels every epoch."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torchvision.transforms import v2

from vit_locality.catalog import COLORJITTER
from vit_locality.config.protocol import TrainingProtocol

COLORJITTER_STRENGTH = 0.4  # brightness, contrast and saturation, on both data paths (data/on_device.py)
FIXED_BATCHES_LINE = (
    "trainer.overfit_batches=%s: the same training images every epoch, in data set order; random crop, flip, "
    "AutoAugment, ColorJitter, CutMix and MixUp are off"
)


def fixed_batches(trainer: Any) -> bool:
    """Whether `trainer` (a Lightning Trainer, or None outside a fit) overfits a few batches."""
    overfit = getattr(trainer, "overfit_batches", 0) if trainer is not None else 0
    return isinstance(overfit, int | float) and overfit > 0


def build_train_transform(image_size: int, protocol: TrainingProtocol) -> v2.Compose:
    """RandomCrop(size, padding=size/8) + flip, the policy when it runs per sample, then erasing (to 0)."""
    steps: list[torch.nn.Module] = [v2.RandomCrop(image_size, padding=image_size // 8), v2.RandomHorizontalFlip()]
    if protocol.per_sample_autoaugment:
        if protocol.policy == COLORJITTER:
            strength = COLORJITTER_STRENGTH
            steps.append(v2.ColorJitter(brightness=strength, contrast=strength, saturation=strength))
        else:
            steps.append(v2.AutoAugment(v2.AutoAugmentPolicy(protocol.policy)))
    if protocol.erasing:
        steps.append(v2.RandomErasing(p=protocol.erasing_prob, scale=protocol.erasing_scale, value=0))
    return v2.Compose(steps)


def _beta(alpha: float, device: torch.device) -> torch.Tensor:
    """One float32 Beta(alpha, alpha) draw, as `torch.distributions.Beta.sample()` makes it, without its host reads."""
    return torch._sample_dirichlet(_constant(("concentration", float(alpha)), str(device)))[0]


def one_hot_rows(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """float32 one-hot rows, without `F.one_hot`'s range check on the host."""
    return _constant(("eye", num_classes), str(labels.device)).index_select(0, labels)


def _constant(what: tuple, device: str) -> torch.Tensor:
    """A batch's constant: made once per device when eager, built in the graph when compiled."""
    return _make_constant(what, device) if torch.compiler.is_compiling() else _cached_constant(what, device)


def _make_constant(what: tuple, device: str) -> torch.Tensor:
    """The constant `what` names: ("concentration", alpha): (2,) float32; ("eye", n): the float32 identity;
    ("halves", H, W): [H / 2, W / 2] float64; ("limits", H, W): [H, W] int64; ("pixels", H, W): every pixel's (y, x)."""
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


_cached_constant = cache(_make_constant)


@dataclass
class CutMixResult:
    images: torch.Tensor  # the mixed batch, same dtype as the input
    targets: torch.Tensor  # (B, num_classes) soft targets, each row sums to 1
    kept: torch.Tensor  # float64 scalar: share of each image that is its own (1 - pasted area / image area)
    partner: torch.Tensor  # (B,) index of the image pasted into each one
    bounds: torch.Tensor  # (4,) int64: top, left, bottom, right of the pasted region, exclusive bounds

    @property
    def lam(self) -> float:
        """`kept` as a Python number (a host read)."""
        return float(self.kept)

    @property
    def box(self) -> tuple[int, int, int, int]:
        """`bounds` as Python numbers (a host read)."""
        top, left, bottom, right = self.bounds.tolist()
        return top, left, bottom, right


def cutmix_batch(
    images: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    alpha: float = 1.0,
    lam: float | torch.Tensor | None = None,
) -> CutMixResult:
    """Paste one box from a permuted copy of the batch into every image; `lam` fixes the drawn lambda (tests)."""
    batch, _, height, width = images.shape
    device, where = images.device, str(images.device)
    halves, limits = _constant(("halves", height, width), where), _constant(("limits", height, width), where)
    drawn = _beta(alpha, device).double() if lam is None else torch.as_tensor(lam, dtype=torch.float64, device=device)
    # Half the box's height and width, floor(floor(H r) / 2) = floor(H / 2 x r): halving is exact in floating point.
    half = (halves * (1.0 - drawn).sqrt()).floor().long()
    centre = torch.stack([torch.randint(height, (), device=device), torch.randint(width, (), device=device)])
    low, high = (centre - half).clamp(min=0), torch.minimum(centre + half, limits)  # top, left; bottom, right
    partner = torch.randperm(batch, device=device)

    pixels = _constant(("pixels", height, width), where)
    inside = ((pixels >= low) & (pixels < high)).all(2)
    mixed = torch.where(inside, images[partner], images)
    kept = 1.0 - (high - low).prod().double() / (height * width)  # high >= centre >= low: no empty side
    own = one_hot_rows(labels, num_classes)
    share, rest = kept.to(torch.float32), (1.0 - kept).to(torch.float32)  # each rounded from float64
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
        """`weight` as a Python number (a host read)."""
        return float(self.weight)


def mixup_batch(
    images: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    alpha: float = 1.0,
    lam: float | torch.Tensor | None = None,
) -> MixUpResult:
    """Blend every image, as float32, with a permuted copy of the batch; `lam` fixes the drawn lambda (tests)."""
    device = images.device
    wide = _beta(alpha, device).double() if lam is None else torch.as_tensor(lam, dtype=torch.float64, device=device)
    weight, rest = wide.to(torch.float32), (1.0 - wide).to(torch.float32)  # each rounded from float64
    partner = torch.randperm(len(images), device=device)
    pixels = images.float()
    mixed = weight * pixels + rest * pixels[partner]
    own = one_hot_rows(labels, num_classes)
    return MixUpResult(mixed, weight * own + rest * own[partner], wide, partner)


def cutmix_this_batch(prob: float, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """Whether CutMix mixes this batch, as a bool tensor on `device`; None (always, drawing nothing) at 1."""
    if prob >= 1.0:
        return None
    return torch.rand((), device=device) < prob


def mix_batch(
    images: torch.Tensor, labels: torch.Tensor, num_classes: int, protocol: TrainingProtocol
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(images, targets for the loss, labels for accuracy: each image's dominant label when mixed)."""
    if protocol.cutmix and protocol.cutmix_prob > 0:
        coin = cutmix_this_batch(protocol.cutmix_prob, images.device)
        mixed = cutmix_batch(images, labels, num_classes, protocol.cutmix_alpha)
        if coin is None:
            return mixed.images, mixed.targets, mixed.targets.argmax(dim=1)
        own = one_hot_rows(labels, num_classes)
        targets = torch.where(coin, mixed.targets, own)
        return torch.where(coin, mixed.images, images), targets, targets.argmax(dim=1)
    if protocol.mixup:
        blended = mixup_batch(images, labels, num_classes, protocol.mixup_alpha)
        return blended.images, blended.targets, blended.targets.argmax(dim=1)
    return images, labels, labels
