"""Download, verify and safely extract the official data archives.

Everything that can fail here (network, a corrupted file, a hostile archive) fails as one DataError whose
message names the file or URL and says what to do, instead of a traceback from deep inside urllib or tarfile.
Archives are extracted member by member after every member has been checked, so a refused archive writes
nothing.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import shutil
import stat
import tarfile
import tempfile
import urllib.request
import zipfile
import zlib
from pathlib import Path
from typing import IO

from tqdm import tqdm

from vit_locality.data.base import DataError

_CHUNK = 1 << 20


def one_line(err: BaseException) -> str:
    """An exception as `Type: message` on a single line, for embedding in a DataError."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


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
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            total = int(response.headers.get("Content-Length") or 0) or size
            with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=dest.name) as bar:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    bar.update(len(chunk))
        check_file(
            tmp,
            md5=md5,
            size=size,
            what=f"download of {url}",
            hint="the transfer was corrupted: re-run to try again",
        )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def fetch_and_extract(
    *,
    name: str,
    url: str,
    archive: Path,
    size: int | None,
    md5: str | None,
    download: bool,
    verify: bool,
    missing: Path,
) -> None:
    """Extract `archive` into its directory, downloading it first if it is absent and `download` is on.

    `missing` is the file whose absence brought us here; it is named in the error so the user knows what
    was looked for, next to the URL and where to put the archive when fetching it by hand.
    """
    root = archive.parent
    place = f"place {archive.name} in {root}/ and re-run"
    if not archive.is_file():
        if not download:
            raise DataError(f"{name}: {missing} not found and download is off; fetch {url} by hand, {place}")
        try:
            download_url(url, archive, size=size if verify else None, md5=md5 if verify else None)
        except DataError:
            raise
        except (OSError, ValueError, http.client.HTTPException) as err:
            raise DataError(
                f"{name}: {missing} not found and downloading {url} failed ({one_line(err)}); fetch it by hand, {place}"
            ) from None
    elif verify:
        check_file(
            archive,
            md5=md5,
            size=size,
            hint="it is not the official archive: delete it and re-run to download it again",
        )
    safe_extract(archive, root)


def _destination(archive: Path, target: Path, name: str, is_dir: bool) -> Path:
    """Where a member lands inside `target` (already resolved); refuse absolute or escaping paths."""
    posix = name.replace("\\", "/")
    if posix.startswith("/") or re.match(r"^[A-Za-z]:", posix):
        raise DataError(f"{archive}: refusing to extract member {name!r}: absolute path")
    dest = (target / posix).resolve()
    inside = target in dest.parents or (is_dir and dest == target)
    if not inside:
        raise DataError(f"{archive}: refusing to extract member {name!r}: its path escapes {target}")
    return dest


def _tar_plan(archive: Path, tar: tarfile.TarFile, target: Path) -> list[tuple[tarfile.TarInfo, Path]]:
    plan = []
    for member in tar.getmembers():
        if not (member.isreg() or member.isdir()):
            kind = (
                "symlink"
                if member.issym()
                else "hard link"
                if member.islnk()
                else "device"
                if member.isdev()
                else "special file"
            )
            raise DataError(f"{archive}: refusing to extract member {member.name!r}: it is a {kind}")
        plan.append((member, _destination(archive, target, member.name, member.isdir())))
    return plan


def _zip_plan(archive: Path, zf: zipfile.ZipFile, target: Path) -> list[tuple[zipfile.ZipInfo, Path]]:
    plan = []
    for info in zf.infolist():
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind == stat.S_IFLNK:
            raise DataError(f"{archive}: refusing to extract member {info.filename!r}: it is a symlink")
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            raise DataError(f"{archive}: refusing to extract member {info.filename!r}: it is a special file")
        plan.append((info, _destination(archive, target, info.filename, info.is_dir())))
    return plan


def _write(source: IO[bytes] | None, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    assert source is not None
    with source, open(dest, "wb") as out:
        shutil.copyfileobj(source, out, _CHUNK)


def safe_extract(archive: Path, target: Path) -> None:
    """Extract a tar (any compression) or zip archive into `target`, refusing anything but plain files and
    directories that stay inside it; the whole archive is checked before the first byte is written."""
    archive, target = Path(archive), Path(target)
    resolved = target.resolve()
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                for info, dest in _zip_plan(archive, zf, resolved):
                    if info.is_dir():
                        dest.mkdir(parents=True, exist_ok=True)
                    else:
                        _write(zf.open(info), dest)
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive, "r:*") as tar:
                for member, dest in _tar_plan(archive, tar, resolved):
                    if member.isdir():
                        dest.mkdir(parents=True, exist_ok=True)
                    else:
                        _write(tar.extractfile(member), dest)
        else:
            raise DataError(f"{archive}: not a tar or zip archive; delete it and re-run to download it again")
    except DataError:
        raise
    except (OSError, EOFError, zlib.error, tarfile.TarError, zipfile.BadZipFile) as err:
        raise DataError(
            f"{archive}: extraction into {target} failed ({one_line(err)}); if the archive is corrupted, "
            "delete it and re-run to download it again"
        ) from None
