"""Batch mixing on the device: `mix_batch`, the one entry point the LightningModule calls, does what the
protocol asks of a batch.

CutMix (Yun et al. 2019), with lambda corrected to the pasted area: one Beta(alpha, alpha) draw per batch sets the
box; each image's partner is given by a random permutation. The soft targets put (1 - lambda) on the partner's
label, lambda being the share of the image that is kept.

MixUp (Zhang et al. 2018), CutMix's spatially global control: one Beta(alpha, alpha) lambda per batch, each image
blended whole with its partner (a random permutation), lambda x own + (1 - lambda) x partner, images and targets
alike. A protocol runs one of the two, never both (Protocol.validate refuses it).

Label smoothing is not applied here: it happens once, in the loss. Every draw uses torch's global generator, which
the run reseeds per epoch (exact resume).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from vit_locality.protocol import Protocol


@dataclass
class CutMixResult:
    images: torch.Tensor  # the mixed batch, same dtype as the input
    targets: torch.Tensor  # (B, num_classes) soft targets, each row sums to 1
    lam: float  # share of each image that is its own (1 - pasted area / image area)
    partner: torch.Tensor  # (B,) index of the image pasted into each one
    box: tuple[int, int, int, int]  # (top, left, bottom, right) of the pasted region, exclusive bounds


def cutmix_batch(
    images: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    alpha: float = 1.0,
    lam: float | None = None,
) -> CutMixResult:
    """Paste one box from a permuted copy of the batch into every image; return images and soft targets.

    `lam` fixes the drawn lambda (tests); otherwise it is drawn from Beta(alpha, alpha) with torch's global
    generator, so `seed` makes runs reproducible.
    """
    batch, _, height, width = images.shape
    if lam is None:
        lam = float(torch.distributions.Beta(alpha, alpha).sample())
    cut_ratio = (1.0 - lam) ** 0.5
    cut_h, cut_w = int(height * cut_ratio), int(width * cut_ratio)
    cy, cx = int(torch.randint(height, ())), int(torch.randint(width, ()))
    top, bottom = max(cy - cut_h // 2, 0), min(cy + cut_h // 2, height)
    left, right = max(cx - cut_w // 2, 0), min(cx + cut_w // 2, width)
    partner = torch.randperm(batch).to(images.device)

    mixed = images.clone()
    mixed[:, :, top:bottom, left:right] = images[partner, :, top:bottom, left:right]
    kept = 1.0 - (bottom - top) * (right - left) / (height * width)
    own = F.one_hot(labels, num_classes).to(torch.float32)
    targets = kept * own + (1.0 - kept) * own[partner]
    return CutMixResult(mixed, targets, kept, partner, (top, left, bottom, right))


@dataclass
class MixUpResult:
    images: torch.Tensor  # float32 (B, C, H, W), lam x own + (1 - lam) x partner, on the input's 0..255 scale
    targets: torch.Tensor  # (B, num_classes) soft targets, each row sums to 1
    lam: float  # weight of each image's own pixels and label
    partner: torch.Tensor  # (B,) index of the image blended into each one


def mixup_batch(
    images: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    alpha: float = 1.0,
    lam: float | None = None,
) -> MixUpResult:
    """Blend every image with a permuted copy of the batch; return the blended images and soft targets.

    The uint8 batch becomes float32 (a blend has fractional values); normalising afterwards is affine, so it commutes
    with the blend. `lam` fixes the drawn lambda (tests); otherwise it is drawn from Beta(alpha, alpha)."""
    if lam is None:
        lam = float(torch.distributions.Beta(alpha, alpha).sample())
    partner = torch.randperm(len(images)).to(images.device)
    pixels = images.float()
    mixed = lam * pixels + (1.0 - lam) * pixels[partner]
    own = F.one_hot(labels, num_classes).to(torch.float32)
    return MixUpResult(mixed, lam * own + (1.0 - lam) * own[partner], lam, partner)


def cutmix_this_batch(prob: float) -> bool:
    """CutMix on a batch with probability `prob` (Yun et al.'s CIFAR recipe used 0.5). At 1 nothing is drawn, so
    runs with the default keep the random stream they always had."""
    return prob >= 1.0 or float(torch.rand(())) < prob


def mix_batch(
    images: torch.Tensor, labels: torch.Tensor, num_classes: int, protocol: Protocol
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch as the protocol trains on it: (images, targets for the loss, labels accuracy is measured against).

    Unmixed, the targets are the labels. Mixed, they are (B, num_classes) soft targets and accuracy is measured
    against each image's dominant label."""
    if protocol.cutmix and cutmix_this_batch(protocol.cutmix_prob):
        mixed = cutmix_batch(images, labels, num_classes, protocol.cutmix_alpha)
        return mixed.images, mixed.targets, mixed.targets.argmax(dim=1)
    if protocol.mixup:
        blended = mixup_batch(images, labels, num_classes, protocol.mixup_alpha)
        return blended.images, blended.targets, blended.targets.argmax(dim=1)
    return images, labels, labels
