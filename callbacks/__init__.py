"""Lightning callbacks of a training run, and the factory that assembles them for a cell's Trainer. Nothing else in
vit_locality imports this package, so the library stays usable without it."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ProgressBar, RichProgressBar, TQDMProgressBar
from vit_locality.callbacks.attention_stats import AttentionStatsCallback

from vit_locality.attention.plots import ReferenceSource
from vit_locality.config.identity import identity_hash
from vit_locality.config.settings import RunSettings
from vit_locality.run.builders import instantiate_entry
from vit_locality.run.checkpoints import (
    IdentityStamp,
    InterruptCheckpoint,
    completed_epochs,
    host_numbers,
    last_checkpoint_callback,
)
from vit_locality.seeding import reseed_for_batch, reseed_for_epoch
from vit_locality.sweep.progress import duration_text

log = logging.getLogger("vit_locality")
# The per-epoch evaluation figures are `val/*` (a held-out split) or `test_epoch/*` (the test set): either shows.
SHOWN = ("train/loss_epoch", "val/loss", "val/acc1", "test_epoch/loss", "test_epoch/acc1", "train/acc1")


def progress_display(style: str, terminal: bool | None = None) -> Callback:
    """A bar (`tqdm`, `rich`) on a terminal; else one log line per epoch, as a bar would flood a log with redraws."""
    bars = {"tqdm": TQDMProgressBar, "rich": RichProgressBar}
    on_terminal = sys.stderr.isatty() if terminal is None else terminal
    if style not in bars:
        return EpochLogCallback()
    return bars[style]() if on_terminal else EpochLineProgress()


def build_callbacks(settings: RunSettings, run_dir: Path, references: ReferenceSource | None = None) -> list[Callback]:
    """A cell's Trainer callbacks: progress, attention statistics, reseeding, identity stamp and checkpoints, then
    the user's (`callbacks.<name>._target_`)."""
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


class EpochReseed(Callback):
    """Seeds each epoch from (seed, epoch) before its first draw, a resumed one included, and each training batch from
    (seed, epoch, batch), so a resumed run draws what an unbroken one does."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            reseed_for_epoch(self.seed, 0)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        reseed_for_epoch(self.seed, completed_epochs(checkpoint))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        reseed_for_epoch(self.seed, trainer.current_epoch + 1)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        reseed_for_batch(self.seed, trainer.current_epoch, batch_idx, pl_module.device)


def epochs_left(trainer: L.Trainer) -> int:
    """Epochs still to run, by max_epochs and, when set, by max_steps (whichever ends the fit first)."""
    left = max(0, int(trainer.max_epochs or 0) - trainer.current_epoch - 1)
    if trainer.max_steps and trainer.max_steps > 0 and trainer.num_training_batches not in (0, float("inf")):
        steps_left = max(0, trainer.max_steps - trainer.global_step)
        left = min(left, -(-steps_left // int(trainer.num_training_batches)))
    return left


class EpochLogCallback(Callback):
    """One log line per epoch, for runs without a progress bar (sweeps, batch jobs, CI logs), with the time left."""

    def __init__(self) -> None:
        self._started = self._last_end = 0.0
        self._seconds: list[float] = []  # each epoch of this process, validation and statistics included

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = self._last_end = time.perf_counter()  # a resumed run may start mid-epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        now = time.perf_counter()
        self._seconds.append(now - self._last_end)
        self._last_end = now
        metrics = host_numbers({k: v for k, v in trainer.callback_metrics.items() if k in SHOWN})
        shown = ", ".join(f"{k} {metrics[k]:.4f}" for k in SHOWN if k in metrics) or "no figures logged"
        left = epochs_left(trainer)
        eta = f", about {duration_text(left * sum(self._seconds) / len(self._seconds))} left" if left else ""
        progress = f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}"
        if trainer.max_steps and trainer.max_steps > 0:  # a step limit: the steps done, as they may end the fit
            progress += f", step {trainer.global_step}/{trainer.max_steps}"
        log.info("%s (%.1f s%s): %s", progress, now - self._started, eta, shown)


class EpochLineProgress(EpochLogCallback, ProgressBar):
    """A bar style's one line per epoch off a terminal; as a progress bar, it keeps Lightning from adding one."""

    draws_batches = False  # the module need not put step figures on it (each one a read per step on a GPU)

    def __init__(self) -> None:
        EpochLogCallback.__init__(self)
        ProgressBar.__init__(self)

    def disable(self) -> None:
        """Nothing to hide: there is no bar."""

    def enable(self) -> None:
        """Nothing to show: there is no bar."""
