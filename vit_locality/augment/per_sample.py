"""Per-sample training transforms of the protocol, on uint8 (3, H, W) tensors inside the data workers.

Crop + flip are always on (but while Lightning overfits a few batches: fixed_batches.py); `autoaug` adds
AutoAugment (one sub-policy drawn per image, because the transform is called per sample) or ColorJitter, whichever
policy the protocol resolved for the data set; `erasing` adds torchvision's RandomErasing last.
"""

from __future__ import annotations

import torch
from torchvision.transforms import v2

from vit_locality.catalog import COLORJITTER
from vit_locality.config.protocol import TrainingProtocol

COLORJITTER_STRENGTH = 0.4  # brightness, contrast and saturation, on both data paths (data/on_device.py)


def build_train_transform(image_size: int, protocol: TrainingProtocol) -> v2.Compose:
    """RandomCrop(size, padding=size/8) + horizontal flip, then the policy's augmentation when AutoAugment runs
    per sample (`protocol.per_sample_autoaugment`)."""
    steps: list[torch.nn.Module] = [
        v2.RandomCrop(image_size, padding=image_size // 8),
        v2.RandomHorizontalFlip(),
    ]
    if protocol.per_sample_autoaugment:
        if protocol.policy == COLORJITTER:
            strength = COLORJITTER_STRENGTH
            steps.append(v2.ColorJitter(brightness=strength, contrast=strength, saturation=strength))
        else:
            steps.append(v2.AutoAugment(v2.AutoAugmentPolicy(protocol.policy)))
    if protocol.erasing:  # a box of the image set to 0 (torchvision's default value), last
        steps.append(v2.RandomErasing(p=protocol.erasing_prob, scale=protocol.erasing_scale, value=0))
    return v2.Compose(steps)
