"""Per-epoch and per-batch reseeding, so a resumed run draws what an unbroken one does (seeds: vit_locality/seeding)."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from vit_locality.run.checkpoints import completed_epochs
from vit_locality.seeding import reseed_for_batch, reseed_for_epoch


class EpochReseed(Callback):
    """Seeds epoch e from (seed, e): epoch 0 in `setup` and a resumed epoch as its checkpoint loads (both before the
    Trainer's first draw), every next one as the previous ends; each training batch from (seed, epoch, batch)."""

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
