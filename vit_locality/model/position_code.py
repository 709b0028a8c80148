"""How the position embeddings start: the paper's small random values, or a 2-D sine-cosine code.

Both stay learned parameters; only their starting point differs. With the random start a model has to discover
from its data which patches are neighbours, which takes many optimiser steps; the sine-cosine start gives that
geometry from the first step, so a short run (the offline demo's few hundred steps) can already show attention
that prefers nearby patches. The paper's model keeps the random start (`pos_init: learned`).
"""

from __future__ import annotations

import torch

# Frequencies from 1 down towards 1/SINCOS_BASE radian per patch. Language models' 10,000 suits thousands of positions;
# on an 8-patch side it would leave most channels nearly constant, so the code uses a base matched to short sides.
SINCOS_BASE = 100.0


def sincos_position_code(dim: int, grid_size: int, base: float = SINCOS_BASE) -> torch.Tensor:
    """(1 + grid_size**2, dim): a zero row for the CLS token, then one row per patch in row-major order; a quarter
    of the channels each hold sin and cos of the row index and sin and cos of the column index, at frequencies
    spaced geometrically from 1 down towards 1/base (the lowest of q is base**(-(q-1)/q))."""
    if dim % 4:
        raise ValueError(f"model.dim={dim}: a sine-cosine position code needs a multiple of 4")
    quarter = dim // 4
    frequencies = base ** (-torch.arange(quarter, dtype=torch.float64) / quarter)
    rows, cols = torch.meshgrid(torch.arange(grid_size), torch.arange(grid_size), indexing="ij")
    row_angles = rows.flatten().double()[:, None] * frequencies
    col_angles = cols.flatten().double()[:, None] * frequencies
    code = torch.cat([row_angles.sin(), row_angles.cos(), col_angles.sin(), col_angles.cos()], dim=1)
    return torch.cat([torch.zeros(1, dim, dtype=torch.float64), code]).float()
