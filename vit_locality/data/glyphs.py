"""Offline stroke-drawn glyphs (the demo's data): one seven-segment-style glyph per image at a random position, size,
slant, stroke, colour and polarity, over noise. The class is in which strokes meet where, so it needs neighbouring
patches combined; no class mirrors another, so the protocol's augmentations keep the label."""

from __future__ import annotations

import math
from typing import Any

import torch

from vit_locality.data.base import GeneratedDataModule
from vit_locality.datasets import DatasetSpec

GLYPHS = DatasetSpec(
    name="glyphs",
    default_policy="cifar10",
    config="vit_locality.config.schema:GlyphsDataConfig",
    datamodule="GlyphsDataModule",
)

# Segment endpoints on a unit box (x right, y down): a top, b upper right, c lower right, d bottom, e lower left,
# f upper left, g middle. A left-right mirror swaps b <-> f and c <-> e.
SEGMENTS = {
    "a": ((0.0, 0.0), (1.0, 0.0)),
    "b": ((1.0, 0.0), (1.0, 0.5)),
    "c": ((1.0, 0.5), (1.0, 1.0)),
    "d": ((0.0, 1.0), (1.0, 1.0)),
    "e": ((0.0, 0.5), (0.0, 1.0)),
    "f": ((0.0, 0.0), (0.0, 0.5)),
    "g": ((0.0, 0.5), (1.0, 0.5)),
}
MIRROR = str.maketrans("bcef", "fecb")
# Ten glyphs, each at least two segments away from every other even mirrored, and none another's mirror image
# (docs/demo_design.md).
CLASS_SEGMENTS = {
    "-": "g",
    "0": "abcdef",
    "1": "bc",
    "2": "abdeg",
    "3": "abcdg",
    "4": "bcfg",
    "A": "abcefg",
    "d": "bcdeg",
    "n": "ceg",
    "u": "cde",
}
CLASS_NAMES = tuple(CLASS_SEGMENTS)
GLYPH_ASPECT = (0.5, 0.7)  # width / height, drawn uniformly in this range


def mirrored(segments: str) -> str:
    """The glyph's segments after a left-right flip, sorted."""
    return "".join(sorted(segments.translate(MIRROR)))


