"""The one way a reader opens a file of a run directory: a regular file, read up to a size limit, never blocking
(a FIFO in a shared run directory would block `open` forever, a link to /dev/zero would fill memory)."""

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
FILE_KINDS = {
    stat.S_ISREG: "a regular file",
    stat.S_ISDIR: "a directory",
    stat.S_ISFIFO: "a FIFO",
    stat.S_ISCHR: "a character device",
    stat.S_ISBLK: "a block device",
    stat.S_ISSOCK: "a socket",
}


class UnreadableFile(OSError):
    """A file a reader cannot use; `why` (also the message) is the one-line reason, without the path."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(why)
        self.path = Path(path)
        self.why = why

    def skipped(self, consequence: str) -> str:
        return f"skipped {self.path}: {self.why}; {consequence}"


def file_kind(mode: int) -> str:
    """What st_mode says the file is: `a FIFO`, `a directory`, `a regular file`."""
    return next((name for test, name in FILE_KINDS.items() if test(mode)), "a special file")


def open_regular_file(path: Path, limit: int) -> BinaryIO:
    """`path` opened if a regular file of at most `limit` bytes; else IsADirectoryError or UnreadableFile."""
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


READ_CHUNK = 4 * MIB


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of `path` through `open_regular_file`, allocating what the file holds, not the limit."""
    with open_regular_file(path, limit) as file:
        size = os.fstat(file.fileno()).st_size
        data = file.read(size + 1)  # one byte more shows a file that grew while read
        grew = len(data) > size
        while grew and len(data) <= limit and (more := file.read(min(READ_CHUNK, limit + 1 - len(data)))):
            data += more
    if len(data) > limit:
        raise UnreadableFile(path, _too_large(limit))
    return data


def read_csv_rows(path: Path, limit: int = CSV_SIZE_LIMIT) -> list[dict[str, str]]:
    """A CSV file's rows as dicts, read through `read_regular_file` (UnicodeDecodeError, csv.Error as they come)."""
    text = read_regular_file(path, limit).decode("utf-8")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def _too_large(limit: int) -> str:
    shown = f"{limit // 2**30} GiB" if limit >= 2**30 else f"{limit // MIB} MiB"
    return f"larger than {shown}"
