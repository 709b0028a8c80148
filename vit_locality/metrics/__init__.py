"""Attention statistics as pure torch functions (DESIGN.md, "Attention statistics"); imports torch alone."""

from vit_locality.metrics.attention import (
    REDUCTIONS,
    UNITS,
    AttentionStatsAccumulator,
    attention_entropy,
    attention_per_image,
    attention_summary,
    cls_mass,
    infer_grid_size,
    mean_attention_distance,
    patch_distance_matrix,
    summarize_per_image,
)

__all__ = [
    "REDUCTIONS",
    "UNITS",
    "AttentionStatsAccumulator",
    "attention_entropy",
    "attention_per_image",
    "attention_summary",
    "cls_mass",
    "infer_grid_size",
    "mean_attention_distance",
    "patch_distance_matrix",
    "summarize_per_image",
]
