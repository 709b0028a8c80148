"""CIFAR loading on fake files in the official format: pixel layout, labels, md5, hostile pickles and tars."""

from __future__ import annotations

import dataclasses
import os
import pickle
import struct
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from data_fakes import CIFAR10_NAMES, FakeCifar, served, write_fake_cifar10, write_fake_cifar100
from torchvision.datasets.utils import calculate_md5

from vit_locality.data import download
from vit_locality.data.base import DataError
from vit_locality.data.cifar import CIFAR10DataModule, CIFAR100DataModule
from vit_locality.data.download import safe_extract
from vit_locality.data.safe_pickle import load_pickle


def _dm(cls, root: Path, **kwargs):
    options = {"verify": False, "download": False, **kwargs}
    return cls(root=str(root), batch_size=8, num_workers=0, **options)


def _planes(rows: np.ndarray) -> torch.Tensor:
    """(N, 3072) rows to (N, 3, 32, 32), built plane by plane rather than by the loader's reshape."""
    planes = [rows[:, c * 1024 : (c + 1) * 1024].reshape(-1, 32, 32) for c in range(3)]
    return torch.from_numpy(np.stack(planes, axis=1))


def _dump(path: Path, obj: object) -> None:
    path.write_bytes(pickle.dumps(obj, protocol=2))


def test_cifar10_round_trip_through_the_datamodule(tmp_path: Path) -> None:
    fake = write_fake_cifar10(tmp_path, n_train_per_batch=4, n_test=6, seed=1)
    # One image with known planes: R a ramp, G constant 7, B constant 250.
    batch = pickle.loads((fake.folder / "data_batch_1").read_bytes())
    ramp = (np.arange(1024) % 251).astype(np.uint8)
    batch["data"][0] = np.concatenate([ramp, np.full(1024, 7, np.uint8), np.full(1024, 250, np.uint8)])
    _dump(fake.folder / "data_batch_1", batch)
    fake.train_rows[0] = batch["data"][0]

    dm = _dm(CIFAR10DataModule, tmp_path)
    dm.setup()
    arrays = dm.arrays
    assert arrays.train_images.shape == (20, 3, 32, 32) and arrays.train_images.dtype == torch.uint8
    assert arrays.test_images.shape == (6, 3, 32, 32) and arrays.test_images.dtype == torch.uint8
    assert torch.equal(arrays.train_images, _planes(fake.train_rows))
    assert torch.equal(arrays.test_images, _planes(fake.test_rows))
    assert arrays.train_labels.dtype == torch.int64
    assert arrays.train_labels.tolist() == fake.train_labels.tolist()
    assert arrays.test_labels.tolist() == fake.test_labels.tolist()
    assert dm.arrays.class_names == CIFAR10_NAMES

    first = arrays.train_images[0]
    assert torch.equal(first[0], torch.from_numpy(ramp.reshape(32, 32)))  # R plane is channel 0, row-major
    assert first[0, 0, 1] == 1 and first[0, 1, 0] == 32
    assert (first[1] == 7).all() and (first[2] == 250).all()

    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (8, 3, 32, 32) and images.dtype == torch.uint8
    assert labels.shape == (8,) and labels.dtype == torch.int64
    images, _ = next(iter(dm.test_dataloader()))
    assert torch.equal(images, arrays.test_images[:6])


def test_cifar100_uses_fine_labels_and_names(tmp_path: Path) -> None:
    fake = write_fake_cifar100(tmp_path, n_train=12, n_test=5, seed=2)
    dm = _dm(CIFAR100DataModule, tmp_path)
    dm.setup()
    assert dm.num_classes == 100 and dm.name == "cifar100"
    assert torch.equal(dm.arrays.train_images, _planes(fake.train_rows))
    assert dm.arrays.train_labels.tolist() == fake.train_labels.tolist()
    assert dm.arrays.test_labels.tolist() == fake.test_labels.tolist()
    assert dm.arrays.class_names == fake.class_names
    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (8, 3, 32, 32) and labels.dtype == torch.int64


def test_truncated_pickle_names_the_file(tmp_path: Path) -> None:
    fake = write_fake_cifar10(tmp_path)
    path = fake.folder / "data_batch_2"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataError, match=r"data_batch_2.*truncated or corrupted.*delete"):
        _dm(CIFAR10DataModule, tmp_path).setup()


