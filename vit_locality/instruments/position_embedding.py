"""Learned position embeddings: how each patch's embedding resembles every other, and one number per run for how
much that resemblance follows the 2-D grid.

A ViT learns its positions from scratch; the classic picture (each patch's cosine similarity with all others,
laid out on the grid) shows whether they came out 2-D local. Comparing the number across cells asks whether
CutMix changes the positions themselves or only how the attention uses them.
"""

from __future__ import annotations

import torch

from vit_locality.attention.metrics import patch_distance_matrix


def patch_embeddings(pos_embed: torch.Tensor) -> torch.Tensor:
    """(g*g, dim) patch rows of a (1, 1 + g*g, dim) or (1 + g*g, dim) position embedding (the CLS row dropped)."""
    table = pos_embed.reshape(-1, pos_embed.shape[-1])
    return table[1:].double()


def position_similarity(pos_embed: torch.Tensor) -> torch.Tensor:
    """(g*g, g*g) cosine similarity between the patches' position embeddings, patches in row-major order."""
    rows = torch.nn.functional.normalize(patch_embeddings(pos_embed), dim=-1)
    return rows @ rows.T


def position_locality(similarity: torch.Tensor) -> float:
    """Minus the Pearson correlation, over all ordered pairs of distinct patches, between the embeddings' cosine
    similarity and the patches' grid distance: near 1 when similarity falls steadily with distance (2-D local
    positions), near 0 when it ignores the grid; NaN when the similarities are all equal."""
    n = similarity.shape[0]
    g = int(round(n**0.5))
    if g * g != n:
        raise ValueError(f"{n} patch embeddings do not form a square grid")
    off = ~torch.eye(n, dtype=torch.bool)
    sim = similarity.double()[off]
    dist = patch_distance_matrix(g, "grid", dtype=torch.float64)[off]
    sim, dist = sim - sim.mean(), dist - dist.mean()
    denominator = float(torch.sqrt((sim * sim).sum() * (dist * dist).sum()))
    if denominator <= 1e-12 * n:
        return float("nan")
    return -float((sim * dist).sum()) / denominator


def similarity_mosaic(similarity: torch.Tensor) -> torch.Tensor:
    """The classic figure as one image: a g x g grid of g x g maps (patch k's similarity with every patch sits at
    patch k's place), separated by NaN lines that plot as blank."""
    n = similarity.shape[0]
    g = int(round(n**0.5))
    side = g * (g + 1) - 1
    mosaic = torch.full((side, side), float("nan"), dtype=torch.float64)
    for k in range(n):
        r, c = divmod(k, g)
        mosaic[r * (g + 1) : r * (g + 1) + g, c * (g + 1) : c * (g + 1) + g] = similarity[k].view(g, g)
    return mosaic
