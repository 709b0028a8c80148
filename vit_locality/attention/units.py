"""The one stored distance convention and the display conventions `stats.units` chooses.

Every distance the project measures and writes (results.json, attention_stats.csv, analysis.json, logger scalars)
is in `STORED`: fractions of the image side, the patch centres on the unit square, one patch step = 1 / g on the
g x g grid. `stats.units` only chooses how a value is shown to a person (log lines, pictures): `to_display`
multiplies by one factor. Torch-free, so the reports and the record readers share it.
"""

from __future__ import annotations

import math

STORED = "unit"
UNITS = ("unit", "grid", "pixels", "diagonal")
# How each convention is named beside a shown number.
LABELS = {
    "unit": "fraction of the image side",
    "grid": "patch steps",
    "pixels": "pixels",
    "diagonal": "fraction of the image diagonal",
}


def display_factor(units: str, grid: int, patch_size: float | None = None) -> float:
    """What a unit-square distance is multiplied by to read in `units` on a `grid` x `grid` patch grid: 1; g (patch
    steps); g x patch_size (pixels); 1 / sqrt 2 (over the diagonal). ValueError for units outside UNITS, a grid
    that is not a positive int, or pixels without a positive patch size."""
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
    """A stored distance as a log line prints it: in `units` with their name, and the stored value beside it when the
    two differ ('1.2345 patch steps (0.1543 of the image side)')."""
    text = f"{to_display(value, units, grid, patch_size):.{digits}f} {LABELS[units]}"
    if units == STORED:
        return text
    return f"{text} ({value:.{digits}f} of the image side)"
