"""Per-epoch and per-batch reseeding, so that a run resumed from any checkpoint, at an epoch boundary or after a
signal mid-epoch, draws the same random numbers (shuffle order, AutoAugment, CutMix) as an unbroken run
(vit_locality/seeding.py says how seeds are derived)."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from vit_locality.run.checkpoints import completed_epochs
from vit_locality.seeding import reseed_for_batch, reseed_for_epoch


class EpochReseed(Callback):
    """Seeds epoch e from (seed, e). A fit seeds epoch 0 in `setup`, its earliest hook, and a resumed fit seeds the
    epoch it resumes at as its checkpoint is loaded: both before `on_fit_start`, since the Trainer draws from the
    generator before that hook. Every next epoch is seeded as the previous one ends (after validation), which is
    where a run resumed at that epoch starts drawing too. Every training batch then seeds torch's generators from
    (seed, epoch, batch), so what the batch draws does not depend on what ran before it in this process."""

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
