"""What goes beyond the paper: the instruments (position embeddings, the pasted box, dose-response, accuracy
trajectories) with their tables and figures, `analyze`, the surround preference's noise band, the known-answer
references drawn on figures, the HTML page and W&B publishing of a report. It ships in the same wheel as the core;
the core (model, data, augment, attention, config, run, store, precheck, sweep, callbacks) never imports it, and the
entry points (train, report) import it plainly and hand what it gives to the core as arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_callbacks(settings: Any, run_dir: Path) -> list[Any]:
    """The callbacks a training cell gets from the extras: the noise band where statistics are measured."""
    from vit_locality.extras.noise_band import NoiseBandCallback

    return [NoiseBandCallback(settings.stats)] if settings.stats.enabled else []
