"""Faults during training: a non-finite loss, SIGTERM and SIGINT, SIGKILL and resume, a crash inside a sweep."""

from __future__ import annotations

import json
import math
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import QUICK, InProcessTraining, Spawner, compose_config, wait_for_step

from vit_locality.model.classifier import NonFiniteLossError, ViTClassifier
from vit_locality.store.record import scan_records


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(
    tmp_path, monkeypatch, trains: InProcessTraining
) -> None:
    real_loss = ViTClassifier.training_loss

    def poisoned(self, images, labels):
        loss, *rest = real_loss(self, images, labels)
        return (loss * math.nan if self.global_step >= 6 else loss), *rest

    monkeypatch.setattr(ViTClassifier, "training_loss", poisoned)
    cfg = compose_config([*QUICK, "trainer.max_epochs=3", "stats.pictures=false"])  # 4 steps per epoch
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteLossError, match="step 6 "):
        trains.run_cell_as_train(cfg, run_dir)
    record = _record(run_dir)
    assert record["status"] == "failed" and "non-finite training loss at step 6" in record["error"]
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 4  # the end of the last finished epoch, not a poisoned state
    assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())
    assert not (run_dir / "checkpoints" / "interrupted.ckpt").exists()
    assert scan_records([tmp_path]).complete == []


# 8 steps per epoch; the first run pauses after every batch (start_paced_train), so the signal lands mid-epoch 2.
RESUMABLE = [
    *[a for a in QUICK if not a.startswith(("trainer.max_epochs", "data.batch_size"))],
    "data.batch_size=32",
    "trainer.max_epochs=3",
    "trainer.deterministic=true",
    "stats.pictures=false",
]
STEPS_PER_EPOCH = 256 // 32


# SIGINT, and SIGKILL then the same command, are held to the unbroken run's weights in test_exact_resume.py and
# test_worker_faults.py; this one checks what a resumed run leaves: one statistics row per head and epoch.
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143)])
def test_signal_saves_a_resumable_checkpoint(sig: signal.Signals, code: int, tmp_path: Path, spawns: Spawner) -> None:
    run_dir = tmp_path / "run"
    args = [*RESUMABLE, f"hydra.run.dir={run_dir}"]
    proc = spawns.start_paced_train(args, tmp_path, tmp_path / "first.log", tmp_path / "step", pause_s=0.3)
    wait_for_step(tmp_path / "step", STEPS_PER_EPOCH + 3, proc)  # in epoch 2, after the first epoch's last.ckpt
    assert (run_dir / "checkpoints" / "last.ckpt").exists()
    proc.send_signal(sig)
    assert proc.wait(timeout=120) == code, (tmp_path / "first.log").read_text()[-2000:]
    assert _record(run_dir)["status"] == "interrupted"
    assert (run_dir / "checkpoints" / "interrupted.ckpt").exists()

    again = spawns.run_train(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming epoch 2" in again.stdout + again.stderr
    record = _record(run_dir)
    assert record["status"] == "complete" and record["steps"] == 3 * STEPS_PER_EPOCH
    assert not (run_dir / "checkpoints" / "interrupted.ckpt").exists()
    epochs = [int(line.split(",")[0]) for line in (run_dir / "attention_stats.csv").read_text().splitlines()[1:]]
    assert sorted(set(epochs)) == [0, 1, 2, 3] and all(epochs.count(e) == 16 for e in set(epochs))


def _lr_sweep(spawns: Spawner, tmp_path: Path, extra: list[str]) -> subprocess.CompletedProcess:
    sweep = tmp_path / "sweep"
    args = ["-m", *QUICK, "trainer.max_epochs=2", "optim.lr=1e12,0.001", "stats.pictures=false"]
    return spawns.run_train(
        [*args, *extra, f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=lr${optim.lr}"], cwd=tmp_path
    )


def test_a_failed_cell_is_recorded_and_the_sweep_goes_on(tmp_path: Path, spawns: Spawner) -> None:
    proc = _lr_sweep(spawns, tmp_path, ["sweep.continue_on_error=true"])
    assert proc.returncode == 1 and "1 cell(s) not complete" in proc.stderr
    bad, good = _record(tmp_path / "sweep" / "lr1000000000000.0"), _record(tmp_path / "sweep" / "lr0.001")
    assert bad["status"] == "failed" and "non-finite" in bad["error"]
    assert good["status"] == "complete"
    runs = scan_records([tmp_path / "sweep"])
    assert len(runs.complete) == 1 and [why for _, why in runs.skipped] == ["status is 'failed'"]


def test_without_continue_on_error_the_sweep_stops_at_the_failed_cell(tmp_path: Path, spawns: Spawner) -> None:
    proc = _lr_sweep(spawns, tmp_path, [])
    assert proc.returncode == 3
    assert _record(tmp_path / "sweep" / "lr1000000000000.0")["status"] == "failed"
    assert not (tmp_path / "sweep" / "lr0.001").exists()
