"""Attention across a pasted CutMix box: does a patch inside the box keep its attention inside it?

CutMix pastes a box of one image into another. Attention that crosses the box's border mixes the two images'
evidence, so a model trained under CutMix may learn to keep each patch's attention close: the obvious mechanism
for its locality. Here a patch-aligned box of image B is pasted into image A, and for every patch query inside
the box the share of its patch-key attention that lands outside the box is measured on the mixed image and on
the unmixed image B (the same content at the same place, no border).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vit_locality.attention.metrics import cross_border_mass
from vit_locality.model.vit import VisionTransformer


@dataclass(frozen=True)
class Box:
    """A box on the patch grid: rows top..top+height-1, columns left..left+width-1."""

    top: int
    left: int
    height: int
    width: int

    @classmethod
    def central(cls, grid_size: int) -> Box:
        """The centred box of half the grid's side: a quarter of the image. For scale, CutMix at alpha 1 pastes 0.30 of
        the image on average (its lambda, the kept share, has mean 0.5; the box is clipped at the borders)."""
        side = grid_size // 2
        start = (grid_size - side) // 2
        return cls(start, start, side, side)

    def mask(self, grid_size: int) -> torch.Tensor:
        """(g*g,) True for the patches inside the box, row-major."""
        if self.height < 1 or self.width < 1 or self.top < 0 or self.left < 0:
            raise ValueError(f"{self} is not a box on the grid")
        if self.top + self.height > grid_size or self.left + self.width > grid_size:
            raise ValueError(f"{self} does not fit the {grid_size} x {grid_size} grid")
        inside = torch.zeros(grid_size, grid_size, dtype=torch.bool)
        inside[self.top : self.top + self.height, self.left : self.left + self.width] = True
        return inside.flatten()

    def paste(self, into: torch.Tensor, source: torch.Tensor, patch_size: int) -> torch.Tensor:
        """`into` (B, C, H, W) with the box's pixels taken from `source`, as CutMix does with a patch-aligned box."""
        mixed = into.clone()
        rows = slice(self.top * patch_size, (self.top + self.height) * patch_size)
        cols = slice(self.left * patch_size, (self.left + self.width) * patch_size)
        mixed[..., rows, cols] = source[..., rows, cols]
        return mixed


@dataclass
class BoxResult:
    """Per (layer, head): cross-border mass on the mixed images and on the unmixed source images."""

    mixed: torch.Tensor  # (layers, heads)
    unmixed: torch.Tensor  # (layers, heads)
    box: Box
    pairs: int

    def uniform(self, grid_size: int) -> float:
        """What attention spread evenly over the patches would send across: the share of patches outside."""
        return 1.0 - self.box.height * self.box.width / grid_size**2


@torch.no_grad()
def box_locality(model: VisionTransformer, images: torch.Tensor, box: Box | None = None, batch: int = 64) -> BoxResult:
    """`images` normalised (N, 3, H, W), N >= 2: image i gets the box of image i + 1 (the last that of the first),
    and is compared with image i + 1 itself. Eval mode, autocast off; the model's mode is restored."""
    if len(images) < 2:
        raise ValueError("the box probe needs at least 2 images (one to paste from)")
    box = box or Box.central(model.grid_size)
    inside = box.mask(model.grid_size)
    sources = images.roll(-1, dims=0)
    mixed = box.paste(images, sources, model.patch_size)
    was_training = model.training
    model.eval()
    sums = {"mixed": None, "unmixed": None}
    try:
        with torch.autocast(device_type=images.device.type, enabled=False):
            for name, stack in (("mixed", mixed), ("unmixed", sources)):
                total = None
                for chunk in stack.split(batch):
                    _, maps = model.forward_with_attention(chunk.float())
                    part = torch.stack([cross_border_mass(attn, inside) * len(chunk) for attn in maps]).cpu()
                    total = part if total is None else total + part
                sums[name] = total / len(stack)
    finally:
        model.train(was_training)
    return BoxResult(sums["mixed"], sums["unmixed"], box, len(images))
