"""Hostile or broken data stays bounded even with data.verify=false, where no md5 vouches for a file.

Archives that unpack past the limits are refused before anything is written, zip members zipfile would fail on
halfway are refused up front, a JPEG's size is checked before it is decoded, val_annotations.txt cannot name
files outside the data set, and the unpickler refuses what would allocate past its budget before it does.
Every bomb here is built small: either the limit is patched down, or the archive only claims the size.
"""

from __future__ import annotations

import codecs
import io
import multiprocessing
import os
import pickle
import struct
import tarfile
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from data_fakes import write_fake_cifar10, write_fake_tiny_imagenet
from PIL import Image, ImageFile

from vit_locality.data import download, safe_pickle
from vit_locality.data.base import DataError
from vit_locality.data.cifar import CIFAR10DataModule
from vit_locality.data.download import safe_extract
from vit_locality.data.safe_pickle import load_pickle
from vit_locality.data.tiny_imagenet import TinyImageNetDataModule

_MiB = 1 << 20


def _setup(cls: type, root: Path) -> None:
    cls(root=str(root), batch_size=2, num_workers=0, verify=False, download=False).setup()


def _write_zip(archive: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _write_tar(archive: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(archive, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _peak_traced_bytes(action: Callable[[], Any]) -> int:
    """The most memory Python had allocated at once while `action` ran (its DataError, if any, is swallowed)."""
    tracemalloc.start()
    try:
        action()
    except DataError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


# --- archives: sizes and member counts -----------------------------------------------------------------------


def test_zip_bomb_member_is_refused_before_writing(tmp_path: Path) -> None:
    """8 MiB of zeros deflate to ~8 KB: a ratio of ~1000, over the default limit of 200."""
    archive = tmp_path / "tiny-imagenet-200.zip"
    _write_zip(archive, {"tiny-imagenet-200/wnids.txt": b"n01\n", "tiny-imagenet-200/zeros.bin": bytes(8 * _MiB)})
    assert archive.stat().st_size < 64 * 1024
    with pytest.raises(DataError) as err:
        _setup(TinyImageNetDataModule, tmp_path)
    message = str(err.value)
    assert f"{archive}: refusing to extract member 'tiny-imagenet-200/zeros.bin'" in message
    assert f"to {8 * _MiB}, over 200 times as many (the limit)" in message
    assert [p.name for p in tmp_path.iterdir()] == [archive.name]


@pytest.mark.parametrize("content", ["sparse", "truncated"])
def test_tar_claiming_over_a_gibibyte_is_refused_before_writing(tmp_path: Path, content: str) -> None:
    """A member header claims 1 GiB + 1 byte (the default limit is 1 GiB) in a tar of a few KB: a GNU sparse
    member whose map holds 512 real bytes, or a plain member whose data simply stops."""
    archive = tmp_path / "cifar-10-python.tar.gz"
    claimed = (1 << 30) + 1
    info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
    if content == "sparse":
        info.size = 512
        info.pax_headers = {"GNU.sparse.map": "0,512", "GNU.sparse.size": str(claimed), "GNU.sparse.name": info.name}
        with tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(info, io.BytesIO(bytes(512)))
    else:
        info.size = claimed
        archive.write_bytes(info.tobuf() + bytes(10_000))
    assert archive.stat().st_size < 16 * 1024
    with pytest.raises(DataError, match=rf"tar\.gz: refusing to extract: it unpacks to more than {1 << 30} bytes"):
        _setup(CIFAR10DataModule, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [archive.name]


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_total_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setattr(download, "MAX_EXTRACTED_BYTES", 100_000)
    rng = np.random.default_rng(0)
    members = {f"set/part_{i}.bin": rng.bytes(40_000) for i in range(3)}  # incompressible: no ratio to refuse
    archive = tmp_path / f"set.{kind}"
    (_write_zip if kind == "zip" else _write_tar)(archive, members)
    with pytest.raises(DataError, match=rf"set\.{kind}: refusing to extract: it unpacks to more than 100000 bytes"):
        safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_member_count_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setattr(download, "MAX_ARCHIVE_MEMBERS", 5)
    archive = tmp_path / f"set.{kind}"
    (_write_zip if kind == "zip" else _write_tar)(archive, {f"set/{i}.txt": b"x" for i in range(10)})
    with pytest.raises(DataError, match=rf"set\.{kind}: refusing to extract: it holds more than 5 members"):
        safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- archives: zip members zipfile cannot read ---------------------------------------------------------------


def _patch_zip_member(archive: Path, name: str, *, flags: int, method: int | None = None) -> None:
    """Set general purpose `flags` (and the compression `method`) of member `name` in both of its headers."""
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as zf:
        local, central = zf.getinfo(name).header_offset, zf.start_dir
    while data[central : central + 4] == b"PK\x01\x02":
        name_length, extra_length, comment_length = struct.unpack_from("<3H", data, central + 28)
        if data[central + 46 : central + 46 + name_length] == name.encode():
            break
        central += 46 + name_length + extra_length + comment_length
    for flag_offset in (local + 6, central + 8):
        struct.pack_into("<H", data, flag_offset, struct.unpack_from("<H", data, flag_offset)[0] | flags)
        if method is not None:
            struct.pack_into("<H", data, flag_offset + 2, method)
    archive.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("flags", "method", "reason"),
    [(0x1, None, "it is encrypted"), (0, 99, "it uses compression method 99, not one of stored, deflate")],
    ids=["encrypted", "unknown method"],
)
def test_unreadable_zip_member_is_refused_before_writing(
    tmp_path: Path, flags: int, method: int | None, reason: str
) -> None:
    archive = tmp_path / "tiny-imagenet-200.zip"
    _write_zip(archive, {"tiny-imagenet-200/wnids.txt": b"n01\n", "tiny-imagenet-200/words.txt": b"n01\tthing\n"})
    _patch_zip_member(archive, "tiny-imagenet-200/words.txt", flags=flags, method=method)
    with pytest.raises(DataError, match=rf"zip: refusing to extract member 'tiny-imagenet-200/words\.txt': {reason}"):
        _setup(TinyImageNetDataModule, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [archive.name]


# --- Tiny-ImageNet: image sizes and val file names -----------------------------------------------------------


def _claim_size(path: Path, width: int, height: int) -> None:
    """Rewrite the frame header (SOF0) of a baseline JPEG to claim another size; the pixel data stays as it is."""
    data = bytearray(path.read_bytes())
    struct.pack_into(">HH", data, data.index(b"\xff\xc0") + 5, height, width)
    path.write_bytes(bytes(data))


def test_image_size_is_checked_before_decoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = write_fake_tiny_imagenet(tmp_path, n_classes=2, n_train_per_class=2, n_val_per_class=1)
    huge = fake.val_files[0]
    _claim_size(huge, 4096, 4096)  # 48 MB decoded, from a 1 KB file
    with Image.open(huge) as image:
        assert image.size == (4096, 4096)
    decode = ImageFile.ImageFile.load

    def load_unless_huge(image: ImageFile.ImageFile) -> Any:
        assert Path(image.filename) != huge, "decoded an image whose header is the wrong size"
        return decode(image)

    monkeypatch.setattr(ImageFile.ImageFile, "load", load_unless_huge)
    with pytest.raises(DataError, match=rf"{huge.name}: image is 4096x4096 px, expected 64x64; delete"):
        _setup(TinyImageNetDataModule, tmp_path)


@pytest.mark.parametrize("name", ["../../etc/passwd", "../../../outside.JPEG", "absolute"])
def test_val_file_names_stay_inside_the_data_set(tmp_path: Path, name: str) -> None:
    fake = write_fake_tiny_imagenet(tmp_path / "data", n_classes=2, n_train_per_class=1, n_val_per_class=1)
    outside = tmp_path / "outside.JPEG"  # a valid image, so a loader that follows the name loads it quietly
    Image.new("RGB", (64, 64), (1, 2, 3)).save(outside)
    name = str(outside) if name == "absolute" else name
    annotations = fake.folder / "val" / "val_annotations.txt"
    with open(annotations, "a") as handle:
        handle.write(f"{name}\t{fake.wnids[0]}\t0\t0\t63\t63\n")
    with pytest.raises(DataError) as err:
        _setup(TinyImageNetDataModule, tmp_path / "data")
    assert f"{annotations}, line 3: file name {name!r} leads out of {fake.folder / 'val' / 'images'}" in str(err.value)


# --- CIFAR pickles -------------------------------------------------------------------------------------------

_RECONSTRUCT = np.empty(0).__reduce__()[0]  # the function numpy's own array pickles call


class _Call:
    """Pickles as the call `func(*args)`, then a BUILD with `state` if one is given: a crafted file, in short."""

    def __init__(self, func: Callable, *args: Any, state: Any = None) -> None:
        self.func, self.args, self.state = func, args, state

    def __reduce__(self) -> tuple:
        return (self.func, self.args) if self.state is None else (self.func, self.args, self.state)


def _array_claiming(shape: tuple[int, ...], dtype: str, data: Any = b"") -> _Call:
    """An array pickled as numpy pickles one, whose state claims `shape` with `data` as its contents."""
    return _Call(_RECONSTRUCT, np.ndarray, (0,), b"b", state=(1, shape, np.dtype(dtype), False, data))


def test_pickle_claiming_a_huge_array_is_refused_before_allocating(tmp_path: Path) -> None:
    fake = write_fake_cifar10(tmp_path)
    batch = fake.folder / "data_batch_1"
    batch.write_bytes(pickle.dumps({"data": _array_claiming((10**12,), "uint8"), "labels": []}, protocol=2))
    claim = r"data_batch_1: refusing to unpickle a numpy array of shape \(1000000000000,\) and dtype dtype\('uint8'\)"
    with pytest.raises(DataError, match=claim):
        _setup(CIFAR10DataModule, tmp_path)
    assert _peak_traced_bytes(lambda: load_pickle(batch)) < 16 * _MiB


_CALLS_NO_DATA_FILE_MAKES = {
    "bytes(n)": _Call(bytes, 4 * _MiB),
    "bytearray(n)": _Call(bytearray, 4 * _MiB),
    "ndarray((n,), 'u8')": _Call(np.ndarray, (_MiB,), "u8"),
    "str(64 references to 64 KB)": _Call(str, ["x" * (64 << 10)] * 64),
    "array state": _array_claiming((4 * _MiB,), "u1"),
    "_reconstruct(ndarray, (n,), 'b') without a state": _Call(_RECONSTRUCT, np.ndarray, (4 * _MiB,), b"b"),
}


@pytest.mark.parametrize("crafted", _CALLS_NO_DATA_FILE_MAKES.values(), ids=_CALLS_NO_DATA_FILE_MAKES.keys())
def test_calls_no_data_file_makes_are_refused_before_allocating(tmp_path: Path, crafted: _Call) -> None:
    """Each asks for 4 MiB or more from a file of a few KB."""
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({"data": crafted}, protocol=2))
    assert path.stat().st_size < 80 * 1024
    with pytest.raises(DataError, match=r"data_batch_1: (refusing to unpickle|not a readable pickle)"):
        load_pickle(path)
    assert _peak_traced_bytes(lambda: load_pickle(path)) < _MiB


_TEXT, _PIXELS = "x" * (64 << 10), bytes(256 << 10)
_ALLOWED_CALLS_PAST_A_MIB = {
    # One string of 64 KB in the file, encoded 64 times: 4 MiB.
    "_codecs.encode of one text, 64 times": [_Call(codecs.encode, _TEXT, "latin1") for _ in range(64)],
    # One run of 256 KB in the file, the contents of 16 arrays: 4 MiB.
    "16 arrays of one content": [_array_claiming((len(_PIXELS),), "u1", _PIXELS) for _ in range(16)],
}


@pytest.mark.parametrize("crafted", _ALLOWED_CALLS_PAST_A_MIB.values(), ids=_ALLOWED_CALLS_PAST_A_MIB.keys())
def test_allowed_calls_past_the_budget_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crafted: list
) -> None:
    """Each call is one a data file makes, but together they ask for 4 MiB from a file of a few hundred KB; the
    budget is patched to 1 MiB."""
    monkeypatch.setattr(safe_pickle, "MAX_UNPICKLED_BYTES", _MiB)
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({"data": crafted}, protocol=2))
    assert path.stat().st_size < 400 * 1024
    with pytest.raises(DataError, match=rf"data_batch_1: refusing to unpickle .*past the limit of {_MiB} bytes"):
        load_pickle(path)


def _load_in_child(path: Path) -> int | None:
    """Load `path` in a forked child and return its exit code: 0 if the load was refused, 1 if it was not; a
    crash (numpy segfaults on the states below) shows as minus the signal number and fails only the test."""

    def load() -> None:
        try:
            load_pickle(path)
        except DataError as err:
            os._exit(0 if "refusing to unpickle" in str(err) else 1)
        os._exit(1)

    child = multiprocessing.get_context("fork").Process(target=load)
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        child.join()
    return child.exitcode


_OBJECT_FIELD = {"a": (np.dtype("O"), 0)}
_STATES_NUMPY_TRUSTS = {
    # numpy reads the list up to the shape, past its end: a segfault.
    "object array with a short list": _array_claiming((3,), "O", []),
    # numpy takes the fields from the state and the 8 bytes of data as an object pointer.
    "dtype state adding an object field": _Call(
        _RECONSTRUCT,
        np.ndarray,
        (0,),
        b"b",
        state=(
            1,
            (1,),
            _Call(np.dtype, "V8", False, True, state=(3, "|", None, ("a",), _OBJECT_FIELD, 8, 1, 0)),
            False,
            b"A" * 8,
        ),
    ),
}


@pytest.mark.parametrize("crafted", _STATES_NUMPY_TRUSTS.values(), ids=_STATES_NUMPY_TRUSTS.keys())
def test_states_numpy_would_trust_are_refused(tmp_path: Path, crafted: _Call) -> None:
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({"data": crafted, "labels": [0]}, protocol=2))
    assert _load_in_child(path) == 0


