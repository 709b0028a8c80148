"""Learned position embeddings: each patch's cosine similarity with every other, and how much it follows the grid."""

from __future__ import annotations

import torch
from scipy.stats import rankdata

from vit_locality.attention.metrics import patch_distance_matrix

NEAR_STEPS = 1.0  # the length scale compares neighbours one patch step apart ...
FAR_STEPS = 4.0  # ... with patches at least this many steps apart (half the 8 x 8 grid)


def position_similarity(pos_embed: torch.Tensor) -> torch.Tensor:
    """(g*g, g*g) cosine similarity of the patch rows of a (1, 1 + g*g, dim) or (1 + g*g, dim) position embedding."""
    rows = torch.nn.functional.normalize(pos_embed.reshape(-1, pos_embed.shape[-1])[1:].double(), dim=-1)
    return rows @ rows.T


def _off_diagonal_pairs(similarity: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Similarity and grid distance (in patch steps) of every ordered pair of distinct patches."""
    n = similarity.shape[0]
    g = int(round(n**0.5))
    if g * g != n:
        raise ValueError(f"{n} patch embeddings do not form a square grid")
    off = ~torch.eye(n, dtype=torch.bool)
    return similarity.double()[off], patch_distance_matrix(g, "grid", dtype=torch.float64)[off]


def _pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson correlation; NaN when either side is constant."""
    x, y = x - x.mean(), y - y.mean()
    denominator = float(torch.sqrt((x * x).sum() * (y * y).sum()))
    if denominator <= 1e-12 * len(x):
        return float("nan")
    return float((x * y).sum()) / denominator


def _ranks(values: torch.Tensor) -> torch.Tensor:
    """Ranks 1..n, ties sharing their mean rank (grid distances tie a lot)."""
    return torch.from_numpy(rankdata(values.cpu().numpy()))


def position_locality(similarity: torch.Tensor) -> float:
    """Minus the Pearson correlation between similarity and grid distance over ordered pairs of distinct patches: near
    1 for a linear fall-off (a sharp local code scores lower than a broad one), 0 ignoring the grid, NaN if constant."""
    sim, dist = _off_diagonal_pairs(similarity)
    return -_pearson(sim, dist)


def position_rank_locality(similarity: torch.Tensor) -> float:
    """Minus the Spearman correlation between similarity and grid distance: 1 for any fall-off, however sharp."""
    sim, dist = _off_diagonal_pairs(similarity)
    return -_pearson(_ranks(sim), _ranks(dist))


def similarity_at_distances(
    similarity: torch.Tensor, near: float = NEAR_STEPS, far: float = FAR_STEPS
) -> tuple[float, float]:
    """(mean similarity of pairs exactly `near` steps apart, of pairs `far` or more apart): a length scale."""
    sim, dist = _off_diagonal_pairs(similarity)
    return float(sim[(dist - near).abs() < 1e-9].mean()), float(sim[dist >= far - 1e-9].mean())


def similarity_mosaic(similarity: torch.Tensor) -> torch.Tensor:
    """A g x g grid of g x g maps (patch k's similarities at patch k's place), separated by NaN (blank) lines."""
    g = int(round(similarity.shape[0] ** 0.5))
    maps = torch.nn.functional.pad(similarity.double().view(g, g, g, g), (0, 1, 0, 1), value=float("nan"))
    return maps.permute(0, 2, 1, 3).reshape(g * (g + 1), g * (g + 1))[:-1, :-1]
