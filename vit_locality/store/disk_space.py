"""A full disk, said as such. It may surface as ENOSPC/EDQUOT or as a torch zip-writer RuntimeError naming neither,
so a failed atomic write asks the file system whether it is full and raises DiskFull, naming the file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from vit_locality.errors import VitLocalityError

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


def free_bytes(directory: Path) -> int | None:
    """Bytes this user may still write on `directory`'s file system, or None where it cannot be asked."""
    try:
        stats = os.statvfs(directory)
    except (OSError, AttributeError):
        return None
    return stats.f_bavail * stats.f_frsize


def as_disk_full(error: BaseException, path: Path) -> DiskFull | None:
    """DiskFull for a failed write of `path` that a full file system explains, else None."""
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
