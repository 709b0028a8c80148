"""A position table whose locality is known by construction."""

from __future__ import annotations

import torch


def gaussian_bumps(width: float, g: int = 8) -> torch.Tensor:
    """A (1 + g*g, g*g) position table: patch k's embedding is a Gaussian of `width` patch steps centred on k, sampled
    at every patch (row 0, the CLS token, is ignored by the measures)."""
    ys, xs = torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")
    points = torch.stack([ys.flatten(), xs.flatten()], 1).double()
    squared = ((points[:, None] - points[None]) ** 2).sum(-1)
    return torch.cat([torch.zeros(1, g * g, dtype=torch.float64), torch.exp(-squared / (2 * width**2))])
