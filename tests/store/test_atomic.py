"""One way to replace a file (vit_locality/store/atomic.py), used by every writer that renames: a write that fails
half-way leaves the previous file whole and no temporary file behind, for records, checkpoints and downloads alike."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from checkpoint_fakes import lightning_checkpoint, saved_step
from data_fakes import served
from record_fakes import complete_payload

from vit_locality.data import download
from vit_locality.data.base import DataError
from vit_locality.run.checkpoints import AtomicCheckpointIO
from vit_locality.store import atomic
from vit_locality.store.record import RESULTS_FILE, read_record, write_record


class DiskFull(OSError):
    pass


@pytest.fixture
def failing_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills when the written file is synced: after every byte was handed over, before the rename."""

    def full(descriptor: int) -> None:
        raise DiskFull(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)


def _files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, failing_fsync: None) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("old\n")
    with pytest.raises(OSError, match="^no space left on device: writing "):  # said as such (store/atomic.py)
        atomic.atomic_write_text(target, "new\n")
    assert target.read_text() == "old\n" and _files(tmp_path) == ["notes.txt"]


def test_a_writer_that_raises_half_way_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    target.write_bytes(b"old")

    def half_then_fail(stream) -> None:
        stream.write(b"ne")
        raise RuntimeError("killed half-way")

    with pytest.raises(RuntimeError, match="half-way"):
        atomic.replace_atomically(target, half_then_fail)
    assert target.read_bytes() == b"old" and _files(tmp_path) == ["data.bin"]


def test_a_record_whose_write_fails_keeps_the_previous_record(tmp_path: Path, monkeypatch) -> None:
    write_record(tmp_path, complete_payload(), status="running")
    monkeypatch.setattr(atomic.os, "fsync", lambda descriptor: (_ for _ in ()).throw(DiskFull(28, "full")))
    with pytest.raises(OSError, match="^no space left on device: writing "):  # said as such (store/atomic.py)
        write_record(tmp_path, complete_payload(), status="complete")
    assert read_record(tmp_path).status == "running" and _files(tmp_path) == [RESULTS_FILE]


def test_a_checkpoint_whose_write_fails_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint(lightning_checkpoint(4, 1), target)
    monkeypatch.setattr(atomic.os, "fsync", lambda descriptor: (_ for _ in ()).throw(DiskFull(28, "full")))
    with pytest.raises(OSError, match="^no space left on device: writing "):  # said as such (store/atomic.py)
        AtomicCheckpointIO().save_checkpoint(lightning_checkpoint(8, 2), target)
    assert saved_step(target) == 4 and _files(tmp_path) == ["last.ckpt"]


def test_a_download_that_fails_its_check_never_appears(tmp_path: Path, monkeypatch) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(b"not the archive")
    dest = tmp_path / "data" / "archive.tar.gz"
    with served(tmp_path) as url, pytest.raises(DataError, match="does not match"):
        download.download_archive(f"{url}/source.bin", dest, md5="0" * 32)
    assert not dest.exists() and _files(dest.parent) == []


def test_a_new_file_is_readable_as_the_umask_allows(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        atomic.atomic_write_text(tmp_path / "shared.txt", "x")
    finally:
        os.umask(previous)
    assert (tmp_path / "shared.txt").stat().st_mode & 0o777 == 0o644


def test_leftovers_of_killed_writes_are_removed_and_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "last.ckpt"
    for name in (".last.ckpt.abc123.tmp", ".last.prev.ckpt.abc123.tmp", "last.ckpt", "other.tmp"):
        (tmp_path / name).write_bytes(b"x")
    atomic.remove_leftovers(target)
    assert _files(tmp_path) == [".last.prev.ckpt.abc123.tmp", "last.ckpt", "other.tmp"]
