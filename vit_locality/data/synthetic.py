"""An offline data set generated from a seed in seconds: the default for the demo and the tests.

Each class owns a few 8 x 8 colour motifs; an image is a noisy background with several of its class's motifs
pasted at random places. Class evidence is therefore local (a motif covers 2 x 2 patches of 4 px) and spread
across the image, so a partial view, as CutMix makes, still carries a proportional share of the label.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .base import ImageArrays, ImageDataModule


def generate_synthetic(
    count: int,
    num_classes: int,
    image_size: int,
    motifs_per_class: int,
    motifs_per_image: int,
    noise: float,
    seed: int,
    split_offset: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw `count` uint8 (3, H, W) images and balanced labels; the motif bank depends on `seed` alone."""
    bank_gen = torch.Generator().manual_seed(seed)
    coarse = torch.rand(num_classes, motifs_per_class, 3, 4, 4, generator=bank_gen)
    bank = F.interpolate(coarse.flatten(0, 1), size=(8, 8), mode="nearest").view(num_classes, motifs_per_class, 3, 8, 8)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + split_offset)
    labels = torch.arange(count) % num_classes
    labels = labels[torch.randperm(count, generator=gen)]
    images = 0.5 + noise * torch.randn(count, 3, image_size, image_size, generator=gen)
    images += 0.1 * torch.randn(count, 3, 1, 1, generator=gen)  # per-image colour cast
    choice = torch.randint(motifs_per_class, (count, motifs_per_image), generator=gen)
    corner = torch.randint(image_size - 8 + 1, (count, motifs_per_image, 2), generator=gen)
    gain = 0.7 + 0.6 * torch.rand(count, motifs_per_image, generator=gen)
    for slot in range(motifs_per_image):
        for index in range(count):
            top, left = int(corner[index, slot, 0]), int(corner[index, slot, 1])
            motif = bank[labels[index], choice[index, slot]] * gain[index, slot]
            images[index, :, top : top + 8, left : left + 8] = motif
    return (images.clamp(0, 1) * 255).round().to(torch.uint8), labels


class SyntheticDataModule(ImageDataModule):
    """Seeded local-motif images: RGB, 32 x 32 by default, `num_classes` classes, configurable sizes, no files."""

    name = "synthetic"
    image_size = 32

    def __init__(
        self,
        train_size: int = 5000,
        test_size: int = 1000,
        num_classes: int = 10,
        image_size: int = 32,
        motifs_per_class: int = 3,
        motifs_per_image: int = 4,
        noise: float = 0.15,
        generator_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.image_size = image_size
        self.sizes = (train_size, test_size)
        self.generation = dict(
            num_classes=num_classes,
            image_size=image_size,
            motifs_per_class=motifs_per_class,
            motifs_per_image=motifs_per_image,
            noise=noise,
            seed=generator_seed,
        )

    def load_arrays(self) -> ImageArrays:
        train_x, train_y = generate_synthetic(self.sizes[0], split_offset=1, **self.generation)
        test_x, test_y = generate_synthetic(self.sizes[1], split_offset=2, **self.generation)
        names = [f"class_{k}" for k in range(self.num_classes)]
        return ImageArrays(train_x, train_y, test_x, test_y, names)
