"""Scaling out on CPU stand-ins: DDP with 2 gloo processes (one cell, and inside a multirun), several cells at
once with the joblib and submitit_local launchers; every result is collected by the report code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import QUICK, REPO, TRAIN_THREADS, Spawner

from vit_locality.precheck.names import fitted_name
from vit_locality.report.load.aggregate import aggregate
from vit_locality.store.record import scan_records

DDP = [*[a for a in QUICK if a != "trainer=cpu"], "trainer=ddp_cpu", "stats.probe_size=64", "stats.pictures=false"]


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def test_ddp_cell_splits_the_batch_and_measures_like_one_process(tmp_path: Path, spawns: Spawner) -> None:
    run_dir = tmp_path / "ddp"
    proc = spawns.run_train([*DDP, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = _record(run_dir)
    assert record["status"] == "complete"
    assert record["batch"] == {"global": 64, "per_device": 32, "world_size": 2}
    assert record["steps"] == 256 // 64  # the global batch, not the per-device one, sets the step count
    assert list(tmp_path.rglob("results.json")) == [run_dir / "results.json"]  # rank 1 wrote nothing of its own

    # The same weights measured by one process (analyze) give the statistics the DDP run recorded.
    env = {**os.environ, "OMP_NUM_THREADS": TRAIN_THREADS}
    cmd = [sys.executable, "-m", "vit_locality.extras.analyze", f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"]
    single = subprocess.run([*cmd, "stats.probe_size=64"], cwd=REPO, env=env, capture_output=True, text=True)
    assert single.returncode == 0, single.stderr[-3000:]
    analysis = json.loads((run_dir / "checkpoints" / "last_eval" / "renorm_unit" / "analysis.json").read_text())
    flat = lambda table: [v for row in table for v in row]  # noqa: E731
    trained = record["attention"]["final"]["per_head"]
    assert flat(analysis["per_head"]["mad"]) == pytest.approx(flat(trained["mad"]), abs=1e-5)
    assert flat(analysis["per_head"]["entropy"]) == pytest.approx(flat(trained["entropy"]), abs=1e-5)


def test_ddp_inside_a_multirun_is_not_re_expanded(tmp_path: Path, spawns: Spawner) -> None:
    sweep = tmp_path / "sweep"
    proc = spawns.run_train(["-m", "loss.ls=0,0.1", *DDP, f"hydra.sweep.dir={sweep}"], cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    named = {"data.batch_size": "64", "data.test_size": "64", "data.train_size": "256", "stats.probe_size": "64"}
    named["trainer.max_epochs"] = "1"  # names over 120 characters end in a hash of their settings
    # Two DDP processes are another cell than one: the identity, and so the name's `_id-`, holds the count.
    records = {c: _record(sweep / c) for c in cells}
    expected = [
        fitted_name(
            f"synthetic_vit_tiny_aa1_cm1_ls{r['protocol']['ls']:g}_s0", dict(sorted(named.items())), r["identity_hash"]
        )
        for r in records.values()
    ]
    assert cells == sorted(expected) and {r["protocol"]["ls"] for r in records.values()} == {0.0, 0.1}
    assert len(list(tmp_path.rglob("results.json"))) == 2  # no stray run directories anywhere
    assert all(_record(sweep / c)["batch"]["world_size"] == 2 for c in cells)
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()

    again = spawns.run_train(["-m", "loss.ls=0,0.1", *DDP, f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert again.returncode == 0 and (again.stdout + again.stderr).count("complete already") == 2


@pytest.mark.parametrize(
    "launcher", [["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], ["hydra/launcher=submitit_local"]]
)
def test_parallel_launchers_complete_four_cells(launcher: list[str], tmp_path: Path, spawns: Spawner) -> None:
    sweep = tmp_path / "sweep"
    args = ["-m", "aug.cutmix=true,false", "loss.ls=0,0.1", *QUICK, "stats.pictures=false", *launcher]
    proc = spawns.run_train([*args, f"hydra.sweep.dir={sweep}"], cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(scan_records([sweep]).complete) == 4
    groups = aggregate([sweep]).groups
    assert len(groups) == 4 and all(group.stat("acc1").n == 1 for group in groups.values())
