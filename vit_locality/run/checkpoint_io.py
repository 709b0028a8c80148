"""Checkpoint files that are whole or absent, on any local file system, with their predecessor kept.

Lightning's default writer (TorchCheckpointIO through fsspec) stages a checkpoint in the system temp directory and
moves it into place; when that directory is on another file system the move copies into the destination in place,
so a process killed during the copy (SIGKILL, the OOM killer, a lost node) or a full disk leaves an empty or
truncated `last.ckpt`, and the next run started from scratch. Here the temporary file is written in the destination
directory, flushed and fsynced, and only then renamed over the destination, one atomic step; the directory is
fsynced so the rename survives a crash. The checkpoint being replaced is first renamed to `<name>.prev.ckpt`
(vit_locality.run.checkpoints), so one that turns out damaged later still has a predecessor to resume from.
"""

from __future__ import annotations

import errno
import glob
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from vit_locality.run.checkpoints import previous_checkpoint
from vit_locality.run.record import umask_mode

TEMPORARY_SUFFIX = ".tmp"
# Errors of fsync on a directory from file systems that cannot sync one: their renames are as durable as they get.
DIRECTORY_SYNC_UNSUPPORTED = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch.save/torch.load checkpoint plugin, saving by write-beside-then-rename. Give it to the
    Trainer as `plugins=[AtomicCheckpointIO()]`. Remote paths (`s3://...`) keep Lightning's own handling."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        replace_atomically(Path(path), lambda stream: torch.save(checkpoint, stream))

    def remove_checkpoint(self, path: Any) -> None:
        """Remove a checkpoint and the predecessor kept beside it (a ModelCheckpoint dropping an old top-k file)."""
        super().remove_checkpoint(path)
        if "://" not in str(path):
            previous_checkpoint(Path(path)).unlink(missing_ok=True)


def replace_atomically(target: Path, write: Callable[[BinaryIO], None], keep_previous: bool = True) -> None:
    """Make `target` hold what `write` writes, or leave it as it was: write a temporary file beside it, sync it,
    rename the current `target` to its predecessor's name (`keep_previous`), rename the new file over `target`.

    Between the two renames `target` is briefly absent and its predecessor whole; resume_point looks at both."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(target)
    descriptor, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=TEMPORARY_SUFFIX)
    temporary = Path(name)
    try:
        os.fchmod(descriptor, umask_mode())  # mkstemp's 0600 would hide checkpoints from colleagues
        with os.fdopen(descriptor, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        if keep_previous and target.exists():
            os.replace(target, previous_checkpoint(target))
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)


def remove_leftovers(target: Path) -> None:
    """Delete temporary files of earlier writes of `target` that were killed before their rename. One process
    writes a run directory's checkpoints at a time (run_lock.RunLock), so none of these is still being written."""
    pattern = f".{glob.escape(target.name)}.*{TEMPORARY_SUFFIX}"
    for leftover in target.parent.glob(pattern):
        leftover.unlink(missing_ok=True)


def fsync_directory(directory: Path) -> None:
    """Make the renames in `directory` durable, so a crash right after a save cannot undo it."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in DIRECTORY_SYNC_UNSUPPORTED:
            raise
    finally:
        os.close(descriptor)
