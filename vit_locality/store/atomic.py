"""Files that are whole or absent, so a kill or a full disk never leaves a torn record, checkpoint or CSV: the new
contents go to a fsynced temporary file beside the target, renamed over it; the directory is fsynced too."""

from __future__ import annotations

import errno
import glob
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from vit_locality.store.disk_space import as_disk_full

TEMPORARY_SUFFIX = ".tmp"
# Errors of fsync on a directory from file systems that cannot sync one: their renames are as durable as they get.
DIRECTORY_SYNC_UNSUPPORTED = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP)


def replace_atomically(target: Path, write: Callable[[BinaryIO], None], keep_previous_as: Path | None = None) -> None:
    """Make `target` hold what `write` writes to its stream, or leave it as it was. With `keep_previous_as`, the
    current `target` is renamed there first: between the two renames `target` is absent and its predecessor whole."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}{TEMPORARY_SUFFIX}")
    # Created as `open()` creates a file (0o666 less the umask): mkstemp's 0o600 would hide results from the team.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        if keep_previous_as is not None and target.exists():
            os.replace(target, keep_previous_as)
        os.replace(temporary, target)
    except BaseException as error:
        full = as_disk_full(error, target)  # asked while the temporary file still holds what fitted
        temporary.unlink(missing_ok=True)
        if full is not None:
            raise full from error
        raise
    fsync_directory(target.parent)


def atomic_write_text(path: Path, text: str) -> None:
    replace_atomically(path, lambda stream: stream.write(text.encode("utf-8")))


def remove_leftovers(target: Path) -> None:
    """Delete temporary files of killed writes of `target`; only for a target one process writes (under RunLock)."""
    target = Path(target)
    for leftover in target.parent.glob(f".{glob.escape(target.name)}.*{TEMPORARY_SUFFIX}"):
        leftover.unlink(missing_ok=True)


def fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in DIRECTORY_SYNC_UNSUPPORTED:
            raise
    finally:
        os.close(descriptor)
