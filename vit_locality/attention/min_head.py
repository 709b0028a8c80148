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
