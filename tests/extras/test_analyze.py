"""`python -m vit_locality.extras.analyze` evaluates a finished run's checkpoint: the run's own test accuracy and
statistics by default, options applied, written beside the checkpoint and never over the run's files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import QUICK, REPO, Spawner


def flat(table: list[list[float]]) -> list[float]:
    return [v for row in table for v in row]


def run_analyze(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    cmd = [sys.executable, "-m", "vit_locality.extras.analyze", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory, spawns: Spawner) -> Path:
    root = tmp_path_factory.mktemp("analyze")
    run_dir = root / "run"
    proc = spawns.run_train([*QUICK, "protocol=baseline", "stats.probe_size=64", f"hydra.run.dir={run_dir}"], cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def test_default_analysis_reproduces_the_run(finished_run: Path) -> None:
    checkpoint = finished_run / "checkpoints" / "last.ckpt"
    before = {p: p.stat().st_mtime_ns for p in finished_run.rglob("*") if p.is_file()}
    proc = run_analyze([f"ckpt_path={checkpoint}", "stats.probe_size=64"], cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = finished_run / "checkpoints" / "last_eval" / "renorm_unit"
    analysis = json.loads((out / "analysis.json").read_text())
    record = json.loads((finished_run / "results.json").read_text())
    trained = record["attention"]["final"]
    for key in ("test/acc1", "test/acc5", "test/loss"):  # the same model on the same test set as the run's test
        assert analysis["metrics"][key] == pytest.approx(record["metrics"][key], abs=1e-5), key
    assert analysis["test_images"] == 64
    assert {p: p.stat().st_mtime_ns for p in before} == before  # the run's own files untouched
    for key in ("mad", "entropy", "cls_mass"):
        assert flat(analysis["per_head"][key]) == pytest.approx(flat(trained["per_head"][key]), abs=1e-5)
    assert analysis["epoch"] == 1 and analysis["probe_images"] == 64
    assert (out / "attention_stats.csv").exists() and (out / "attention_mad_entropy.png").exists()

    again = run_analyze([f"ckpt_path={checkpoint}", "stats.probe_size=64"], cwd=REPO)
    assert again.returncode == 2 and "overwrite=true" in again.stdout + again.stderr


def test_options_change_the_convention(finished_run: Path) -> None:
    checkpoint = finished_run / "checkpoints" / "last.ckpt"
    proc = run_analyze([f"ckpt_path={checkpoint}", "stats.probe_size=64", "stats.units=pixels"], cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pixels = json.loads((finished_run / "checkpoints" / "last_eval" / "renorm_pixels" / "analysis.json").read_text())
    trained = json.loads((finished_run / "results.json").read_text())["attention"]["final"]
    # stats.units changes only what is shown: the analysis stores the unit square, as the run did
    assert flat(pixels["per_head"]["mad"]) == pytest.approx(flat(trained["per_head"]["mad"]), rel=1e-4)
    assert pixels["settings"]["units"] == "unit" and pixels["settings"]["display_units"] == "pixels"
    assert "pixels (" in proc.stdout + proc.stderr  # the log line shows pixels, the stored value beside it

    raw = run_analyze([f"ckpt_path={checkpoint}", "stats.probe_size=64", "stats.renormalize=false"], cwd=REPO)
    assert raw.returncode == 0, raw.stderr[-3000:]
    record = json.loads((finished_run / "checkpoints" / "last_eval" / "raw_unit" / "analysis.json").read_text())
    assert record["settings"]["renormalize"] is False
    assert flat(record["per_head"]["mad"]) != pytest.approx(flat(trained["per_head"]["mad"]), abs=1e-6)


def test_missing_checkpoint_is_a_clear_error(tmp_path: Path, spawns: Spawner) -> None:
    proc = run_analyze([f"ckpt_path={tmp_path / 'nope.ckpt'}"], cwd=REPO)
    assert proc.returncode == 2 and "no such file" in proc.stdout + proc.stderr


def test_early_layers_beyond_the_runs_depth(finished_run: Path) -> None:
    """Only the run knows its depth (vit_tiny: 4), so this is checked once its config is read: one line, exit 2."""
    checkpoint = finished_run / "checkpoints" / "last.ckpt"
    proc = run_analyze([f"ckpt_path={checkpoint}", "stats.early_layers=5"], cwd=REPO)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr
    assert proc.stderr.strip() == "error: stats.early_layers=5 is not allowed: an integer in [1, 4]"


def test_the_analysis_plane_reads_the_runs_noise_band(finished_run: Path, tmp_path: Path) -> None:
    """The plane of an analysis joins heads to their controls against the band the run recorded at its start; a
    directory without a record, or with an unreadable one, has none ("band not recorded" on the plane)."""
    from vit_locality.extras.analyze import recorded_run_band

    record = json.loads((finished_run / "results.json").read_text())
    assert recorded_run_band(finished_run) == record["attention"]["noise_band"]["surround_pref"] > 0
    assert recorded_run_band(tmp_path) is None
    (tmp_path / "results.json").write_text("{not json")
    assert recorded_run_band(tmp_path) is None