def test_md5_mismatch_with_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = write_fake_cifar10(tmp_path)
    with pytest.raises(DataError, match=r"data_batch_1: md5 .* does not match the official"):
        _dm(CIFAR10DataModule, tmp_path, verify=True).setup()

    for path in fake.files:
        monkeypatch.setitem(CIFAR10DataModule.layout.md5, path.name, calculate_md5(path))
    _dm(CIFAR10DataModule, tmp_path, verify=True).setup()  # the fakes pass once their md5s are "official"

    path = fake.folder / "data_batch_4"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"data_batch_4: md5 .* does not match.*delete"):
        _dm(CIFAR10DataModule, tmp_path, verify=True).setup()


@pytest.mark.parametrize("name", ["batches.meta", "data_batch_3", "test_batch"])
def test_missing_file_is_named(tmp_path: Path, name: str) -> None:
    fake = write_fake_cifar10(tmp_path)
    (fake.folder / name).unlink()
    with pytest.raises(DataError, match=rf"cifar-10-batches-py/{name}"):
        _dm(CIFAR10DataModule, tmp_path).setup()


def test_wrong_array_shape_is_named(tmp_path: Path) -> None:
    fake = write_fake_cifar10(tmp_path)
    bad = np.zeros((4, 3000), np.uint8)
    _dump(fake.folder / "test_batch", {"data": bad, "labels": [0, 1, 2, 3]})
    with pytest.raises(DataError, match=r"test_batch: 'data' has shape \(4, 3000\).*expected \(N, 3072\)"):
        _dm(CIFAR10DataModule, tmp_path).setup()


def test_label_count_and_range_are_checked(tmp_path: Path) -> None:
    fake = write_fake_cifar100(tmp_path, n_train=4, n_test=2)
    _dump(fake.folder / "test", {"data": np.zeros((2, 3072), np.uint8), "fine_labels": [0, 100]})
    with pytest.raises(DataError, match=r"cifar-100-python/test: labels span \[0, 100\]"):
        _dm(CIFAR100DataModule, tmp_path).setup()
    _dump(fake.folder / "test", {"data": np.zeros((2, 3072), np.uint8), "fine_labels": [0]})
    with pytest.raises(DataError, match=r"cifar-100-python/test: 'fine_labels' should hold 2"):
        _dm(CIFAR100DataModule, tmp_path).setup()


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_without_running(tmp_path: Path) -> None:
    fake = write_fake_cifar10(tmp_path)
    marker = tmp_path / "pwned"
    _dump(fake.folder / "data_batch_1", {"data": _Evil(marker), "labels": []})
    with pytest.raises(DataError, match=r"data_batch_1: refusing to unpickle the global (posix|os|nt)\.system"):
        _dm(CIFAR10DataModule, tmp_path).setup()
    assert not marker.exists()


def test_restricted_unpickler_refuses_other_globals(tmp_path: Path) -> None:
    path = tmp_path / "evil.pkl"
    # GLOBAL builtins.eval, then call it: plain pickle.load would evaluate the string.
    path.write_bytes(b"cbuiltins\neval\n(S'1+1'\ntR.")
    assert pickle.loads(path.read_bytes()) == 2
    with pytest.raises(DataError, match=r"evil.pkl: refusing to unpickle the global builtins\.eval"):
        load_pickle(path)
    path.write_bytes(pickle.dumps({"a": np.arange(3, dtype=np.uint8), "b": [1.5, "x", (2, 3)]}, protocol=2))
    loaded = load_pickle(path)
    assert loaded["a"].tolist() == [0, 1, 2] and loaded["b"] == [1.5, "x", (2, 3)]


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


def test_missing_data_without_download_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        _dm(CIFAR100DataModule, tmp_path).setup()
    message = _one_line(err)
    assert str(tmp_path / "cifar-100-python") in message
    assert "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz" in message
    assert f"place cifar-100-python.tar.gz in {tmp_path}/" in message


def test_failed_download_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataError) as err:
        _dm(CIFAR10DataModule, tmp_path, download=True, verify=True).setup()
    message = _one_line(err)
    assert str(tmp_path / "cifar-10-batches-py") in message
    assert "downloading https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz failed (URLError" in message
    assert "place cifar-10-python.tar.gz in" in message
    assert list(tmp_path.iterdir()) == []  # no partial download left behind


