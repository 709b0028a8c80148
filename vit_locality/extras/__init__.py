"""What goes beyond the paper: the instruments (position embeddings, the pasted box, dose-response, accuracy
trajectories) with their tables and figures, `analyze`, the surround preference's noise band, the known-answer
references drawn on figures, the HTML page and W&B publishing of a report. The core (model, data, augment, attention,
config, run, store, precheck, sweep, callbacks) never imports this package; the entry points add it when present."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def install() -> None:
    """Draw the known-answer references on every plane and curve the attention pictures draw."""
    from vit_locality.attention import plots
    from vit_locality.extras.references import figure_references

    if figure_references not in plots.REFERENCE_SOURCES:
        plots.REFERENCE_SOURCES.append(figure_references)


def run_callbacks(settings: Any, run_dir: Path) -> list[Any]:
    """The callbacks a training cell gets from the extras: the noise band where statistics are measured."""
    from vit_locality.extras.noise_band import NoiseBandCallback

    return [NoiseBandCallback(settings.stats)] if settings.stats.enabled else []
