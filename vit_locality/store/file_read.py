"""The one way a reader opens a file of a run directory: a regular file, read up to a size limit, never blocking.

A run directory is shared, copied and edited by hand, so any of its files may be replaced by something that is not
a file: a FIFO blocks a plain `open` until a writer appears (forever, in a report), a link to /dev/zero reads until
memory runs out. Every reader of run files (the record, the CSV logs, the attention statistics, the checkpoints
the instruments load, the pictures a page or W&B embeds) goes through `open_regular_file`: the type is checked
before opening, the open never blocks, the type and size are checked again on what was opened, and reading stops at
the limit. What cannot be read is an `UnreadableFile` whose message is the one-line reason ("a FIFO, not a regular
file"), for the reader to name with the file and skip.
"""

from __future__ import annotations

import csv
import io
import os
import stat
from pathlib import Path
from typing import BinaryIO

MIB = 2**20
CSV_SIZE_LIMIT = 256 * MIB  # a CSV log or attention statistics of hundreds of epochs is a few MiB
PICTURE_SIZE_LIMIT = 64 * MIB
CHECKPOINT_SIZE_LIMIT = 16 * 2**30  # far above a ViT's weights with its optimizer state


class UnreadableFile(OSError):
    """A file a reader cannot use; `why` (also the message) is the one-line reason, without the path."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(why)
        self.path = Path(path)
        self.why = why

    def skipped(self, consequence: str) -> str:
        """The one line a reader prints for it: `skipped <path>: <why>; <what is left out>`."""
        return f"skipped {self.path}: {self.why}; {consequence}"


def file_kind(mode: int) -> str:
    """What `mode` (st_mode) says the file is, as a reason names it: `a FIFO`, `a directory`, `a regular file`."""
    kinds = {
        stat.S_ISREG: "a regular file",
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((name for test, name in kinds.items() if test(mode)), "a special file")


def open_regular_file(path: Path, limit: int) -> BinaryIO:
    """`path` (links followed) opened for binary reading if it is a regular file of at most `limit` bytes.
    IsADirectoryError for a directory, UnreadableFile for any other non-file or a larger file, and the OSError of
    `os.stat`/`os.open` (FileNotFoundError, PermissionError) as they come."""
    kind = file_kind(os.stat(path).st_mode)
    if kind == "a directory":
        raise IsADirectoryError(path)
    if kind != "a regular file":
        raise UnreadableFile(path, f"{kind}, not a regular file")
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    file = os.fdopen(descriptor, "rb")
    try:
        status = os.fstat(file.fileno())
        if not stat.S_ISREG(status.st_mode):  # swapped between the check and the open
            raise UnreadableFile(path, f"{file_kind(status.st_mode)}, not a regular file")
        if status.st_size > limit:
            raise UnreadableFile(path, _too_large(limit))
    except BaseException:
        file.close()
        raise
    return file


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of `path` through `open_regular_file`, never more than `limit` (a file that grows past it while
    being read is refused too)."""
    with open_regular_file(path, limit) as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise UnreadableFile(path, _too_large(limit))
    return data


def read_csv_rows(path: Path, limit: int = CSV_SIZE_LIMIT) -> list[dict[str, str]]:
    """A CSV file's rows as dicts (header keys), read through `read_regular_file`: UnreadableFile for a non-file or
    a file over `limit`, UnicodeDecodeError for bytes that are not UTF-8, csv.Error for what the csv module refuses."""
    text = read_regular_file(path, limit).decode("utf-8")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def _too_large(limit: int) -> str:
    shown = f"{limit // 2**30} GiB" if limit >= 2**30 else f"{limit // MIB} MiB"
    return f"larger than {shown}"