_FIELDS_CLAIMING_256_MIB = {
    "BINBYTES8 length": b"\x80\x04\x8e" + struct.pack("<Q", 256 * _MiB) + b"ab.",
    "BINUNICODE8 length": b"\x80\x04\x8d" + struct.pack("<Q", 256 * _MiB) + b"ab.",
    "LONG_BINPUT index": b"\x80\x02K\x01r" + struct.pack("<I", 16 * _MiB) + b".",  # a memo of 32M slots
}


@pytest.mark.parametrize("raw", _FIELDS_CLAIMING_256_MIB.values(), ids=_FIELDS_CLAIMING_256_MIB.keys())
def test_length_fields_and_memo_indices_allocate_nothing(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "batches.meta"
    path.write_bytes(raw)
    assert _peak_traced_bytes(lambda: load_pickle(path)) < 16 * _MiB


def test_pickle_file_size_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(safe_pickle, "MAX_PICKLE_FILE_BYTES", 10_000)
    fake = write_fake_cifar10(tmp_path, n_train_per_batch=4)  # 4 x 3072 bytes of pixels per batch
    with pytest.raises(DataError, match=r"data_batch_1: over the limit of 10000 bytes for a data file"):
        _setup(CIFAR10DataModule, tmp_path)
    assert (fake.folder / "data_batch_1").stat().st_size > 10_000
