"""Download, verify and safely extract the official data archives.

torchvision fetches (`download_url`) and hashes (`calculate_md5`); this module adds what torchvision lacks:
- a partial or unverified download never appears under the archive's name (torchvision writes in place);
- everything that can fail (network, a corrupted file, a hostile archive) fails as one DataError whose message
  names the file or URL and says what to do, instead of a traceback from deep inside urllib or tarfile;
- every member of an archive is checked before the first one is written, so a refused archive writes nothing.
  torchvision's `extract_archive` (0.29) calls `tarfile.extractall` without a filter (Python before 3.14 then
  writes links, devices, absolute paths and `..` as they come) and neither it nor `zipfile` bounds what an
  archive unpacks to. The checks hold even when the md5 is not checked (`data.verify=false`).
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import stat
import tarfile
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from torchvision.datasets.utils import calculate_md5, download_url

from vit_locality.data.base import DataError
from vit_locality.errors import first_line

# tarfile's "data" extraction filter: Python 3.12+, back-ported to 3.8.17, 3.9.17, 3.10.12 and 3.11.4.
_TAR_DATA_FILTER = getattr(tarfile, "data_filter", None)

# What one archive may unpack to. The official archives unpack to ~178 MB in under ten members (CIFAR-10 and
# CIFAR-100) and ~250 MB in ~120k (Tiny-ImageNet): the limits leave a margin of 4x in bytes, 1.6x in members.
MAX_ARCHIVE_MEMBERS = 200_000
MAX_EXTRACTED_BYTES = 1 << 30
# Deflate packs zeros ~1000:1, text ~4:1 and JPEGs ~1:1, so a zip member that unpacks to over MAX_ZIP_RATIO
# times its packed size is a bomb, not data. Members up to ZIP_RATIO_CHECKED_FROM bytes (the largest official
# one, words.txt, is 2.7 MB) are not checked: they cannot fill a disk on their own and MAX_EXTRACTED_BYTES caps
# them all together.
MAX_ZIP_RATIO = 200
ZIP_RATIO_CHECKED_FROM = 4 << 20
_ZIP_METHODS = {
    zipfile.ZIP_STORED: "stored",
    zipfile.ZIP_DEFLATED: "deflate",
    zipfile.ZIP_BZIP2: "bzip2",
    zipfile.ZIP_LZMA: "lzma",
}
_ZIP_ENCRYPTED = 0x1  # general purpose bit 0 of a zip member


@dataclass(frozen=True)
class ArchiveSpec:
    """One official archive: where it comes from, what it must match, and the folder it unpacks into."""

    url: str
    filename: str  # under the data root
    size: int
    md5: str
    folder: str  # under the data root, created by extracting the archive


DOWNLOAD_TIMEOUT_S = 60  # seconds without a byte from the server before a download fails


def check_file(path: Path, *, md5: str | None = None, size: int | None = None, what: str = "", hint: str) -> None:
    """Raise DataError (naming `what`, default the path, and `hint`) if the file is absent or differs."""
    what = what or str(path)
    if not path.is_file():
        raise DataError(f"{what}: file is missing; {hint}")
    if size is not None and (actual := path.stat().st_size) != size:
        raise DataError(f"{what}: {actual} bytes, expected {size}; {hint}")
    if md5 is not None and (actual_md5 := calculate_md5(path)) != md5:
        raise DataError(f"{what}: md5 {actual_md5} does not match the official {md5}; {hint}")


def download_archive(url: str, dest: Path, *, size: int | None = None, md5: str | None = None) -> None:
    """torchvision's `download_url` into a temporary folder beside `dest`, checked there and only then renamed to
    `dest`. Network failures propagate as OSError (URLError is one) so the caller can say what data was wanted."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    previous_timeout = socket.getdefaulttimeout()
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as folder:
        # torchvision opens the URL without a timeout: a server that stops answering would hang the cell forever.
        socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
        try:
            download_url(url, folder, dest.name)
        finally:
            socket.setdefaulttimeout(previous_timeout)
        fetched = Path(folder) / dest.name
        hint = "the transfer was corrupted: re-run to try again"
        check_file(fetched, md5=md5, size=size, what=f"download of {url}", hint=hint)
        os.replace(fetched, dest)


def fetch_and_extract(
    spec: ArchiveSpec, root: Path, *, dataset: str, download: bool, verify: bool, missing: Path
) -> None:
    """Extract the archive into `root`, downloading it first if it is absent and `download` is on.

    `missing` is the file whose absence brought us here; it is named in the error so the user knows what
    was looked for, next to the URL and where to put the archive when fetching it by hand.
    """
    archive = root / spec.filename
    place = f"place {spec.filename} in {root}/ and re-run"
    if not archive.is_file():
        if not download:
            raise DataError(f"{dataset}: {missing} not found and download is off; fetch {spec.url} by hand, {place}")
        try:
            download_archive(spec.url, archive, size=spec.size if verify else None, md5=spec.md5 if verify else None)
        except DataError:
            raise
        except (OSError, ValueError, http.client.HTTPException) as err:
            raise DataError(
                f"{dataset}: {missing} not found and downloading {spec.url} failed ({first_line(err)}); "
                f"fetch it by hand, {place}"
            ) from None
    elif verify:
        check_file(
            archive,
            md5=spec.md5,
            size=spec.size,
            hint="it is not the official archive: delete it and re-run to download it again",
        )
    safe_extract(archive, root)


