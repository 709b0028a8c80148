"""Durations as a person reads them in a log line."""

from __future__ import annotations


def duration_text(seconds: float) -> str:
    """12 s, 4 min 05 s, 2 h 03 min: as precise as a glance at a log needs."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
