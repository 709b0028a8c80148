"""The protocol's per-sample training transform on uint8 (3, H, W) tensors in the data workers: crop + flip, then
AutoAugment or ColorJitter (`autoaug`, the policy the protocol resolved), then RandomErasing (`erasing`)."""

from __future__ import annotations

import torch
from torchvision.transforms import v2

from vit_locality.catalog import COLORJITTER
from vit_locality.config.protocol import TrainingProtocol

COLORJITTER_STRENGTH = 0.4  # brightness, contrast and saturation, on both data paths (data/on_device.py)


def build_train_transform(image_size: int, protocol: TrainingProtocol) -> v2.Compose:
    """RandomCrop(size, padding=size/8) + flip, the policy when it runs per sample, erasing."""
    steps: list[torch.nn.Module] = [v2.RandomCrop(image_size, padding=image_size // 8), v2.RandomHorizontalFlip()]
    if protocol.per_sample_autoaugment:
        if protocol.policy == COLORJITTER:
            strength = COLORJITTER_STRENGTH
            steps.append(v2.ColorJitter(brightness=strength, contrast=strength, saturation=strength))
        else:
            steps.append(v2.AutoAugment(v2.AutoAugmentPolicy(protocol.policy)))
    if protocol.erasing:  # a box of the image set to 0 (torchvision's default value), last
        steps.append(v2.RandomErasing(p=protocol.erasing_prob, scale=protocol.erasing_scale, value=0))
    return v2.Compose(steps)
