"""Checkpoint files that are whole or absent, on any local file system, with their predecessor kept.

Lightning's default writer (TorchCheckpointIO through fsspec) stages a checkpoint in the system temp directory and
moves it into place; when that directory is on another file system the move copies into the destination in place,
so a process killed during the copy (SIGKILL, the OOM killer, a lost node) or a full disk leaves an empty or
truncated `last.ckpt`, and the next run started from scratch. Here the file is replaced by
vit_locality.store.atomic (written beside, fsynced, renamed over), and the checkpoint being replaced is renamed to
`<name>.prev.ckpt` (vit_locality.store.checkpoints), so one that turns out damaged later still has a predecessor to
resume from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from vit_locality.store.atomic import remove_leftovers, replace_atomically
from vit_locality.store.checkpoints import previous_checkpoint


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch.save/torch.load checkpoint plugin, saving by write-beside-then-rename. Give it to the
    Trainer as `plugins=[AtomicCheckpointIO()]`. Remote paths (`s3://...`) keep Lightning's own handling."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        remove_leftovers(target)  # one process writes a run directory's checkpoints (run.lock.RunLock)
        replace_atomically(target, lambda stream: torch.save(checkpoint, stream), previous_checkpoint(target))

    def remove_checkpoint(self, path: Any) -> None:
        """Remove a checkpoint and the predecessor kept beside it (a ModelCheckpoint dropping an old top-k file)."""
        super().remove_checkpoint(path)
        if "://" not in str(path):
            previous_checkpoint(Path(path)).unlink(missing_ok=True)
