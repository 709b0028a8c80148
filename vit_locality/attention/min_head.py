"""What a record says about the head its minimum MAD comes from: that head's control and surround preference
(docs/metrics.md), read from the record's per-head tables. Torch-free, so the report's tables can use it."""

from __future__ import annotations

from typing import Any

MIN_HEAD_KEYS = ("mad_control", "surround_pref")  # what the report shows of the minimum-MAD head beside its MAD


def min_head_control(final: dict[str, Any]) -> dict[str, float] | None:
    """For a record's `attention.final`: the control MAD and surround preference of the head with the minimum MAD
    over its `early_layers` (the head `min_mad_early` comes from); None when the record has no such per-head tables
    (a record written before the control existed)."""
    per_head = final.get("per_head")
    try:
        early = int(final.get("early_layers", 2))
        tables = {key: [[float(v) for v in row] for row in per_head[key][:early]] for key in ("mad", *MIN_HEAD_KEYS)}
        flat = [(mad, layer, head) for layer, row in enumerate(tables["mad"]) for head, mad in enumerate(row)]
        _, layer, head = min(flat)
        return {key: tables[key][layer][head] for key in MIN_HEAD_KEYS}
    except (KeyError, TypeError, ValueError, IndexError):
        return None


# How a minimum head's surround preference reads against its run's noise band (attention/noise_band.py).
PREFERENCE, NONE_MEASURED, NOT_RECORDED = "surround preference", "none measured", "band not recorded"


def recorded_band(data: dict[str, Any]) -> float | None:
    """A record's noise band of `surround_pref` (unit square), or None for a record written before it was measured:
    the band needs the run's model and data at initialisation, which a report of copied run directories lacks."""
    try:
        value = float(data["attention"]["noise_band"]["surround_pref"])
    except (KeyError, TypeError, ValueError):
        return None
    return value if value == value else None  # NaN: not measured


def surround_reading(pref: float, band: float | None) -> str:
    """ "surround preference" only above the band, "none measured" at or below it (a negative value included: a head
    that looks farther than its control is no preference either); NOT_RECORDED without a band."""
    if band is None:
        return NOT_RECORDED
    return PREFERENCE if pref > band else NONE_MEASURED
