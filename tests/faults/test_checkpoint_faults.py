"""Faults around checkpoints: a process killed while writing one, a full disk, a damaged file found on resume, and
a checkpoint of another config in the run directory."""

from __future__ import annotations

import logging
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from checkpoint_fakes import IDENTITY, lightning_checkpoint, resume_point, saved_step, write_checkpoints
from helpers import REPO, Spawner
from lightning.pytorch.plugins.io import TorchCheckpointIO

from vit_locality.run.checkpoints import (
    AtomicCheckpointIO,
    ForeignCheckpoint,
    interrupted_checkpoint,
    last_checkpoint,
    previous_checkpoint,
)

# In a child process: save the step-8 checkpoint over argv[1], but SIGKILL the process once half its bytes are on
# disk, as the OOM killer or a lost node would.
KILLED_MID_WRITE = """
import io, os, signal, sys
import torch
from checkpoint_fakes import lightning_checkpoint
from vit_locality.run.checkpoints import AtomicCheckpointIO

real_save = torch.save

def save_half_then_die(obj, stream):
    buffer = io.BytesIO()
    real_save(obj, buffer)
    stream.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    stream.flush()
    os.kill(os.getpid(), signal.SIGKILL)

torch.save = save_half_then_die
AtomicCheckpointIO().save_checkpoint(lightning_checkpoint(8, 2), sys.argv[1])
"""


def test_sigkill_while_writing_leaves_the_previous_checkpoint_to_resume(tmp_path, spawns: Spawner) -> None:
    target = last_checkpoint(tmp_path)
    AtomicCheckpointIO().save_checkpoint(lightning_checkpoint(4, 1), target)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]), "OMP_NUM_THREADS": "1"}
    child = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(target)], env=env, capture_output=True)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    assert list(target.parent.glob(".last.ckpt.*.tmp")), "the child died before writing anything"
    assert saved_step(target) == 4
    assert resume_point(tmp_path, IDENTITY) == (target, 1)


def test_a_full_disk_leaves_the_previous_checkpoint_and_no_partial_file(tmp_path) -> None:
    target = last_checkpoint(tmp_path)
    io = AtomicCheckpointIO()
    io.save_checkpoint(lightning_checkpoint(4, 1), target)
    size = target.stat().st_size
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, hard))  # writes past half the file fail (EFBIG)
    try:
        with pytest.raises((OSError, RuntimeError)):  # torch reports the failed write as a RuntimeError
            io.save_checkpoint(lightning_checkpoint(8, 2), target)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert saved_step(target) == 4 and not previous_checkpoint(target).exists()
    assert sorted(p.name for p in target.parent.iterdir()) == ["last.ckpt"]


def test_lightnings_default_writer_rewrites_the_file_in_place_across_file_systems(tmp_path, monkeypatch) -> None:
    """Why AtomicCheckpointIO exists: with the temp directory on another file system, Lightning's writer copies into
    the existing checkpoint (same inode), which a kill or a full disk leaves truncated. Should this fail after an
    upgrade, Lightning stages checkpoints beside their destination now."""
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs a temp directory on another file system than the test's")
    monkeypatch.setattr(tempfile, "tempdir", str(other))
    target = tmp_path / "last.ckpt"
    for io, rewritten_in_place in ((TorchCheckpointIO(), True), (AtomicCheckpointIO(), False)):
        io.save_checkpoint(lightning_checkpoint(4, 1), target)
        inode = target.stat().st_ino
        io.save_checkpoint(lightning_checkpoint(8, 2), target)
        assert (target.stat().st_ino == inode) is rewritten_in_place, type(io).__name__


def damage(path: Path, how: str) -> None:
    if how == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("how", ["empty", "truncated"])
def test_a_damaged_last_checkpoint_is_reported_and_its_predecessor_resumed(tmp_path, caplog, how) -> None:
    write_checkpoints(tmp_path, last=8, last_prev=4)
    damage(last_checkpoint(tmp_path), how)
    with caplog.at_level(logging.WARNING, logger="vit_locality"):
        assert resume_point(tmp_path, IDENTITY) == (previous_checkpoint(last_checkpoint(tmp_path)), 1)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(last_checkpoint(tmp_path)) in warning and "damaged" in warning and "\n" not in warning
    reason = r"empty file" if how == "empty" else r"\w+Error: .+"  # torch's words depend on where the file ends
    assert re.search(rf"damaged \({reason}\): not resuming from it$", warning), warning


def test_a_damaged_interrupted_checkpoint_falls_back_to_the_furthest_other(tmp_path, caplog) -> None:
    write_checkpoints(tmp_path, last=8, interrupted=10, interrupted_prev=9)
    damage(interrupted_checkpoint(tmp_path), "truncated")
    with caplog.at_level(logging.WARNING, logger="vit_locality"):
        assert resume_point(tmp_path, IDENTITY) == (previous_checkpoint(interrupted_checkpoint(tmp_path)), 2)
    assert str(interrupted_checkpoint(tmp_path)) in caplog.text


def test_only_damaged_checkpoints_start_afresh_with_a_warning_for_each(tmp_path, caplog) -> None:
    write_checkpoints(tmp_path, last=8, last_prev=4)
    for path in (last_checkpoint(tmp_path), previous_checkpoint(last_checkpoint(tmp_path))):
        damage(path, "truncated")
    with caplog.at_level(logging.WARNING, logger="vit_locality"):
        assert resume_point(tmp_path, IDENTITY) == (None, 0)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


@pytest.mark.parametrize(
    ("identity", "written_by"),
    [("fedcba9876543210", "config fedcba9876543210"), (None, "an unknown config (it records no identity)")],
    ids=["another-config", "no-identity"],
)
def test_a_checkpoint_of_another_config_is_refused_in_one_line(tmp_path, identity, written_by) -> None:
    target = last_checkpoint(tmp_path)
    target.parent.mkdir(parents=True)
    torch.save(lightning_checkpoint(8, 2, identity=identity), target)
    with pytest.raises(ForeignCheckpoint) as refusal:
        resume_point(tmp_path, IDENTITY)
    message = str(refusal.value)
    assert message == (
        f"checkpoint {target} was written by {written_by}, not by this one ({IDENTITY}); refusing to resume it: "
        f"move {tmp_path} away or choose another sweep_name"
    )


def test_a_foreign_predecessor_is_refused_too(tmp_path) -> None:
    write_checkpoints(tmp_path, last=8)
    torch.save(lightning_checkpoint(4, 1, identity="fedcba9876543210"), previous_checkpoint(last_checkpoint(tmp_path)))
    with pytest.raises(ForeignCheckpoint, match="last.prev.ckpt"):
        resume_point(tmp_path, IDENTITY)
