"""Download, verify and safely extract the official archives. torchvision fetches and hashes (download_url,
calculate_md5); its extract_archive is not used: it checks no member for path traversal, links or zip bombs."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import socket
import stat
import tarfile
import tempfile
import zipfile
import zlib
from abc import abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, NoReturn

from torchvision.datasets.utils import calculate_md5, download_url

from vit_locality.data.base import DataError, ImageDataModule
from vit_locality.datasets import Archive
from vit_locality.errors import first_line

# tarfile's "data" extraction filter (Python 3.12+ and recent patch releases of older ones).
_TAR_DATA_FILTER = getattr(tarfile, "data_filter", None)

# What one archive may unpack to: the official ones unpack to ~250 MB in ~120k members at most.
MAX_ARCHIVE_MEMBERS = 200_000
MAX_EXTRACTED_BYTES = 1 << 30
# A zip member over ZIP_RATIO_CHECKED_FROM bytes (the largest official one is 2.7 MB) that unpacks to over
# MAX_ZIP_RATIO times its packed size is a bomb (deflate packs zeros ~1000:1, text ~4:1, JPEGs ~1:1).
MAX_ZIP_RATIO = 200
ZIP_RATIO_CHECKED_FROM = 4 << 20
_ZIP_METHODS = {
    zipfile.ZIP_STORED: "stored",
    zipfile.ZIP_DEFLATED: "deflate",
    zipfile.ZIP_BZIP2: "bzip2",
    zipfile.ZIP_LZMA: "lzma",
}


DOWNLOAD_TIMEOUT_S = 60  # seconds without a byte from the server before a download fails
TRUSTED_COPY = (
    "or set data.verify=false to use a copy you trust (it skips only the official sizes and md5s: an archive is "
    "still checked member by member, and every file for its format, shape and labels)"
)


def check_file(path: Path, *, md5: str | None = None, size: int | None = None, what: str = "", hint: str) -> None:
    """Raise DataError naming `what` (default: the path) and `hint` if the file is absent or differs."""
    differs = hint if what else f"{hint}, {TRUSTED_COPY}"
    what = what or str(path)
    if not path.is_file():
        raise DataError(f"{what}: file is missing; {hint}")
    if size is not None and (actual := path.stat().st_size) != size:
        raise DataError(f"{what}: {actual} bytes, expected {size}; {differs}")
    if md5 is not None and (actual_md5 := calculate_md5(path)) != md5:
        raise DataError(f"{what}: md5 {actual_md5} does not match the official {md5}; {differs}")


def download_archive(url: str, dest: Path, *, size: int | None = None, md5: str | None = None) -> None:
    """`download_url` into a temporary folder beside `dest`, checked, then renamed; network errors stay OSError."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    previous_timeout = socket.getdefaulttimeout()
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as folder:
        # torchvision opens the URL without a timeout: a silent server would hang the cell forever.
        socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
        try:
            download_url(url, folder, dest.name)
        finally:
            socket.setdefaulttimeout(previous_timeout)
        fetched = Path(folder) / dest.name
        hint = "the transfer was corrupted: re-run to try again"
        check_file(fetched, md5=md5, size=size, what=f"download of {url}", hint=hint)
        os.replace(fetched, dest)


def _refuse(archive: Path, reason: str, member: str | None = None) -> NoReturn:
    if member is None:  # the archive as a whole: past a limit
        raise DataError(
            f"{archive}: refusing to extract: {reason}, the limit (the official archives unpack to ~250 MB in ~120k "
            "members at most); it is not an official archive: delete it and re-run to download it again"
        )
    raise DataError(f"{archive}: refusing to extract member {member!r}: {reason}")


def _check_members(archive: Path, target: Path, members: Iterable[tuple[str, int, bool, str | None]]) -> None:
    """Check each (name, header size, is a folder, problem) member: no problem, inside `target`, within limits."""
    unpacked = 0
    for count, (name, size, is_dir, problem) in enumerate(members, 1):
        unpacked += size
        if count > MAX_ARCHIVE_MEMBERS:
            _refuse(archive, f"it holds more than {MAX_ARCHIVE_MEMBERS} members")
        if unpacked > MAX_EXTRACTED_BYTES:
            _refuse(archive, f"it unpacks to more than {MAX_EXTRACTED_BYTES} bytes")
        if problem:
            _refuse(archive, problem, name)
        posix = name.replace("\\", "/")
        if posix.startswith("/") or re.match(r"^[A-Za-z]:", posix):
            _refuse(archive, "absolute path", name)
        dest = (target / posix).resolve()
        if not (target in dest.parents or (is_dir and dest == target)):
            _refuse(archive, f"its path escapes {target}", name)


def _tar_problem(member: tarfile.TarInfo) -> str | None:
    """Why a tar member is refused: anything but a plain file or folder (stricter than tarfile's data filter)."""
    if member.isreg() or member.isdir():
        return None
    kind = "symlink" if member.issym() else "hard link" if member.islnk() else "special file"
    return f"it is a {'device' if member.isdev() else kind}"


