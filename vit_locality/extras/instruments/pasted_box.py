"""Attention across a pasted CutMix box: the share landing outside the box, on mixed images and on their sources."""

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
        """The centred box of half the grid's side: a quarter of the image (CutMix at alpha 1 pastes 0.30)."""
        side = grid_size // 2
        start = (grid_size - side) // 2
        return cls(start, start, side, side)

    def mask(self, grid_size: int) -> torch.Tensor:
        """(g*g,) True for the patches inside the box, row-major."""
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

    def uniform(self, grid_size: int) -> float:
        """What attention spread evenly over the patches would send across: the share of patches outside."""
        return 1.0 - self.box.height * self.box.width / grid_size**2


@torch.no_grad()
def box_locality(model: VisionTransformer, images: torch.Tensor, batch: int = 64) -> BoxResult:
    """Image i of normalised `images` gets the central box of image i + 1 (cyclically), compared with that image."""
    if len(images) < 2:
        raise ValueError("the box probe needs at least 2 images (one to paste from)")
    box = Box.central(model.grid_size)
    inside = box.mask(model.grid_size)
    sources = images.roll(-1, dims=0)
    mixed = box.paste(images, sources, model.patch_size)
    was_training = model.training
    model.eval()

    def mean_mass(stack: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(())
        for chunk in stack.split(batch):
            _, maps = model.forward_with_attention(chunk.float())
            total = total + torch.stack([cross_border_mass(attn, inside) * len(chunk) for attn in maps]).cpu()
        return total / len(stack)

    try:
        with torch.autocast(device_type=images.device.type, enabled=False):
            found = mean_mass(mixed), mean_mass(sources)
    finally:
        model.train(was_training)
    return BoxResult(*found, box)
