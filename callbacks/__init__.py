"""Lightning callbacks of a training run, and the one factory that assembles them for a cell's Trainer.

Dependencies run one way: entry points -> callbacks -> vit_locality; nothing in vit_locality imports this
package, so the library stays usable (and testable) without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lightning.pytorch.callbacks import Callback, RichProgressBar, TQDMProgressBar
from vit_locality.callbacks.attention_stats import AttentionStatsCallback
from vit_locality.callbacks.epoch_log import EpochLineProgress, EpochLogCallback
from vit_locality.callbacks.seeding import EpochReseed

from vit_locality.config.identity import identity_hash
from vit_locality.config.settings import RunSettings
from vit_locality.run.checkpoints import IdentityStamp, InterruptCheckpoint, last_checkpoint_callback


def progress_display(style: str, terminal: bool | None = None) -> Callback:
    """A bar (`tqdm`, `rich`) on a terminal; one log line per epoch, with the time left, for `none` and wherever
    stderr is not a terminal (a redirected log, a batch job), where a bar would flood the file with redraws."""
    on_terminal = sys.stderr.isatty() if terminal is None else terminal
    if style in ("tqdm", "rich") and not on_terminal:
        return EpochLineProgress()
    if style == "tqdm":
        return TQDMProgressBar()
    if style == "rich":
        return RichProgressBar()
    return EpochLogCallback()


def build_callbacks(settings: RunSettings, run_dir: Path) -> list[Callback]:
    """Everything a cell's Trainer gets besides loggers: progress display, attention statistics (unless
    `stats.enabled=false`), per-epoch reseeding, the cell's identity in every checkpoint, `last.ckpt` every
    `callbacks.checkpoint_every_n_epochs` epochs, and `interrupted.ckpt` on SIGTERM/SIGINT."""
    chosen: list[Callback] = [progress_display(str(settings.callbacks.progress_bar))]
    stats = settings.stats
    if stats.enabled:
        chosen.append(AttentionStatsCallback(run_dir, stats))
    chosen += [
        EpochReseed(settings.seed),
        IdentityStamp(identity_hash(settings)),
        InterruptCheckpoint(run_dir),
        last_checkpoint_callback(run_dir, settings.callbacks.checkpoint_every_n_epochs),
    ]
    return chosen


__all__ = [
    "AttentionStatsCallback",
    "EpochLineProgress",
    "EpochLogCallback",
    "EpochReseed",
    "build_callbacks",
    "progress_display",
]
