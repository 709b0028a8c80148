"""What a failed download leaves (nothing it made) and what a copy that differs from the official one says (both
ways out: fetch it again, or use it as it is with data.verify=false)."""

from __future__ import annotations

import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from data_fakes import write_fake_cifar10

from vit_locality.data import download
from vit_locality.data.base import DataError
from vit_locality.data.cifar import CIFAR10DataModule


def _cifar10(root: Path, **kwargs: bool) -> CIFAR10DataModule:
    return CIFAR10DataModule(root=str(root), batch_size=8, num_workers=0, **kwargs)


def _cut_off(url: str, folder: str, filename: str) -> None:
    """A transfer that stops half-way: part of the archive on disk, then the connection gone."""
    (Path(folder) / filename).write_bytes(b"\x1f\x8b" + bytes(1000))
    raise ConnectionResetError(104, "Connection reset by peer")


def _offline(*args: object, **kwargs: object) -> None:
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")


@pytest.mark.parametrize("failure", ["offline", "cut off"])
def test_a_failed_download_leaves_nothing_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """`data.root=shared/data`, neither folder there yet: a failed download removes the partial archive and both
    folders it made for it, and nothing else."""
    if failure == "offline":
        monkeypatch.setattr(urllib.request, "urlopen", _offline)
    else:
        monkeypatch.setattr(download, "download_url", _cut_off)
    (tmp_path / "notes.txt").write_text("not the download's")
    root = tmp_path / "shared" / "data"
    with pytest.raises(DataError, match=r"downloading https://\S+cifar-10-python\.tar\.gz failed \((URLError|Conn)"):
        _cifar10(root, download=True, verify=True).setup()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt"]


def test_a_cifar_copy_whose_md5_differs_names_both_ways_out(tmp_path: Path) -> None:
    """Fetch the file again (delete it), or keep a copy one trusts with data.verify=false, whose checks the message
    names; for an archive at hand as for an extracted file."""
    fake = write_fake_cifar10(tmp_path / "data")
    with pytest.raises(DataError) as err:
        _cifar10(tmp_path / "data", download=False, verify=True).setup()
    message = str(err.value)
    assert "\n" not in message
    assert f"{fake.folder / 'data_batch_1'}: md5 " in message and "does not match the official" in message
    assert f"delete {fake.folder / 'data_batch_1'} (or all of {fake.folder}) and re-run to download it" in message
    assert "or set data.verify=false to use a copy you trust (it skips only the official sizes and md5s" in message
    assert "still checked member by member, and every file for its format, shape and labels" in message
    _cifar10(tmp_path / "data", download=False, verify=False).setup()  # the way out it names works

    archive = tmp_path / "archive" / "cifar-10-python.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(fake.folder, arcname="cifar-10-batches-py")
    with pytest.raises(DataError) as err:
        _cifar10(archive.parent, download=False, verify=True).setup()
    message = str(err.value)
    assert f"{archive}: " in message and "it is not the official archive: delete it and re-run" in message
    assert "or set data.verify=false to use a copy you trust" in message and "\n" not in message