def _refuse(archive: Path, member: str, reason: str) -> NoReturn:
    raise DataError(f"{archive}: refusing to extract member {member!r}: {reason}")


class _UnpackedSize:
    """Counts the members an archive holds and the bytes they unpack to, refusing it past either limit.

    The sizes are those in the member headers: tarfile writes exactly that many bytes (a sparse member's full
    size, holes included) and zipfile stops a member there, so they bound what extraction writes.
    """

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self.members = 0
        self.bytes = 0

    def add(self, size: int) -> None:
        self.members += 1
        self.bytes += size
        if self.members > MAX_ARCHIVE_MEMBERS:
            self._refuse(f"it holds more than {MAX_ARCHIVE_MEMBERS} members, the limit")
        if self.bytes > MAX_EXTRACTED_BYTES:
            self._refuse(f"it unpacks to more than {MAX_EXTRACTED_BYTES} bytes, the limit")

    def _refuse(self, reason: str) -> NoReturn:
        raise DataError(
            f"{self.archive}: refusing to extract: {reason} (the official archives unpack to ~250 MB in "
            "~120k members at most); it is not an official archive: delete it and re-run to download it again"
        )


def _refuse_absolute(archive: Path, name: str) -> None:
    posix = name.replace("\\", "/")
    if posix.startswith("/") or re.match(r"^[A-Za-z]:", posix):
        _refuse(archive, name, "absolute path")


def _check_destination(archive: Path, target: Path, name: str, is_dir: bool) -> None:
    """Refuse a member whose path is absolute or lands outside `target` (already resolved)."""
    _refuse_absolute(archive, name)
    dest = (target / name.replace("\\", "/")).resolve()
    if not (target in dest.parents or (is_dir and dest == target)):
        _refuse(archive, name, f"its path escapes {target}")


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hard link"
    return "device" if member.isdev() else "special file"


def _checked_tar_members(archive: Path, tar: tarfile.TarFile, target: Path) -> list[tarfile.TarInfo]:
    """Every member, checked before anything is written (tarfile's data filter checks each one only as it writes
    it, allows links that stay inside `target` and strips a leading / where this refuses the member)."""
    members = []
    unpacked = _UnpackedSize(archive)
    for member in tar:  # read header by header, so a refused archive is not read to its end
        if not (member.isreg() or member.isdir()):
            _refuse(archive, member.name, f"it is a {_tar_kind(member)}")
        _check_destination(archive, target, member.name, member.isdir())
        unpacked.add(member.size)
        members.append(member)
    return members


def _check_zip_member(archive: Path, info: zipfile.ZipInfo) -> None:
    """Refuse what zipfile would fail on halfway through (encryption, an unknown method) and zip bombs."""
    if info.flag_bits & _ZIP_ENCRYPTED:
        _refuse(archive, info.filename, "it is encrypted")
    if info.compress_type not in _ZIP_METHODS:
        _refuse(
            archive,
            info.filename,
            f"it uses compression method {info.compress_type}, not one of {', '.join(_ZIP_METHODS.values())}",
        )
    if info.file_size > ZIP_RATIO_CHECKED_FROM and info.file_size > MAX_ZIP_RATIO * info.compress_size:
        _refuse(
            archive,
            info.filename,
            f"it unpacks {info.compress_size} bytes to {info.file_size}, over {MAX_ZIP_RATIO} times as many (the "
            "limit)",
        )


def _checked_zip_members(archive: Path, zf: zipfile.ZipFile, target: Path) -> list[zipfile.ZipInfo]:
    """zipfile has no extraction filter: every member, checked here before anything is written."""
    members = []
    unpacked = _UnpackedSize(archive)
    for info in zf.infolist():
        unpacked.add(info.file_size)
        _check_zip_member(archive, info)
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind == stat.S_IFLNK:
            _refuse(archive, info.filename, "it is a symlink")
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            _refuse(archive, info.filename, "it is a special file")
        _check_destination(archive, target, info.filename, info.is_dir())
        members.append(info)
    return members


def _extract_zip(archive: Path, target: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(target, members=_checked_zip_members(archive, zf, target))


def _extract_tar(archive: Path, target: Path) -> None:
    with tarfile.open(archive, "r:*") as tar:
        members = _checked_tar_members(archive, tar, target)
        # The data filter also drops setuid and group or other write bits from what it writes.
        data_only = {"filter": _TAR_DATA_FILTER} if _TAR_DATA_FILTER is not None else {}
        tar.extractall(target, members=members, **data_only)


def safe_extract(archive: Path, target: Path) -> None:
    """Extract a tar (any compression) or zip archive into `target`, refusing anything but plain files and
    directories that stay inside it; the whole archive is checked before the first byte is written."""
    archive, target = Path(archive), Path(target)
    resolved = target.resolve()
    try:
        if zipfile.is_zipfile(archive):
            _extract_zip(archive, resolved)
        elif tarfile.is_tarfile(archive):
            _extract_tar(archive, resolved)
        else:
            raise DataError(f"{archive}: not a tar or zip archive; delete it and re-run to download it again")
    except DataError:
        raise
    # RuntimeError: what zipfile raises for a member packed with bzip2 or lzma when Python lacks that module.
    except (OSError, EOFError, zlib.error, tarfile.TarError, zipfile.BadZipFile, RuntimeError) as err:
        raise DataError(
            f"{archive}: extraction into {target} failed ({first_line(err)}); if the archive is corrupted, "
            "delete it and re-run to download it again"
        ) from None
