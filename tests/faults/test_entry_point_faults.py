"""Bad input to the entry points other than train.py: `python -m vit_locality.extras.analyze`, `python -m
vit_locality.report` and `python -m vit_locality.report.summary`. Each is run as a user runs it, in a subprocess:
the documented exit status, one line on stderr naming the file or key and what is allowed, never a traceback."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, Spawner
from record_fakes import BAD_RECORDS, complete_payload

from vit_locality.store.record import write_record


def run_module(module: str, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "0"}
    cmd = [sys.executable, "-m", module, *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def error_line(proc: subprocess.CompletedProcess, status: int) -> str:
    """The one line on stderr of a run that must end with `status` and no traceback."""
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == status, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


# ---- python -m vit_locality.extras.analyze --------------------------------------------------------------------------


def ours_looking_checkpoint(run_dir: Path) -> Path:
    """A checkpoint with the keys every train.py checkpoint has, so that the run directory is read next."""
    import torch

    path = run_dir / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": {}, "hyper_parameters": {}}, path)
    return path


def test_analyze_without_a_checkpoint(spawns: Spawner) -> None:
    line = error_line(run_module("vit_locality.extras.analyze", []), 2)
    assert line.startswith("error: ckpt_path is not set: pass ckpt_path=")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp, "(a directory)"),
        (lambda tmp: tmp / "nope.ckpt", "(no such file)"),
        (lambda tmp: "", "(empty)"),
    ],
    ids=["a directory", "missing", "empty"],
)
def test_analyze_checkpoint_that_is_no_file(tmp_path: Path, make, message: str, spawns: Spawner) -> None:
    checkpoint = make(tmp_path)
    line = error_line(run_module("vit_locality.extras.analyze", [f"ckpt_path={checkpoint}"]), 2)
    assert line == f"error: ckpt_path={str(checkpoint)!r} is not allowed: a .ckpt file written by train.py {message}"


def test_analyze_checkpoint_of_random_bytes(tmp_path: Path, spawns: Spawner) -> None:
    checkpoint = tmp_path / "last.ckpt"
    checkpoint.write_bytes(os.urandom(4096))
    line = error_line(run_module("vit_locality.extras.analyze", [f"ckpt_path={checkpoint}"]), 2)
    assert line.startswith(f"error: ckpt_path='{checkpoint}' is not allowed: a checkpoint written by train.py")
    assert "torch cannot read it" in line


def test_analyze_foreign_checkpoint(tmp_path: Path, spawns: Spawner) -> None:
    import torch

    checkpoint = tmp_path / "other.ckpt"
    torch.save({"a": 1}, checkpoint)
    line = error_line(run_module("vit_locality.extras.analyze", [f"ckpt_path={checkpoint}"]), 2)
    assert line.endswith("a checkpoint written by train.py (it holds no state_dict or hyper_parameters)")


def test_analyze_run_directory_whose_record_is_a_list(tmp_path: Path, spawns: Spawner) -> None:
    checkpoint = ours_looking_checkpoint(tmp_path / "run")
    (tmp_path / "run" / "results.json").write_text("[]")
    line = error_line(run_module("vit_locality.extras.analyze", [f"ckpt_path={checkpoint}"]), 2)
    assert line == f"error: {tmp_path / 'run'}: results.json is malformed: holds a JSON list, not an object"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("stats.bogus=1", "stats.bogus: no such setting"),
        ("stats.units=bogus", "stats.units='bogus' is not allowed: one of unit, grid, pixels"),
        ("stats.probe_size=0", "stats.probe_size=0 is not allowed: an integer >= 1"),
        ("device=tpu", "device='tpu' is not allowed: one of auto, cpu, cuda"),
    ],
)
def test_analyze_bad_settings(tmp_path: Path, setting: str, message: str, spawns: Spawner) -> None:
    checkpoint = tmp_path / "last.ckpt"
    checkpoint.write_bytes(b"never read: the settings are checked first")
    line = error_line(run_module("vit_locality.extras.analyze", [f"ckpt_path={checkpoint}", setting]), 2)
    assert line.startswith(f"error: {message}")


def test_analyze_out_dir_below_a_file(tmp_path: Path, spawns: Spawner) -> None:
    checkpoint = tmp_path / "last.ckpt"
    checkpoint.write_bytes(b"x")
    out_dir = checkpoint / "analysis"
    line = error_line(run_module("vit_locality.extras.analyze", [f"ckpt_path={checkpoint}", f"out_dir={out_dir}"]), 2)
    assert line.endswith(f"a directory this user can create and write ({checkpoint} is a file)")


# ---- python -m vit_locality.report and report.summary ------------------------------------------------------------


def head_tables(depth: int, mad: float) -> dict:
    """A final `attention` section of `depth` layers and 2 heads, layer 0 the most local."""
    per_mad = [[mad + 0.1 * layer, mad + 0.1 * layer + 0.01] for layer in range(depth)]
    per_layer = [
        {"layer": layer, "mad_min": row[0], "mad_mean": sum(row) / 2, "entropy_min": 0.5, "entropy_mean": 0.5}
        for layer, row in enumerate(per_mad)
    ]
    final = {"min_mad_early": mad, "mean_entropy_early": 0.5, "early_layers": 2, "per_layer": per_layer}
    return {"final": {**final, "per_head": {"mad": per_mad, "entropy": [[0.5, 0.5]] * depth}}}


def complete_run(run_dir: Path, seed: int, depth: int = 4) -> Path:
    model = {"name": "vit_tiny", "depth": depth, "dim": 64, "heads": 2, "mlp_ratio": 2.0}
    payload = complete_payload(seed=seed, identity_hash=f"h{seed}_{depth}", model=model)
    write_record(run_dir, {**payload, "attention": head_tables(depth, 0.2)}, status="complete")
    return run_dir


def bad_runs(sweep: Path) -> int:
    """A run directory for every kind of unusable record (list, number, invalid UTF-8, NaN statistics, ...) and a
    directory named results.json; returns how many."""
    for index, (content, _) in enumerate(BAD_RECORDS.values()):
        (sweep / f"bad{index}").mkdir(parents=True)
        (sweep / f"bad{index}" / "results.json").write_bytes(content)
    (sweep / "dir" / "results.json").mkdir(parents=True)
    return len(BAD_RECORDS) + 1


@pytest.mark.parametrize("module", ["vit_locality.report", "vit_locality.report.summary"])
def test_unusable_records_are_listed_one_line_each(tmp_path: Path, module: str, spawns: Spawner) -> None:
    sweep = tmp_path / "sweep"
    count = bad_runs(sweep)
    complete_run(sweep / "good", seed=0)
    args = ["protocols", str(sweep), "--out", str(tmp_path / "out")] if module.endswith("report") else [str(sweep)]
    proc = run_module(module, args)
    assert proc.returncode == 0 and proc.stderr == "" and "Traceback" not in proc.stdout, proc.stderr
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == count and all(str(sweep) in line for line in skipped)
    assert any("not UTF-8" in line for line in skipped) and any("min_mad_early=nan" in line for line in skipped)


def test_report_with_nothing_usable_lists_why_and_exits_0(tmp_path: Path, spawns: Spawner) -> None:
    sweep = tmp_path / "sweep"
    count = bad_runs(sweep)
    proc = run_module("vit_locality.report", ["ablation", str(sweep), "--out", str(tmp_path / "out")])
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.strip().splitlines()[-1] == f"no table: every run under {sweep} was left out (above)"
    assert proc.stdout.count("skipped ") == count
    assert not (tmp_path / "out").exists()


def test_one_model_name_of_two_depths_is_a_warning(tmp_path: Path, spawns: Spawner) -> None:
    sweep = tmp_path / "sweep"
    complete_run(sweep / "shallow", seed=0, depth=4)
    complete_run(sweep / "deep", seed=1, depth=8)
    proc = run_module("vit_locality.report", ["protocols", str(sweep), "--out", str(tmp_path / "out")])
    line = error_line(proc, 0)
    assert line.startswith("warning: synthetic/vit_tiny pools runs of different architectures (depth 4, 8)")


def test_garbage_attention_csv_is_left_out_of_the_emergence_figure(tmp_path: Path, spawns: Spawner) -> None:
    sweep = tmp_path / "sweep"
    good = complete_run(sweep / "good", seed=0)
    with (good / "attention_stats.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch", "step", "layer", "head", "mad"])
        writer.writerows([[0, 0, 0, 0, 0.5], [1, 10, 0, 0, 0.3], ["x", 1, 0, 0, 0.1], [2, 20, 0, 0, "nan"], [3]])
    garbled = complete_run(sweep / "garbled", seed=1)
    (garbled / "attention_stats.csv").write_bytes(os.urandom(2048) + b"\x00\xff")
    deeper = complete_run(sweep / "deeper", seed=2, depth=6)  # its heads cannot share the plane with depth 4
    out = tmp_path / "out"
    proc = run_module("vit_locality.report", ["figures", str(sweep), "--out", str(out)], timeout=300)
    assert error_line(proc, 0).startswith("warning: synthetic/vit_tiny pools runs of different architectures")
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: ")]
    rows = f"note: {good}: 3 of 5 rows of attention_stats.csv are unreadable; they are left out of the emergence figure"
    assert rows in notes, notes
    assert any(line.startswith(f"note: {garbled}: attention_stats.csv is unreadable") for line in notes), notes
    assert (
        f"note: {deeper}: 6 layers where the cell's other runs have 4; the run is left out of the plane figure" in notes
    )
    assert (out / "emergence_synthetic_vit_tiny.png").stat().st_size > 1000


def test_out_that_is_a_file(tmp_path: Path, spawns: Spawner) -> None:
    sweep = tmp_path / "sweep"
    complete_run(sweep / "good", seed=0)
    out = tmp_path / "reports.txt"
    out.write_text("not a directory")
    line = error_line(run_module("vit_locality.report", ["protocols", str(sweep), "--out", str(out)]), 2)
    assert line == f"error: --out='{out}' is not allowed: a directory this user can create and write ({out} is a file)"


@pytest.mark.parametrize("module", ["vit_locality.report", "vit_locality.report.summary"])
def test_sweep_directory_missing_or_a_file(tmp_path: Path, module: str, spawns: Spawner) -> None:
    a_file = tmp_path / "sweep.json"
    a_file.write_text("{}")
    for path, why in ((tmp_path / "nope", "does not exist"), (a_file, "is not a directory")):
        args = ["ablation", str(path)] if module.endswith("report") else [str(path)]
        assert error_line(run_module(module, args), 2) == f"error: sweep directory {path} {why}"


def test_linked_run_directory_is_reported(tmp_path: Path, spawns: Spawner) -> None:
    elsewhere = complete_run(tmp_path / "elsewhere" / "run", seed=3)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "linked").symlink_to(elsewhere, target_is_directory=True)
    proc = run_module("vit_locality.report.summary", [str(sweep)])
    assert proc.returncode == 0 and proc.stderr == ""
    assert str(sweep / "linked") in proc.stdout and "skipped" not in proc.stdout


def test_nothing_is_written_for_a_record_that_is_not_json(tmp_path: Path, spawns: Spawner) -> None:
    """The summary reads; a broken record in a sweep never makes it write or rewrite anything."""
    sweep = tmp_path / "sweep"
    (sweep / "run").mkdir(parents=True)
    (sweep / "run" / "results.json").write_text("{ nope")
    before = sorted(p.name for p in sweep.rglob("*"))
    proc = run_module("vit_locality.report.summary", [str(sweep)])
    assert proc.returncode == 0 and "(no complete runs)" in proc.stdout and proc.stderr == ""
    assert sorted(p.name for p in sweep.rglob("*")) == before
