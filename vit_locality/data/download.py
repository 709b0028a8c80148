"""Download, verify and safely extract the official data archives.

Everything that can fail here (network, a corrupted file, a hostile archive) fails as one DataError whose
message names the file or URL and says what to do, instead of a traceback from deep inside urllib or tarfile.
Every member of an archive is checked before the first one is written, so a refused archive writes nothing.
The checks bound what an archive may unpack to even when its md5 is not checked (`data.verify=false`).
"""

from __future__ import annotations

import hashlib
import http.client
import re
import shutil
import stat
import tarfile
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, NoReturn

from tqdm import tqdm

from vit_locality.data.base import DataError
from vit_locality.errors import first_line
from vit_locality.run.atomic import replace_atomically

_CHUNK = 1 << 20
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


def md5sum(path: Path) -> str:
    """Hex md5 of a file, read in chunks so archives of hundreds of MB need no memory."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def check_file(path: Path, *, md5: str | None = None, size: int | None = None, what: str = "", hint: str) -> None:
    """Raise DataError (naming `what`, default the path, and `hint`) if the file is absent or differs."""
    what = what or str(path)
    if not path.is_file():
        raise DataError(f"{what}: file is missing; {hint}")
    if size is not None and (actual := path.stat().st_size) != size:
        raise DataError(f"{what}: {actual} bytes, expected {size}; {hint}")
    if md5 is not None and (actual_md5 := md5sum(path)) != md5:
        raise DataError(f"{what}: md5 {actual_md5} does not match the official {md5}; {hint}")


def download_url(
    url: str, dest: Path, *, size: int | None = None, md5: str | None = None, timeout: float = 60.0
) -> Path:
    """Fetch `url` to `dest` with a progress bar; a partial or unverified download never appears at `dest`.

    Network failures propagate as OSError (URLError is one) so the caller can say what data was wanted.
    """

    def fetch(out: BinaryIO) -> None:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            total = int(response.headers.get("Content-Length") or 0) or size
            with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=dest.name) as bar:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    bar.update(len(chunk))

    def verify(downloaded: Path) -> None:
        hint = "the transfer was corrupted: re-run to try again"
        check_file(downloaded, md5=md5, size=size, what=f"download of {url}", hint=hint)

    replace_atomically(dest, fetch, check=verify)
    return dest


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
            download_url(spec.url, archive, size=spec.size if verify else None, md5=spec.md5 if verify else None)
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


def _destination(archive: Path, target: Path, name: str, is_dir: bool) -> Path:
    """Where a member lands inside `target` (already resolved); refuse absolute or escaping paths."""
    _refuse_absolute(archive, name)
    dest = (target / name.replace("\\", "/")).resolve()
    if not (target in dest.parents or (is_dir and dest == target)):
        _refuse(archive, name, f"its path escapes {target}")
    return dest


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hard link"
    return "device" if member.isdev() else "special file"


def _inside(archive: Path, member: tarfile.TarInfo, target: Path) -> tarfile.TarInfo:
    """The member as the data filter passes it (unchanged where Python lacks the filter); refuse an escaping path."""
    if _TAR_DATA_FILTER is None:
        _destination(archive, target, member.name, member.isdir())
        return member
    try:
        return _TAR_DATA_FILTER(member, str(target))
    except tarfile.OutsideDestinationError:
        _refuse(archive, member.name, f"its path escapes {target}")


def _checked_tar_members(archive: Path, tar: tarfile.TarFile, target: Path) -> list[tarfile.TarInfo]:
    """Every member, checked before anything is written (the filter alone checks each one as it writes it).

    Links and device files are refused outright, where the filter allows links that stay inside `target`;
    absolute paths are refused too, where the filter strips the leading / and extracts the rest.
    """
    members = []
    unpacked = _UnpackedSize(archive)
    for member in tar:  # read header by header, so a refused archive is not read to its end
        if not (member.isreg() or member.isdir()):
            _refuse(archive, member.name, f"it is a {_tar_kind(member)}")
        _refuse_absolute(archive, member.name)
        unpacked.add(member.size)
        members.append(_inside(archive, member, target))
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


def _zip_plan(archive: Path, zf: zipfile.ZipFile, target: Path) -> list[tuple[zipfile.ZipInfo, Path]]:
    """zipfile has no extraction filter: check every member ourselves, and say where each one lands."""
    plan = []
    unpacked = _UnpackedSize(archive)
    for info in zf.infolist():
        unpacked.add(info.file_size)
        _check_zip_member(archive, info)
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind == stat.S_IFLNK:
            _refuse(archive, info.filename, "it is a symlink")
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            _refuse(archive, info.filename, "it is a special file")
        plan.append((info, _destination(archive, target, info.filename, info.is_dir())))
    return plan


def _place(dest: Path, source: IO[bytes] | None) -> None:
    """Create `dest` as a directory when there is no `source`, else as a copy of it."""
    if source is None:
        dest.mkdir(parents=True, exist_ok=True)
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    with source, open(dest, "wb") as out:
        shutil.copyfileobj(source, out, _CHUNK)


def _extract_zip(archive: Path, target: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for info, dest in _zip_plan(archive, zf, target):
            _place(dest, None if info.is_dir() else zf.open(info))


def _extract_tar(archive: Path, target: Path) -> None:
    with tarfile.open(archive, "r:*") as tar:
        members = _checked_tar_members(archive, tar, target)
        if _TAR_DATA_FILTER is not None:
            tar.extractall(target, members=members, filter=_TAR_DATA_FILTER)
            return
        for member in members:
            _place(target / member.name, None if member.isdir() else tar.extractfile(member))


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