def _fake_archive(tmp_path: Path) -> tuple[Path, FakeCifar]:
    fake = write_fake_cifar10(tmp_path / "src", n_train_per_batch=3, n_test=3, seed=3)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(fake.folder, arcname="cifar-10-batches-py")
    return archive, fake


def test_download_verify_and_extract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive, fake = _fake_archive(tmp_path)
    layout = dataclasses.replace(CIFAR10DataModule.layout, md5={path.name: calculate_md5(path) for path in fake.files})
    monkeypatch.setattr(CIFAR10DataModule, "layout", layout)
    with served(tmp_path) as url:
        spec = dataclasses.replace(
            CIFAR10DataModule.archive,
            url=f"{url}/{archive.name}",
            size=archive.stat().st_size,
            md5=calculate_md5(archive),
        )
        monkeypatch.setattr(CIFAR10DataModule, "archive", spec)
        root = tmp_path / "data"
        dm = _dm(CIFAR10DataModule, root, download=True, verify=True)
        dm.setup()
        assert torch.equal(dm.arrays.train_images, _planes(fake.train_rows))
        assert sorted(p.name for p in root.iterdir()) == ["cifar-10-batches-py", "cifar-10-python.tar.gz"]

        monkeypatch.setattr(CIFAR10DataModule, "archive", dataclasses.replace(spec, md5="0" * 32))
        other = tmp_path / "other"
        with pytest.raises(DataError, match=r"download of http://.*md5 .* does not match.*re-run"):
            _dm(CIFAR10DataModule, other, download=True, verify=True).setup()
    assert not other.exists()  # no partial or unverified download, nor the data root it made, left behind


def test_archive_lacking_a_file_is_named(tmp_path: Path) -> None:
    fake = write_fake_cifar10(tmp_path / "src")
    (fake.folder / "test_batch").unlink()
    root = tmp_path / "data"
    root.mkdir()
    with tarfile.open(root / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(fake.folder, arcname="cifar-10-batches-py")
    with pytest.raises(DataError, match=r"test_batch is missing even after extracting .*tar\.gz: the archive is not"):
        _dm(CIFAR10DataModule, root).setup()


def _tar_with(archive: Path, bad: tarfile.TarInfo, payload: bytes = b"") -> None:
    with tarfile.open(archive, "w") as tar:
        good = tarfile.TarInfo("good/ok.txt")
        good.size = 2
        tar.addfile(good, _Bytes(b"ok"))
        tar.addfile(bad, _Bytes(payload) if payload else None)


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, n: int = -1) -> bytes:
        chunk, self.data = (self.data, b"") if n < 0 else (self.data[:n], self.data[n:])
        return chunk


def _member(kind: str, tmp_path: Path) -> tuple[tarfile.TarInfo, str]:
    if kind == "dotdot":
        info = tarfile.TarInfo("good/../../evil.txt")
        info.size = 4
        return info, "escapes"
    if kind == "absolute":
        info = tarfile.TarInfo(str(tmp_path / "abs_evil.txt"))
        info.size = 4
        return info, "absolute"
    info = tarfile.TarInfo("good/link")
    if kind == "symlink":
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        return info, "symlink"
    if kind == "hardlink":
        info.type, info.linkname = tarfile.LNKTYPE, "/etc/passwd"
        return info, "hard link"
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info, "device"


@pytest.fixture(params=["data filter", "own checks"])
def tar_checks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Extract with tarfile's data filter, and with the checks that stand in for it on Pythons without one."""
    if request.param == "own checks":
        monkeypatch.setattr(download, "_TAR_DATA_FILTER", None)
    elif download._TAR_DATA_FILTER is None:
        pytest.skip("this Python's tarfile has no data filter")
    return request.param


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "hardlink", "device"])
def test_unsafe_tar_members_are_refused(tmp_path: Path, kind: str, tar_checks: str) -> None:
    archive = tmp_path / "bad.tar"
    bad, reason = _member(kind, tmp_path)
    _tar_with(archive, bad, b"evil" if bad.size else b"")
    target = tmp_path / "out"
    with pytest.raises(DataError, match=rf"bad\.tar: refusing to extract member .*{reason}"):
        safe_extract(archive, target)
    assert not target.exists()  # checked before anything is written, even the good member
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "abs_evil.txt").exists()


