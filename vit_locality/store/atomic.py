"""Files that are whole or absent, so a kill or a full disk never leaves a torn record, checkpoint or CSV: the new
contents go to a fsynced temporary file beside the target, renamed over it. A full disk is said as such (DiskFull)."""

from __future__ import annotations

import errno
import glob
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from vit_locality.errors import VitLocalityError

TEMPORARY_SUFFIX = ".tmp"
# Errors of fsync on a directory from file systems that cannot sync one: their renames are as durable as they get.
DIRECTORY_SYNC_UNSUPPORTED = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP)
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# Free bytes under which a file system that just refused a write counts as full (the temporary file still exists).
FULL_BELOW_BYTES = 1 << 20


class DiskFull(VitLocalityError, OSError):
    """A write failed because its file system is full (or the user's quota is spent)."""

    def __init__(self, path: Path | str, free: int | None) -> None:
        where = Path(path)
        what = f"writing into {where}" if where.is_dir() else f"writing {where.name} in {where.parent}"
        left = "" if free is None else f" ({free / 2**20:.1f} MiB free there)"
        super().__init__(
            f"no space left on device: {what}{left}; free some space there and run the same command to resume from "
            "the last checkpoint"
        )
        self.path = where


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


def free_bytes(directory: Path) -> int | None:
    """Bytes this user may still write on `directory`'s file system, or None where it cannot be asked."""
    try:
        stats = os.statvfs(directory)
    except (OSError, AttributeError):
        return None
    return stats.f_bavail * stats.f_frsize


def as_disk_full(error: BaseException, path: Path) -> DiskFull | None:
    """DiskFull for a failed write of `path` that a full file system explains (torch's names no ENOSPC), else None."""
    if isinstance(error, DiskFull) or not isinstance(error, Exception):
        return None
    free = free_bytes(Path(path).parent)
    if isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS:
        return DiskFull(path, free)
    return DiskFull(path, free) if free is not None and free < FULL_BELOW_BYTES else None


def disk_full_cause(error: BaseException, run_dir: Path) -> DiskFull | None:
    """The first full-disk failure in `error`'s chain (a plain ENOSPC OSError included), or None."""
    named: DiskFull | None = None  # the deepest DiskFull: it names the file whose write failed first
    plain: OSError | None = None  # else the first ENOSPC from a plain write, named by its file or the run directory
    seen, current = set(), error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DiskFull):
            named = current
        elif isinstance(current, OSError) and current.errno in NO_SPACE_ERRNOS and plain is None:
            plain = current
        current = current.__cause__ or current.__context__
    if named is not None or plain is None:
        return named
    path = Path(plain.filename) if plain.filename else Path(run_dir)
    return DiskFull(path, free_bytes(path if path.is_dir() else path.parent))
