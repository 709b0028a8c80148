"""Torch-free readings of the statistics, shared by the reports and the record readers. Every distance written is in
`STORED`, fractions of the image side (a patch step is 1 / g); `stats.units` only chooses how a person sees it."""

from __future__ import annotations

import math
from typing import Any

STORED = "unit"
UNITS = ("unit", "grid", "pixels", "diagonal")
LABELS = {  # how each convention is named beside a shown number
    "unit": "fraction of the image side",
    "grid": "patch steps",
    "pixels": "pixels",
    "diagonal": "fraction of the image diagonal",
}


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


MIN_HEAD_KEYS = ("mad_control", "surround_pref")  # what the report shows of the minimum-MAD head beside its MAD
PREFERENCE, NONE_MEASURED, NOT_RECORDED = "surround preference", "none measured", "band not recorded"


def min_head_control(final: dict[str, Any]) -> dict[str, float] | None:
    """MIN_HEAD_KEYS of the head with the minimum MAD over `attention.final`'s early layers; None without the tables."""
    per_head = final.get("per_head")
    try:
        early = int(final.get("early_layers", 2))
        tables = {key: [[float(v) for v in row] for row in per_head[key][:early]] for key in ("mad", *MIN_HEAD_KEYS)}
        flat = [(mad, layer, head) for layer, row in enumerate(tables["mad"]) for head, mad in enumerate(row)]
        _, layer, head = min(flat)
        return {key: tables[key][layer][head] for key in MIN_HEAD_KEYS}
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def recorded_band(data: dict[str, Any]) -> float | None:
    """A record's noise band of `surround_pref` (unit square); None where it was not measured."""
    try:
        value = float(data["attention"]["noise_band"]["surround_pref"])
    except (KeyError, TypeError, ValueError):
        return None
    return value if value == value else None  # NaN: not measured


def surround_reading(pref: float, band: float | None) -> str:
    """A minimum-MAD head's surround preference against the noise band: a preference only above it."""
    if band is None:
        return NOT_RECORDED
    return PREFERENCE if pref > band else NONE_MEASURED
