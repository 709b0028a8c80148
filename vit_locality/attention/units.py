"""Distance conventions: every distance written is in `STORED`, fractions of the image side (a patch step is 1 / g);
`stats.units` only chooses how a person sees it. Torch-free, so the reports and the record readers share it."""

from __future__ import annotations

import math

STORED = "unit"
UNITS = ("unit", "grid", "pixels", "diagonal")
LABELS = {  # how each convention is named beside a shown number
    "unit": "fraction of the image side",
    "grid": "patch steps",
    "pixels": "pixels",
    "diagonal": "fraction of the image diagonal",
}

# Each statistic that is a distance declares so here (docs/metrics.md): MAD and its spread over images, the control's
# MAD, the surround preference (a difference of two MADs) and MAD's range over a layer's heads; per-layer reductions
# of a distance (`mad_min`, `mad_mean`, `mad_max`) are distances too. Every other statistic (entropies, masses,
# shares) is unit-free, so no change of units touches it.
DISTANCE_STATISTICS = ("mad", "mad_std", "mad_control", "surround_pref", "mad_range", "mad_layer_range")
LAYER_REDUCTIONS = ("min", "mean", "max")


def is_distance(statistic: str) -> bool:
    """Whether a statistic, or a per-layer reduction of one (`mad_mean`), is a distance (DISTANCE_STATISTICS)."""
    base, _, reduction = statistic.rpartition("_")
    return statistic in DISTANCE_STATISTICS or (reduction in LAYER_REDUCTIONS and base in DISTANCE_STATISTICS)


def display_factor(units: str, grid: int, patch_size: float | None = None) -> float:
    """What a unit-square distance is multiplied by to read in `units`: 1, g, g x patch_size or 1 / sqrt 2."""
    if units not in UNITS:
        raise ValueError(f"units must be one of {UNITS}, got {units!r}")
    if not isinstance(grid, int) or isinstance(grid, bool) or grid < 1:
        raise ValueError(f"grid_size must be a positive int, got {grid!r}")
    if units == "grid":
        return float(grid)
    if units == "pixels":
        if patch_size is None or patch_size <= 0:
            raise ValueError(f"units='pixels' needs a positive patch_size (pixels per patch), got {patch_size!r}")
        return grid * float(patch_size)
    if units == "diagonal":
        return 1.0 / math.sqrt(2.0)
    return 1.0


def to_display(value: float, units: str, grid: int, patch_size: float | None = None) -> float:
    """A stored (unit-square) distance as shown in `units`."""
    return value * display_factor(units, grid, patch_size)


def shown(value: float, units: str, grid: int, patch_size: float | None = None, digits: int = 4) -> str:
    """A stored distance as a log line prints it: '1.2345 patch steps (0.1543 of the image side)'."""
    text = f"{to_display(value, units, grid, patch_size):.{digits}f} {LABELS[units]}"
    return text if units == STORED else f"{text} ({value:.{digits}f} of the image side)"
