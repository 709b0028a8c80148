"""Learned position embeddings: each patch's cosine similarity with every other, and how much that similarity
follows the 2-D grid; compared across cells, it asks whether CutMix changes the positions or only how attention
uses them.
"""

from __future__ import annotations

import torch
from scipy.stats import rankdata

from vit_locality.attention.metrics import patch_distance_matrix


def patch_embeddings(pos_embed: torch.Tensor) -> torch.Tensor:
    """(g*g, dim) patch rows of a (1, 1 + g*g, dim) or (1 + g*g, dim) position embedding (the CLS row dropped)."""
    table = pos_embed.reshape(-1, pos_embed.shape[-1])
    return table[1:].double()


def position_similarity(pos_embed: torch.Tensor) -> torch.Tensor:
    """(g*g, g*g) cosine similarity between the patches' position embeddings, patches in row-major order."""
    rows = torch.nn.functional.normalize(patch_embeddings(pos_embed), dim=-1)
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
    """Minus the Pearson correlation, over all ordered pairs of distinct patches, between the embeddings' cosine
    similarity and the patches' grid distance: near 1 when similarity falls linearly with distance, near 0 when it
    ignores the grid; NaN when the similarities are all equal. It rewards a linear fall-off, so a sharp, very local
    code scores lower than a broad one: read it beside `position_rank_locality` and `similarity_at_distances`."""
    sim, dist = _off_diagonal_pairs(similarity)
    return -_pearson(sim, dist)


def position_rank_locality(similarity: torch.Tensor) -> float:
    """Minus the Spearman correlation between similarity and grid distance: 1 whenever similarity falls with
    distance, however sharply (a code local at one patch step ranks with one local at three); 0 when it ignores
    the grid; NaN when the similarities are all equal."""
    sim, dist = _off_diagonal_pairs(similarity)
    return -_pearson(_ranks(sim), _ranks(dist))


NEAR_STEPS = 1.0  # the length scale compares neighbours one patch step apart ...
FAR_STEPS = 4.0  # ... with patches at least this many steps apart (half the 8 x 8 grid)


def similarity_at_distances(
    similarity: torch.Tensor, near: float = NEAR_STEPS, far: float = FAR_STEPS
) -> tuple[float, float]:
    """(mean similarity of pairs exactly `near` steps apart, mean similarity of pairs `far` or more steps apart):
    a length scale. Local codes are high at 1 step and near 0 far away; broad codes stay high far away too."""
    sim, dist = _off_diagonal_pairs(similarity)
    at_near = sim[(dist - near).abs() < 1e-9]
    at_far = sim[dist >= far - 1e-9]
    return float(at_near.mean()), float(at_far.mean())


def similarity_mosaic(similarity: torch.Tensor) -> torch.Tensor:
    """The classic figure as one image: a g x g grid of g x g maps (patch k's similarity with every patch sits at
    patch k's place), separated by NaN lines that plot as blank."""
    g = int(round(similarity.shape[0] ** 0.5))
    maps = torch.nn.functional.pad(similarity.double().view(g, g, g, g), (0, 1, 0, 1), value=float("nan"))
    return maps.permute(0, 2, 1, 3).reshape(g * (g + 1), g * (g + 1))[:-1, :-1]
