"""Per-sample training transforms of the protocol, on uint8 (3, H, W) tensors inside the data workers.

Crop + flip are always on (but while Lightning overfits a few batches: fixed_batches.py); `autoaug` adds
AutoAugment (one sub-policy drawn per image, because the transform is called per sample) or ColorJitter, whichever
policy `catalog.resolve_policy` chose for the run.
The protocol's one-line description is `protocol.Protocol.describe`.
"""

from __future__ import annotations

import torch
from torchvision.transforms import v2

from vit_locality.catalog import AUTOAUGMENT_POLICIES, COLORJITTER

COLORJITTER_STRENGTH = 0.4  # brightness, contrast and saturation, on both data paths (data/on_device.py)


def autoaugment_policy(name: str) -> v2.AutoAugmentPolicy:
    """torchvision's enum for one of `catalog.AUTOAUGMENT_POLICIES`, whose values are those very names."""
    if name not in AUTOAUGMENT_POLICIES:
        raise ValueError(f"policy={name!r}: allowed AutoAugment policies are {', '.join(AUTOAUGMENT_POLICIES)}")
    return v2.AutoAugmentPolicy(name)


def build_train_transform(image_size: int, autoaug: bool, policy: str) -> v2.Compose:
    """RandomCrop(size, padding=size/8) + horizontal flip, then the policy's augmentation when `autoaug`."""
    steps: list[torch.nn.Module] = [
        v2.RandomCrop(image_size, padding=image_size // 8),
        v2.RandomHorizontalFlip(),
    ]
    if autoaug:
        if policy == COLORJITTER:
            strength = COLORJITTER_STRENGTH
            steps.append(v2.ColorJitter(brightness=strength, contrast=strength, saturation=strength))
        else:
            steps.append(v2.AutoAugment(autoaugment_policy(policy)))
    return v2.Compose(steps)
