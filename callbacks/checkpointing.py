"""The two checkpoints a cell resumes from: `last.ckpt` at every epoch boundary, `interrupted.ckpt` on a signal;
and the stamp in each that says which config wrote it.

File names and the choice between them on resume are vit_locality.store.checkpoints'; writing them whole is
vit_locality.run.checkpoint_io's (the Trainer's `AtomicCheckpointIO` plugin).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from vit_locality.callbacks.epoch_log import host_numbers

from vit_locality.store.checkpoints import CHECKPOINT_DIR, LAST_CHECKPOINT, interrupted_checkpoint, stamp_identity

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
    """On SIGTERM (or a first Ctrl-C, which vit_locality.run.interrupts turns into the same stop), save
    `interrupted.ckpt` so the next run of the same command continues from there, bit-exactly: Lightning raises
    SIGTERMException only once a batch has fully run. A KeyboardInterrupt (a second Ctrl-C) can land inside a batch,
    after its optimizer step: that state is not saved, and the next run restarts the epoch from `last.ckpt`."""

    def __init__(self, run_dir: Path) -> None:
        self.path = interrupted_checkpoint(run_dir)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt):
            log.warning(
                "interrupted at once (second Ctrl-C) in epoch %d: the state may be mid-step, so no %s is saved; "
                "the next run resumes from the last saved checkpoint and trains this epoch again",
                trainer.current_epoch + 1,
                self.path.name,
            )
            return
        if not isinstance(exception, SIGTERMException):
            return
        # On a GPU the loss is checked for NaN only every few steps: a signal can arrive after weights went bad,
        # and such a checkpoint would be resumed. The last epoch's last.ckpt is then the resume point.
        if not all(torch.isfinite(p).all() for p in pl_module.parameters()):
            log.warning("interrupted at step %d with non-finite weights: no %s saved", trainer.global_step, self.path)
            return
        trainer.save_checkpoint(self.path)
        log.warning("interrupted at step %d: saved %s", trainer.global_step, self.path)


class IdentityStamp(Callback):
    """Stamp the cell's identity hash into every checkpoint the Trainer saves (`last.ckpt`, `interrupted.ckpt`), so
    a re-run resumes only a checkpoint its own config wrote (vit_locality.store.checkpoints.resume_point); and the
    figures logged so far (at an epoch's end: that epoch's training and evaluation figures, as the record has
    them), so a fit resumed from a finished checkpoint, which trains nothing more, records them all the same."""

    def __init__(self, identity: str) -> None:
        self.identity = identity

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        figures = host_numbers({k: v for k, v in trainer.callback_metrics.items() if k != "epoch"})
        stamp_identity(checkpoint, self.identity, figures)
