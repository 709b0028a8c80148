"""A full disk, said as such: "no space left on device", with the file being written and where it lies.

A full disk shows up in many costumes: an OSError with ENOSPC (or EDQUOT, a quota) from a plain write, but from
torch's checkpoint writer a RuntimeError about its zip stream ("unexpected pos 1317504 vs 1317392") that names
neither. A failed atomic write (atomic.py) therefore asks the file system, before it removes its temporary file,
whether it is full, and raises DiskFull naming the file; the entry point finds a DiskFull (or an ENOSPC OSError)
anywhere in the failure's chain and says it in one line. The run resumes from its last checkpoint once space is free.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from vit_locality.errors import VitLocalityError

NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# Free bytes under which a file system that just refused a write counts as full (a checkpoint's temporary file is
# still there when this is asked, so a full disk shows about nothing free).
FULL_BELOW_BYTES = 1 << 20


class DiskFull(VitLocalityError, OSError):
    """A write failed because the file system holding it is full (or the user's quota is spent)."""

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
    """Bytes this user may still write on the file system of `directory`, or None where it cannot be asked."""
    try:
        stats = os.statvfs(directory)
    except (OSError, AttributeError):
        return None
    return stats.f_bavail * stats.f_frsize


def as_disk_full(error: BaseException, path: Path) -> DiskFull | None:
    """DiskFull for a failed write of `path` that a full file system explains, else None (an interruption, or a
    failure with space to spare, is what it is)."""
    if isinstance(error, DiskFull) or not isinstance(error, Exception):
        return None
    free = free_bytes(Path(path).parent)
    if isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS:
        return DiskFull(path, free)
    return DiskFull(path, free) if free is not None and free < FULL_BELOW_BYTES else None


def disk_full_cause(error: BaseException, run_dir: Path) -> DiskFull | None:
    """The first full-disk failure in `error`'s chain (the write that failed first: a failed record written after
    it fails too), an ENOSPC OSError from a plain write included; None when the disk was not the cause."""
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
