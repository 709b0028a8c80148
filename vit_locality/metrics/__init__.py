"""Attention statistics as pure torch functions, defined in docs/metrics.md; imports torch alone."""

from vit_locality.metrics.attention import (
    UNITS,
    AttentionStatsAccumulator,
    attention_entropy,
    attention_summary,
    cls_mass,
    cross_border_mass,
    locality_masses,
    mean_attention_distance,
    neighbourhood_masks,
    patch_distance_matrix,
)

__all__ = [
    "UNITS",
    "AttentionStatsAccumulator",
    "attention_entropy",
    "attention_summary",
    "cls_mass",
    "cross_border_mass",
    "locality_masses",
    "mean_attention_distance",
    "neighbourhood_masks",
    "patch_distance_matrix",
]