def test_tar_extracts_every_file_and_folder(tmp_path: Path, tar_checks: str) -> None:
    archive, fake = _fake_archive(tmp_path)
    safe_extract(archive, tmp_path / "out")
    folder = tmp_path / "out" / "cifar-10-batches-py"
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in fake.files)
    for path in fake.files:
        assert (folder / path.name).read_bytes() == path.read_bytes()


def test_corrupted_archive_is_named(tmp_path: Path) -> None:
    archive, _ = _fake_archive(tmp_path)
    archive.write_bytes(archive.read_bytes()[:2000])
    with pytest.raises(DataError, match=r"cifar-10-python\.tar\.gz: .*delete it"):
        safe_extract(archive, tmp_path / "out")


class _Py2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 `str` (BINSTRING) and numpy's old module path, as the official files do."""

    dispatch = dict(pickle._Pickler.dispatch)

    def _save_bytes(self, obj: bytes) -> None:
        self.write(b"T" + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    def _save_global(self, obj, name=None) -> None:
        module = obj.__module__.replace("numpy._core", "numpy.core")
        self.write(f"c{module}\n{name or obj.__name__}\n".encode())
        self.memoize(obj)

    dispatch[bytes] = _save_bytes
    dispatch[type] = _save_global
    dispatch[type(len)] = _save_global


def test_python2_pickle_loads(tmp_path: Path) -> None:
    rows = (np.arange(2 * 3072) % 256).astype(np.uint8).reshape(2, 3072)
    path = tmp_path / "data_batch_1"
    with open(path, "wb") as handle:
        _Py2Pickler(handle, protocol=2).dump({"data": rows, "labels": [3, 4]})
    raw = path.read_bytes()
    assert b"numpy.core.multiarray" in raw and b"_codecs" not in raw
    loaded = load_pickle(path)
    assert np.array_equal(loaded["data"], rows) and loaded["labels"] == [3, 4]


def test_symlinked_folder_is_used_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared layout, data/cifar-10-batches-py -> shared/cifar-10-batches-py: the md5s are checked through the
    link, and nothing is downloaded or extracted."""
    fake = write_fake_cifar10(tmp_path / "shared")
    for path in fake.files:
        monkeypatch.setitem(CIFAR10DataModule.layout.md5, path.name, calculate_md5(path))
    root = tmp_path / "data"
    root.mkdir()
    (root / "cifar-10-batches-py").symlink_to(fake.folder)
    dm = _dm(CIFAR10DataModule, root, download=True, verify=True)
    dm.setup()
    assert torch.equal(dm.arrays.train_images, _planes(fake.train_rows))
    assert [p.name for p in root.iterdir()] == ["cifar-10-batches-py"]


@pytest.mark.parametrize("target", ["missing", "incomplete"])
def test_broken_symlinked_folder_names_the_link_and_its_target(tmp_path: Path, target: str) -> None:
    """The archive at hand is not extracted through the link into the shared copy; the error says what to fix."""
    archive, _ = _fake_archive(tmp_path)
    root = tmp_path / "data"
    root.mkdir()
    archive.rename(root / archive.name)
    shared = tmp_path / "shared" / "cifar-10-batches-py"
    if target == "incomplete":
        write_fake_cifar10(tmp_path / "shared")
        (shared / "test_batch").unlink()
    link = root / "cifar-10-batches-py"
    link.symlink_to(shared)
    with pytest.raises(DataError) as err:
        _dm(CIFAR10DataModule, root).setup()
    problem = "which does not exist: mount or restore it" if target == "missing" else "which lacks test_batch"
    assert f"cifar10: {link} is a symlink to {shared}, {problem}" in _one_line(err)
    assert f"or remove the link to have the data set extracted into {root}" in str(err.value)
    assert sorted(p.name for p in root.iterdir()) == [link.name, archive.name]
    assert not (shared / "test_batch").exists()


def test_a_server_that_stops_answering_fails_the_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listening socket that never answers: the download fails after the timeout instead of hanging."""
    import socket

    import vit_locality.data.download as download

    monkeypatch.setattr(download, "DOWNLOAD_TIMEOUT_S", 1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/cifar-10-python.tar.gz"
        started = time.monotonic()
        with pytest.raises(OSError):
            download.download_archive(url, tmp_path / "cifar-10-python.tar.gz")
    assert time.monotonic() - started < 30
    assert socket.getdefaulttimeout() is None  # the process-wide default is restored
    assert list(tmp_path.iterdir()) == []
