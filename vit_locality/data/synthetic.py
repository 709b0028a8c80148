"""Offline seeded textures for tests and quick checks: a class is a pattern kind and scale, at a random orientation,
phase and two colours, with noise, so augmentations keep the label and a CutMix box carries evidence by area."""

from __future__ import annotations

import math
from typing import Any

import torch

from vit_locality.data.base import GeneratedDataModule
from vit_locality.datasets import DatasetSpec

SYNTHETIC = DatasetSpec(
    name="synthetic",
    default_policy="cifar10",
    config="vit_locality.config.schema:SyntheticDataConfig",
    datamodule="SyntheticDataModule",
)

PATTERNS = ("stripes", "checkerboard", "dots", "grid", "rings")
SCALES = (1.0, 1.9)  # fine and coarse: the two periods of each pattern kind, relative to `period`


def _pattern(kind: str, u: torch.Tensor, v: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """A 0/1 texture from rotated coordinates (u, v) and the distance r to a centre, all in periods."""
    wave_u, wave_v = torch.cos(2 * math.pi * u), torch.cos(2 * math.pi * v)
    if kind == "stripes":
        return (wave_u > 0).float()
    if kind == "checkerboard":
        return (wave_u * wave_v > 0).float()
    if kind == "dots":
        return (wave_u + wave_v > 1.0).float()
    if kind == "grid":
        return (torch.maximum(wave_u, wave_v) > 0.75).float()
    return (torch.cos(2 * math.pi * r) > 0).float()  # rings


def class_texture(label: int, num_classes: int) -> tuple[str, float]:
    """Class k -> (pattern kind, relative scale). With more than 10 classes the scales spread further apart."""
    kind = PATTERNS[label % len(PATTERNS)]
    rung = label // len(PATTERNS)
    rungs = max(1, math.ceil(num_classes / len(PATTERNS)))
    scale = SCALES[rung] if rungs <= len(SCALES) else 1.0 + 1.6 * rung / (rungs - 1)
    return kind, scale


def generate_synthetic(
    count: int, num_classes: int, image_size: int, period: float, noise: float, seed: int, split_offset: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw `count` uint8 (3, H, W) images and balanced labels from (seed, split)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + split_offset)
    labels = torch.arange(count) % num_classes
    labels = labels[torch.randperm(count, generator=gen)]
    angle = torch.rand(count, generator=gen) * math.pi
    phase = torch.rand(count, 2, generator=gen)
    centre = torch.rand(count, 2, generator=gen) * image_size
    jitter = 1.0 + 0.1 * (2 * torch.rand(count, generator=gen) - 1)  # +-10% period: scale is a band, not a value
    dark = 0.05 + 0.35 * torch.rand(count, generator=gen)
    light = dark + 0.35 + (0.95 - dark - 0.35) * torch.rand(count, generator=gen)
    swap = torch.rand(count, generator=gen) < 0.5  # which of the two colours draws the pattern
    tint = 0.6 + 0.4 * torch.rand(count, 3, generator=gen)  # per-channel colour of the whole image
    pixel_noise = noise * torch.randn(count, 3, image_size, image_size, generator=gen)

    ys, xs = torch.meshgrid(torch.arange(image_size).float(), torch.arange(image_size).float(), indexing="ij")
    images = torch.empty(count, 3, image_size, image_size)
    for index in range(count):
        kind, scale = class_texture(int(labels[index]), num_classes)
        step = period * scale * float(jitter[index])
        cos, sin = math.cos(float(angle[index])), math.sin(float(angle[index]))
        u = (xs * cos + ys * sin) / step + float(phase[index, 0])
        v = (-xs * sin + ys * cos) / step + float(phase[index, 1])
        r = torch.hypot(xs - float(centre[index, 0]), ys - float(centre[index, 1])) / step
        mask = _pattern(kind, u, v, r)
        if swap[index]:
            mask = 1 - mask
        grey = dark[index] + (light[index] - dark[index]) * mask
        images[index] = grey * tint[index].view(3, 1, 1)
    images += pixel_noise
    return (images.clamp(0, 1) * 255).round().to(torch.uint8), labels


class SyntheticDataModule(GeneratedDataModule):
    """Seeded texture images: RGB, 32 x 32 by default, `num_classes` classes, configurable sizes, no files."""

    name = "synthetic"
    image_size = 32

    def __init__(
        self,
        train_size: int = 5000,
        test_size: int = 1000,
        num_classes: int = 10,
        image_size: int = 32,
        period: float = 4.0,
        noise: float = 0.08,
        generator_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        generation = dict(
            num_classes=num_classes, image_size=image_size, period=period, noise=noise, seed=generator_seed
        )
        super().__init__(train_size, test_size, generation, **kwargs)

    def generate(self, count: int, split_offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        return generate_synthetic(count, split_offset=split_offset, **self.generation)

    def class_names(self) -> list[str]:
        names = [
            f"{kind}_{'fine' if scale == min(SCALES) else 'coarse'}"
            for kind, scale in (class_texture(k, self.num_classes) for k in range(self.num_classes))
        ]
        if len(set(names)) < self.num_classes:
            names = [f"class_{k}_{name}" for k, name in enumerate(names)]
        return names
