"""The two checkpoints a cell resumes from: `last.ckpt` at every epoch boundary, `interrupted.ckpt` on a signal.

File names and the choice between them on resume are vit_locality.checkpoints'.
"""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vit_locality.checkpoints import CHECKPOINT_DIR, LAST_CHECKPOINT, interrupted_checkpoint

log = logging.getLogger("vit_locality")


def last_checkpoint_callback(run_dir: Path, every_n_epochs: int) -> ModelCheckpoint:
    """`last.ckpt`, rewritten at the end of every `every_n_epochs` epochs. (Lightning's own `save_last` only writes
    when a top-k checkpoint is saved, so the file name is set directly instead.)"""
    return ModelCheckpoint(
        dirpath=Path(run_dir) / CHECKPOINT_DIR,
        filename=Path(LAST_CHECKPOINT).stem,
        save_top_k=1,
        every_n_epochs=every_n_epochs,
        enable_version_counter=False,
    )


class InterruptCheckpoint(Callback):
    """On SIGTERM or Ctrl-C, save `interrupted.ckpt` so the next run of the same command continues from there."""

    def __init__(self, run_dir: Path) -> None:
        self.path = interrupted_checkpoint(run_dir)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt | SIGTERMException):
            trainer.save_checkpoint(self.path)
            log.warning("interrupted at step %d: saved %s", trainer.global_step, self.path)
