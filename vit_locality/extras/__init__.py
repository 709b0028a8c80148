"""What goes beyond the paper (docs/instruments.md); the core never imports it, the entry points hand what it gives
to the core as arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_callbacks(settings: Any, run_dir: Path) -> list[Any]:
    """The callbacks a training cell gets from the extras: the noise band where statistics are measured."""
    from vit_locality.extras.noise_band import NoiseBandCallback

    return [NoiseBandCallback(settings.stats)] if settings.stats.enabled else []
