"""train.py as a user runs it, in a subprocess: one short run, skip and refusal. The 8-cell multirun, each cell named by
its flags: test_paper_sweeps.py (experiment=ablation)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from helpers import QUICK, Spawner


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def test_single_run_writes_a_complete_record(tmp_path: Path, spawns: Spawner) -> None:
    run_dir = tmp_path / "run"
    proc = spawns.run_train([*QUICK, "protocol=modern", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = _results(run_dir)
    assert list(record)[-1] == "status" and record["status"] == "complete"
    assert record["protocol"]["description"] == "crop+flip | autoaugment(cifar10) | cutmix(alpha=1.0) | ls=0.1"
    assert record["model"]["num_params"] == 142_026 and record["model"]["patch_size"] == 4
    assert record["seed"] == 0 and record["epochs"] == 1 and record["steps"] == 4
    assert 0.0 <= record["metrics"]["test/acc1"] <= 1.0 and "test/acc5" in record["metrics"]
    assert "train/acc1" in record["metrics"]  # under CutMix too: accuracy against the dominant label
    assert record["versions"]["torch"] and record["timings"]["fit_s"] > 0
    assert (run_dir / "checkpoints" / "last.ckpt").exists()
    assert (run_dir / "csv" / "metrics.csv").exists()
    assert "crop+flip | autoaugment(cifar10) | cutmix(alpha=1.0) | ls=0.1" in proc.stderr + proc.stdout

    # Attention statistics: every (layer, head) at initialisation and after the last epoch, in range.
    rows = list(csv.DictReader((run_dir / "attention_stats.csv").open()))
    assert sorted({int(r["epoch"]) for r in rows}) == [0, 1]
    assert len(rows) == 2 * 4 * 4  # epochs x layers x heads of vit_tiny
    assert all(0 <= float(r["mad"]) <= 1.24 and 0 <= float(r["entropy"]) <= 1 for r in rows)
    final = record["attention"]["final"]
    assert final["epoch"] == 1 and len(final["per_head"]["mad"]) == 4 and len(final["per_head"]["mad"][0]) == 4
    last_rows = [r for r in rows if r["epoch"] == "1"]
    assert final["min_mad_early"] == pytest.approx(min(float(r["mad"]) for r in last_rows if int(r["layer"]) < 2))
    assert 0.4 <= record["attention"]["initial"]["min_mad_early"] <= 0.55  # random init is near uniform
    assert (run_dir / "attention_mad_entropy.png").stat().st_size > 1000
    assert (run_dir / "attention_central_maps.png").stat().st_size > 1000

    # The same command again: the cell is complete, so nothing is trained and nothing changes.
    before = (run_dir / "results.json").read_text()
    again = spawns.run_train([*QUICK, "protocol=modern", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert again.returncode == 0 and "complete already" in again.stdout + again.stderr
    assert (run_dir / "results.json").read_text() == before

    # A different config aimed at the same directory is refused, and the finished result survives.
    clash = spawns.run_train([*QUICK, "protocol=modern", "optim.lr=0.01", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert clash.returncode == 2 and "different config" in clash.stdout + clash.stderr
    assert (run_dir / "results.json").read_text() == before


def test_bad_value_fails_before_any_run_directory(tmp_path: Path, spawns: Spawner) -> None:
    run_dir = tmp_path / "bad"
    proc = spawns.run_train([*QUICK, "loss.ls=1.5", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert proc.returncode == 2
    out = proc.stdout + proc.stderr
    assert "loss.ls=1.5 is not allowed" in out and "Traceback" not in out
    assert not (run_dir / "results.json").exists()


def test_wandb_logger_runs_offline_without_credentials(tmp_path: Path, spawns: Spawner) -> None:
    run_dir = tmp_path / "wb"
    proc = spawns.run_train([*QUICK, "logger=wandb", "stats.pictures=false", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    offline_runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 1  # one W&B run per cell, written locally
    assert (run_dir / "csv" / "metrics.csv").exists()  # the CSV record is kept alongside
    assert _results(run_dir)["status"] == "complete"


def test_missing_data_offline_is_one_clear_line(tmp_path: Path, spawns: Spawner) -> None:
    args = ["data=cifar10", "model=vit_tiny", f"data.root={tmp_path / 'empty'}", "data.download=false"]
    proc = spawns.run_train([*args, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out
    assert str(tmp_path / "empty") in out and "cifar-10-python.tar.gz" in out
