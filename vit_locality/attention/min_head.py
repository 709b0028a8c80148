"""A record's minimum-MAD head: its control and surround preference against the noise band. Torch-free."""

from __future__ import annotations

from typing import Any

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
    """PREFERENCE only above the band, NONE_MEASURED at or below it (negative included), NOT_RECORDED without one."""
    if band is None:
        return NOT_RECORDED
    return PREFERENCE if pref > band else NONE_MEASURED