def _zip_problem(info: zipfile.ZipInfo) -> str | None:
    """Why a zip member is refused: encryption or an unknown method (zipfile would fail halfway), a bomb, a link."""
    size, packed, kind = info.file_size, info.compress_size, stat.S_IFMT(info.external_attr >> 16)
    if info.flag_bits & 0x1:  # general purpose bit 0
        return "it is encrypted"
    if info.compress_type not in _ZIP_METHODS:
        return f"it uses compression method {info.compress_type}, not one of {', '.join(_ZIP_METHODS.values())}"
    if size > ZIP_RATIO_CHECKED_FROM and size > MAX_ZIP_RATIO * packed:
        return f"it unpacks {packed} bytes to {size}, over {MAX_ZIP_RATIO} times as many (the limit)"
    if kind == stat.S_IFLNK:
        return "it is a symlink"
    return "it is a special file" if kind and kind not in (stat.S_IFREG, stat.S_IFDIR) else None


def safe_extract(archive: Path, target: Path) -> None:
    """Extract a tar or zip archive into `target`, the whole archive checked (`_check_members`) before writing."""
    archive, target = Path(archive), Path(target)
    resolved = target.resolve()
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                members = ((i.filename, i.file_size, i.is_dir(), _zip_problem(i)) for i in zf.infolist())
                _check_members(archive, resolved, members)
                zf.extractall(resolved)
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive, "r:*") as tar:
                _check_members(archive, resolved, ((m.name, m.size, m.isdir(), _tar_problem(m)) for m in tar))
                tar.extractall(resolved, **({"filter": _TAR_DATA_FILTER} if _TAR_DATA_FILTER is not None else {}))
        else:
            raise DataError(f"{archive}: not a tar or zip archive; delete it and re-run to download it again")
    except DataError:
        raise
    # RuntimeError: zipfile's for bzip2 or lzma when Python lacks that module.
    except (OSError, EOFError, zlib.error, tarfile.TarError, zipfile.BadZipFile, RuntimeError) as err:
        raise DataError(
            f"{archive}: extraction into {target} failed ({first_line(err)}); if the archive is corrupted, "
            "delete it and re-run to download it again"
        ) from None


class DownloadableDataModule(ImageDataModule):
    """A data set from one official archive, extracted into `<root>/<archive.folder>` when a required file is
    missing (`download`: fetched first); `verify` checks the archive's size and md5, else files load as they are."""

    archive: ClassVar[Archive]  # as its data set declares it (datasets.py)

    def __init__(self, download: bool = True, verify: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.download, self.verify = download, verify

    @property
    def folder(self) -> Path:
        return Path(self.root) / self.archive.folder

    @abstractmethod
    def required_files(self) -> tuple[Path, ...]:
        """The files whose absence means the archive must be extracted."""

    def _refuse_linked_folder(self, missing: Path) -> NoReturn:
        """A symlinked data set folder is never extracted into: say which link or target is wrong."""
        link, target = self.folder, os.readlink(self.folder)
        if not self.folder.exists():
            problem = "which does not exist: mount or restore it"
        elif not self.folder.is_dir():
            problem = "which is not a folder: point the link at the data set folder"
        else:
            problem = f"which lacks {missing.relative_to(link)}: complete the shared copy"
        raise DataError(
            f"{self.name}: {link} is a symlink to {target}, {problem}, or remove the link to have the data set "
            f"extracted into {self.root}"
        )

    def redo_hint(self, path: Path | None = None) -> str:
        """How to get a clean copy: delete `path` (a required file) or the folder."""
        if path is None:
            return f"delete {self.folder} and re-run to extract or download it again"
        return f"delete {path} (or all of {self.folder}) and re-run to download it again"

    def prepare_data(self) -> None:
        """Download and extract once per node (Lightning calls this on one process only)."""
        self.ensure_extracted()

    def ensure_extracted(self) -> None:
        """Make sure every required file exists, extracting (and if allowed downloading) the archive otherwise."""
        missing = [path for path in self.required_files() if not path.is_file()]
        if not missing:
            return
        if self.folder.is_symlink():
            self._refuse_linked_folder(missing[0])
        spec, root = self.archive, Path(self.root)
        archive = root / spec.filename
        place = f"place {spec.filename} in {root}/ and re-run"
        if not archive.is_file():
            if not self.download:
                raise DataError(
                    f"{self.name}: {missing[0]} not found and download is off; fetch {spec.url} by hand, {place}"
                )
            made = [folder for folder in (root, *root.parents) if not folder.exists()]  # deepest first
            try:
                download_archive(spec.url, archive, **({"size": spec.size, "md5": spec.md5} if self.verify else {}))
            except BaseException as err:
                for folder in made:  # the folders this download made, if still empty
                    with contextlib.suppress(OSError):
                        folder.rmdir()
                if not isinstance(err, (OSError, ValueError, http.client.HTTPException)):
                    raise
                raise DataError(
                    f"{self.name}: {missing[0]} not found and downloading {spec.url} failed ({first_line(err)}); "
                    f"fetch it by hand, {place}"
                ) from None
        elif self.verify:
            hint = "it is not the official archive: delete it and re-run to download it again"
            check_file(archive, md5=spec.md5, size=spec.size, hint=hint)
        safe_extract(archive, root)
        for path in missing:
            if not path.is_file():
                raise DataError(
                    f"{self.name}: {path} is missing even after extracting {archive}: the "
                    "archive is not the official one; delete it and re-run to download it again"
                )
