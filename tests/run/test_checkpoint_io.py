"""Checkpoints are replaced whole, keep their predecessor, honour the umask and carry the config that wrote them;
a re-run resumes the furthest one of its own config."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import lightning as L
import pytest
import torch
from checkpoint_fakes import IDENTITY, lightning_checkpoint, resume_point, saved_step, write_checkpoints
from helpers import InProcessTraining
from torch.utils.data import DataLoader, TensorDataset

from vit_locality.run.checkpoints import (
    AtomicCheckpointIO,
    ForeignCheckpoint,
    IdentityStamp,
    discard_interrupted,
    last_checkpoint,
    last_checkpoint_callback,
    previous_checkpoint,
)


def test_a_save_replaces_the_file_and_keeps_the_one_it_replaced(tmp_path) -> None:
    target = tmp_path / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint(lightning_checkpoint(4, 1), target)
    first_inode = target.stat().st_ino
    io.save_checkpoint(lightning_checkpoint(8, 2), target)
    assert saved_step(target) == 8 and saved_step(previous_checkpoint(target)) == 4
    # Renamed, never rewritten in place: the replaced file is the predecessor, the new one a new file.
    assert previous_checkpoint(target).stat().st_ino == first_inode != target.stat().st_ino
    assert sorted(p.name for p in target.parent.iterdir()) == ["last.ckpt", "last.prev.ckpt"]  # no temporaries


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_checkpoints_are_created_as_the_umask_allows(tmp_path, umask) -> None:
    previous = os.umask(umask)
    try:
        AtomicCheckpointIO().save_checkpoint(lightning_checkpoint(1, 1), tmp_path / "last.ckpt")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "last.ckpt").stat().st_mode) == 0o666 & ~umask


def test_leftovers_of_a_killed_write_are_removed_by_the_next_save(tmp_path) -> None:
    leftover = tmp_path / ".last.ckpt.k1ll3d.tmp"
    leftover.write_bytes(b"half a checkpoint")
    other = tmp_path / ".interrupted.ckpt.abc.tmp"  # another file's write is not this save's business
    other.write_bytes(b"x")
    AtomicCheckpointIO().save_checkpoint(lightning_checkpoint(1, 1), tmp_path / "last.ckpt")
    assert not leftover.exists() and other.exists()


def test_removing_a_checkpoint_removes_its_predecessor(tmp_path) -> None:
    io = AtomicCheckpointIO()
    target = tmp_path / "epoch=1.ckpt"
    io.save_checkpoint(lightning_checkpoint(1, 1), target)
    io.save_checkpoint(lightning_checkpoint(2, 2), target)
    io.remove_checkpoint(target)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("steps", "expected", "epochs"),
    [
        ({}, None, 0),
        ({"last": 8, "last_prev": 4}, "last.ckpt", 2),
        ({"last": 8, "interrupted": 10}, "interrupted.ckpt", 2),
        ({"last": 12, "interrupted": 10, "interrupted_prev": 6}, "last.ckpt", 3),
        ({"last": 8, "interrupted": 8}, "last.ckpt", 2),  # equals: the epoch boundary
        ({"last_prev": 4}, "last.prev.ckpt", 1),  # killed between the two renames of a save
    ],
)
def test_the_furthest_checkpoint_of_this_config_is_resumed(tmp_path, steps, expected, epochs) -> None:
    write_checkpoints(tmp_path, **steps)
    path, done = resume_point(tmp_path, IDENTITY)
    assert (path.name if path else None, done) == (expected, epochs)


def test_a_finished_run_discards_both_interrupted_checkpoints(tmp_path) -> None:
    write_checkpoints(tmp_path, last=8, interrupted=6, interrupted_prev=2)
    discard_interrupted(tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["last.ckpt"]


class TinyModule(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return torch.nn.functional.mse_loss(self.layer(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit_tiny(run_dir: Path, epochs: int, identity: str, resume: Path | None = None) -> L.Trainer:
    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=epochs,
        plugins=[AtomicCheckpointIO()],
        callbacks=[IdentityStamp(identity), last_checkpoint_callback(run_dir, 1)],
        default_root_dir=str(run_dir),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(TinyModule(), train_dataloaders=data, ckpt_path=resume, weights_only=True)
    return trainer


def test_a_trainer_with_the_plugin_writes_stamped_checkpoints_and_resumes_them(
    tmp_path, trains: InProcessTraining
) -> None:
    trainer = fit_tiny(tmp_path, 2, IDENTITY)
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    last = last_checkpoint(tmp_path)
    assert (saved_step(last), saved_step(previous_checkpoint(last))) == (4, 2)
    assert torch.load(last, weights_only=True)["vit_locality"]["identity_hash"] == IDENTITY
    assert resume_point(tmp_path, IDENTITY) == (last, 2)
    with pytest.raises(ForeignCheckpoint):
        resume_point(tmp_path, "fedcba9876543210")
    resumed = fit_tiny(tmp_path, 3, IDENTITY, resume=last)
    assert resumed.global_step == 6 and saved_step(previous_checkpoint(last)) == 4


@pytest.mark.parametrize("damage", ["empty", "truncated", "not a dict", "no weights"])
def test_a_damaged_checkpoint_is_one_line_for_every_reader(tmp_path, damage, caplog) -> None:
    """resume, `analyze` and the report's instruments read checkpoints through one reader: each says in one line
    which file is damaged and why, instead of a traceback from deep inside torch."""
    from vit_locality.errors import ConfigError, exit_code_of
    from vit_locality.extras.analyze import load_checkpoint
    from vit_locality.extras.instruments.loading import read_checkpoint
    from vit_locality.run.checkpoints import DamagedCheckpoint

    path = last_checkpoint(tmp_path)
    AtomicCheckpointIO().save_checkpoint(lightning_checkpoint(4, 1), path)
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        progress_only = {"global_step": 4, "vit_locality": {"identity_hash": IDENTITY}}
        torch.save([1, 2] if damage == "not a dict" else progress_only, path)
    previous_checkpoint(path).unlink(missing_ok=True)

    with caplog.at_level("WARNING", logger="vit_locality"):
        resumed = resume_point(tmp_path, IDENTITY)
    warnings = [r.getMessage() for r in caplog.records]
    if damage == "no weights":  # resuming reads progress and identity alone
        assert resumed == (path, 0) and not warnings
    else:
        assert resumed == (None, 0) and len(warnings) == 1
    with pytest.raises(DamagedCheckpoint) as instrument:
        read_checkpoint(tmp_path)
    with pytest.raises(ConfigError) as analysis:
        load_checkpoint(path)
    assert all("\n" not in message for message in [str(instrument.value), str(analysis.value), *warnings])
    assert all(str(path) in message for message in [str(instrument.value), *warnings])
    assert f"ckpt_path={str(path)!r} is not allowed" in str(analysis.value)
    assert exit_code_of(instrument.value) == exit_code_of(analysis.value) == 2
