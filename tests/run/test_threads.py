"""`threads`: torch's thread count in every cell, set before its data and model are built (in whatever process runs
the cell), recorded in results.json, and neither part of the cell's identity nor of its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import CONF, QUICK, InProcessTraining, Spawner, compose_config, typed

from vit_locality.config.identity import identity_hash, run_identity
from vit_locality.precheck.preflight import check_command
from vit_locality.run import cell
from vit_locality.run.threads import apply_thread_count

CELL = [*QUICK, "stats.enabled=false"]


@pytest.fixture
def restore_threads():
    """Tests that set torch's thread count in this process leave it as they found it."""
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("threads=0", "threads=0 is not allowed: an integer in [1, 1024]"),
        ("threads=4096", "threads=4096 is not allowed: an integer in [1, 1024]"),
        ("threads=abc", "threads='abc' is not allowed: an integer in [1, 1024], or null"),
    ],
)
def test_a_bad_thread_count_is_one_line_before_anything_runs(override: str, message: str) -> None:
    problems = check_command([*CELL, override], CONF)
    assert len(problems) == 1 and message in problems[0], problems


def test_the_default_leaves_torch_alone_and_the_demo_fixes_two(restore_threads: int) -> None:
    assert compose_config(CELL).threads is None
    assert compose_config(["experiment=demo"]).threads == 2
    torch.set_num_threads(3)
    assert apply_thread_count(None) == 3 and torch.get_num_threads() == 3
    assert apply_thread_count(1) == 1 and torch.get_num_threads() == 1


def test_the_thread_count_is_no_part_of_the_identity() -> None:
    """It changes floating-point sums, as the accelerator does, but it is how a cell is computed, not which cell:
    a cell measured at 2 threads is found again (and not retrained) under any other count."""
    assert identity_hash(typed([*CELL, "threads=1"])) == identity_hash(typed(CELL))
    assert "threads" not in run_identity(typed([*CELL, "threads=3"]))


def test_a_cell_builds_its_model_at_the_set_count_and_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_threads: int, trains: InProcessTraining
) -> None:
    torch.set_num_threads(2)
    seen: list[int] = []
    build_module = cell.build_module

    def counting_build(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return build_module(*args, **kwargs)

    monkeypatch.setattr(cell, "build_module", counting_build)
    record = trains.run_cell_as_train(compose_config([*CELL, "threads=1"]), tmp_path / "run")
    assert seen == [1] and record["threads"] == 1
    assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    on_disk = json.loads((tmp_path / "run" / "results.json").read_text())
    assert on_disk["status"] == "complete" and on_disk["threads"] == 1 and on_disk["config"]["threads"] == 1


def test_joblib_workers_use_the_set_count(tmp_path: Path, spawns: Spawner) -> None:
    """Cells in joblib's worker processes (started with one thread under make test) compute with `threads`."""
    sweep = tmp_path / "sweep"
    args = ["-m", "loss.ls=0,0.1", *CELL, "threads=2", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    proc = spawns.run_train([*args, f"hydra.sweep.dir={sweep}"], cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(path.read_text()) for path in sorted(sweep.rglob("results.json"))]
    assert len(records) == 2 and all(record["threads"] == 2 for record in records)
    assert all("threads" not in path.parent.name for path in sweep.rglob("results.json"))


def test_the_kernels_vector_instructions_are_recorded_as_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawns: Spawner
) -> None:
    """`ATEN_CPU_CAPABILITY` (what make demo pins to avx2) chooses torch's kernels, and with them the rounding of a
    cell's numbers: the record says which it computed with."""
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")  # the plain kernels every x86-64 and ARM machine has
    proc = spawns.run_train([*CELL, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["cpu_capability"] == "DEFAULT"
