"""One log line per epoch, for runs without a progress bar (sweeps, batch jobs, CI logs)."""

from __future__ import annotations

import logging
import time

import lightning as L
from lightning.pytorch.callbacks import Callback

log = logging.getLogger("vit_locality")
SHOWN = ("train/loss_epoch", "val/loss", "val/acc1", "train/acc1", "train/acc1_dominant")


class EpochLogCallback(Callback):
    def __init__(self) -> None:
        self._started = 0.0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = time.perf_counter()  # a resumed run may start mid-epoch, without on_train_epoch_start

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._started = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        metrics = trainer.callback_metrics
        shown = ", ".join(f"{k} {float(metrics[k]):.4f}" for k in SHOWN if k in metrics)
        log.info(
            "epoch %d/%d (%.1f s): %s",
            trainer.current_epoch + 1,
            trainer.max_epochs,
            time.perf_counter() - self._started,
            shown,
        )
