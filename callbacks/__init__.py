"""Lightning callbacks of a training run, and the factory that assembles them for a cell's Trainer. Nothing else in
vit_locality imports this package, so the library stays usable without it."""

from __future__ import annotations

import sys
from pathlib import Path

from lightning.pytorch.callbacks import Callback, RichProgressBar, TQDMProgressBar
from vit_locality.callbacks.attention_stats import AttentionStatsCallback
from vit_locality.callbacks.epoch_log import EpochLineProgress, EpochLogCallback
from vit_locality.callbacks.seeding import EpochReseed

from vit_locality.attention.plots import ReferenceSource
from vit_locality.config.identity import identity_hash
from vit_locality.config.settings import RunSettings
from vit_locality.run.builders import instantiate_entry
from vit_locality.run.checkpoints import IdentityStamp, InterruptCheckpoint, last_checkpoint_callback


def progress_display(style: str, terminal: bool | None = None) -> Callback:
    """A bar (`tqdm`, `rich`) on a terminal; else one log line per epoch, as a bar would flood a log with redraws."""
    bars = {"tqdm": TQDMProgressBar, "rich": RichProgressBar}
    on_terminal = sys.stderr.isatty() if terminal is None else terminal
    if style not in bars:
        return EpochLogCallback()
    return bars[style]() if on_terminal else EpochLineProgress()


def build_callbacks(settings: RunSettings, run_dir: Path, references: ReferenceSource | None = None) -> list[Callback]:
    """A cell's Trainer callbacks: progress, attention statistics (with the `references` drawn on its pictures),
    reseeding, identity stamp and checkpoints, then the user's (`callbacks.<name>._target_`, instantiated by Hydra
    as the lightning-hydra-template does)."""
    chosen: list[Callback] = [progress_display(str(settings.callbacks.progress_bar))]
    if settings.stats.enabled:
        chosen.append(AttentionStatsCallback(run_dir, settings.stats, references))
    chosen += [
        EpochReseed(settings.seed),
        IdentityStamp(identity_hash(settings)),
        InterruptCheckpoint(run_dir),
        last_checkpoint_callback(run_dir, settings.callbacks.checkpoint_every_n_epochs),
    ]
    chosen += [instantiate_entry(entry) for entry in settings.callbacks.user_entries().values()]
    return chosen
