"""A 2-D sine-cosine start for the learned position embeddings: the grid's geometry from the first step."""

from __future__ import annotations

import torch

# Frequencies from 1 towards 1/SINCOS_BASE radian per patch: 10,000 would leave most channels of 8 patches flat.
SINCOS_BASE = 100.0


def sincos_position_code(dim: int, grid_size: int, base: float = SINCOS_BASE) -> torch.Tensor:
    """(1 + grid_size**2, dim): a zero CLS row, then per patch (row-major) sin and cos of the row and of the column
    index, a quarter of the channels each, at frequencies spaced geometrically from 1 towards 1/base."""
    if dim % 4:
        raise ValueError(f"model.dim={dim}: a sine-cosine position code needs a multiple of 4")
    quarter = dim // 4
    frequencies = base ** (-torch.arange(quarter, dtype=torch.float64) / quarter)
    rows, cols = torch.meshgrid(torch.arange(grid_size), torch.arange(grid_size), indexing="ij")
    row_angles = rows.flatten().double()[:, None] * frequencies
    col_angles = cols.flatten().double()[:, None] * frequencies
    code = torch.cat([row_angles.sin(), row_angles.cos(), col_angles.sin(), col_angles.cos()], dim=1)
    return torch.cat([torch.zeros(1, dim, dtype=torch.float64), code]).float()