def _segment_distance(points: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
    """Distance of points (H, W, 2) to segments start/end (N, 7, 2): (N, 7, H, W)."""
    p = points.view(1, 1, *points.shape)
    s, d = start[..., None, None, :], (end - start)[..., None, None, :]
    t = (((p - s) * d).sum(-1) / (d * d).sum(-1).clamp_min(1e-6)).clamp(0, 1)
    return (p - s - t.unsqueeze(-1) * d).norm(dim=-1)


def generate_glyphs(
    count: int,
    num_classes: int,
    image_size: int,
    min_height: float,
    max_height: float,
    clutter: int,
    noise: float,
    seed: int,
    split_offset: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw `count` uint8 (3, H, W) images and balanced labels from (seed, split); heights are shares of the side."""
    if not 2 <= num_classes <= len(CLASS_NAMES):
        raise ValueError(f"data.num_classes={num_classes}: the glyph set has 2 to {len(CLASS_NAMES)} classes")
    gen = torch.Generator().manual_seed(seed * 1_000_003 + split_offset)
    labels = torch.arange(count) % num_classes
    labels = labels[torch.randperm(count, generator=gen)]
    size = float(image_size)
    height = size * (min_height + (max_height - min_height) * torch.rand(count, generator=gen))
    narrow, wide = GLYPH_ASPECT
    width = height * (narrow + (wide - narrow) * torch.rand(count, generator=gen))
    slant = (torch.rand(count, generator=gen) * 2 - 1) * math.radians(12)
    stroke = 1.8 + 1.4 * torch.rand(count, generator=gen)  # pixels
    margin = stroke / 2 + 1
    left = margin + (size - width - 2 * margin).clamp_min(0) * torch.rand(count, generator=gen)
    top = margin + (size - height - 2 * margin).clamp_min(0) * torch.rand(count, generator=gen)
    dark = 0.05 + 0.35 * torch.rand(count, generator=gen)
    light = dark + 0.35 + (0.95 - dark - 0.35) * torch.rand(count, generator=gen)
    swap = torch.rand(count, generator=gen) < 0.5  # which of the two levels draws the glyph
    tint = 0.6 + 0.4 * torch.rand(count, 3, generator=gen)
    pixel_noise = noise * torch.randn(count, 3, image_size, image_size, generator=gen)
    junk_start = torch.rand(count, max(clutter, 1), 2, generator=gen) * size
    junk_angle = torch.rand(count, max(clutter, 1), generator=gen) * 2 * math.pi
    junk_length = 2 + 3 * torch.rand(count, max(clutter, 1), generator=gen)

    unit = torch.tensor([pair for pair in SEGMENTS.values()])  # (7, 2 ends, 2)
    box = unit.unsqueeze(0).repeat(count, 1, 1, 1)
    x = box[..., 0] * width.view(-1, 1, 1)
    y = box[..., 1] * height.view(-1, 1, 1)
    x = x - (y - height.view(-1, 1, 1) / 2) * torch.tan(slant).view(-1, 1, 1)  # slant about the glyph's middle
    ends = torch.stack([x + left.view(-1, 1, 1), y + top.view(-1, 1, 1)], dim=-1)  # (N, 7, 2, 2)
    coords = torch.arange(image_size, dtype=torch.float32) + 0.5
    ys, xs = torch.meshgrid(coords, coords, indexing="ij")
    points = torch.stack([xs, ys], dim=-1)
    table = torch.tensor([[float(s in CLASS_SEGMENTS[c]) for s in SEGMENTS] for c in CLASS_NAMES])
    active = table[labels]  # (N, 7) 0/1: which of the segments a..g each image draws
    half = (stroke / 2).view(-1, 1, 1)
    canvas = torch.zeros(count, image_size, image_size)
    for chunk in range(0, count, 256):
        part = slice(chunk, chunk + 256)
        dist = _segment_distance(points, ends[part, :, 0], ends[part, :, 1])
        dist = torch.where(active[part, :, None, None] > 0, dist, torch.inf).amin(dim=1)
        ink = (half[part] + 0.5 - dist).clamp(0, 1)
        if clutter > 0:
            start = junk_start[part, :clutter]
            direction = torch.stack([torch.cos(junk_angle[part]), torch.sin(junk_angle[part])], -1)[:, :clutter]
            end = start + direction * junk_length[part, :clutter, None]
            junk = _segment_distance(points, start, end).amin(dim=1)
            ink = torch.maximum(ink, (half[part] + 0.5 - junk).clamp(0, 1))
        canvas[part] = ink
    canvas = torch.where(swap.view(-1, 1, 1), 1 - canvas, canvas)
    grey = dark.view(-1, 1, 1) + (light - dark).view(-1, 1, 1) * canvas
    images = grey.unsqueeze(1) * tint.view(count, 3, 1, 1) + pixel_noise
    return (images.clamp(0, 1) * 255).round().to(torch.uint8), labels


class GlyphsDataModule(GeneratedDataModule):
    """Seeded stroke-glyph images: RGB, 32 x 32 by default, up to 10 classes, no files."""

    name = "glyphs"
    image_size = 32

    def __init__(
        self,
        train_size: int = 5000,
        test_size: int = 1000,
        num_classes: int = 10,
        image_size: int = 32,
        min_height: float = 0.6,
        max_height: float = 0.8,
        clutter: int = 0,
        noise: float = 0.05,
        generator_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        generation = dict(
            num_classes=num_classes,
            image_size=image_size,
            min_height=min_height,
            max_height=max_height,
            clutter=clutter,
            noise=noise,
            seed=generator_seed,
        )
        super().__init__(train_size, test_size, generation, **kwargs)

    def generate(self, count: int, split_offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        return generate_glyphs(count, split_offset=split_offset, **self.generation)

    def class_names(self) -> list[str]:
        return list(CLASS_NAMES[: self.num_classes])
