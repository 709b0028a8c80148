"""Files that are whole or absent: the one way this project replaces a file (records, checkpoints, CSVs, verdicts).

A file written in place is half-written when the process is killed (SIGKILL, the OOM killer, a lost node) or the
disk fills, and a reader then sees a truncated record or checkpoint. Here the new contents go to a temporary file
beside the target (same directory, so the same file system), are flushed and fsynced, and only then renamed over the
target in one atomic step; the directory is fsynced so the rename survives a crash. On any failure the temporary file
is removed and the target is left as it was.
"""

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


def replace_atomically(
    target: Path,
    write: Callable[[BinaryIO], None],
    keep_previous_as: Path | None = None,
    check: Callable[[Path], None] | None = None,
) -> None:
    """Make `target` hold what `write` writes to the stream it is given, or leave it as it was.

    `check(temporary_path)` may raise to refuse the written file (a download that does not match its checksum)
    before it takes `target`'s place. With `keep_previous_as`, the current `target` is renamed there just before the
    new file takes its place: between the two renames `target` is briefly absent and its predecessor whole, so a
    reader must look at both."""
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
        if check is not None:
            check(temporary)
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
    """`replace_atomically` for UTF-8 text."""
    replace_atomically(path, lambda stream: stream.write(text.encode("utf-8")))


def remove_leftovers(target: Path) -> None:
    """Delete temporary files of earlier writes of `target` that were killed before their rename. Only for a target
    that one process writes at a time (a run directory's files, under run.lock.RunLock): another writer's temporary
    file would be deleted under it."""
    target = Path(target)
    for leftover in target.parent.glob(f".{glob.escape(target.name)}.*{TEMPORARY_SUFFIX}"):
        leftover.unlink(missing_ok=True)


def fsync_directory(directory: Path) -> None:
    """Make the renames in `directory` durable, so a crash right after a write cannot undo it."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in DIRECTORY_SYNC_UNSUPPORTED:
            raise
    finally:
        os.close(descriptor)
