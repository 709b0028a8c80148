"""The GPU bench's real runs (vit_locality/bench/gpu_runs.py): the `cell` section runs one real cell through train.py
in the CPU smoke mode, is skipped when the budget cannot hold the projected cell, judges the wall clock against the
3-minute target, and reports a failed or cut-short run as a row; `compile_modes` skips CUDA graphs off CUDA and any mode
the budget cannot hold. The judged cases run on a fake clock and a fake train.py, so no assertion depends on speed."""

from __future__ import annotations

import json
import math
import subprocess
import time
from dataclasses import replace

import pytest
import torch

from vit_locality.bench import gpu_runs
from vit_locality.bench.gpu import FULL, SMOKE, main
from vit_locality.bench.gpu_runs import cell_command, cell_section, compile_modes_section, projected_cell_s

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
PAPER_CELL = ["model=vit_paper", "protocol=modern", "data.on_device=true", "trainer.max_epochs=200"]
PAPER_CELL += ["data.num_classes=100", "data.train_size=50000", "data.test_size=10000", "trainer.accelerator=gpu"]
PROJECTION = {"e2e_modern_img_s": 50_000.0, "eval_img_s": 100_000.0, "probe_s": 0.01, "compile_s": 30.0}


def test_smoke_run_trains_a_real_cell_and_skips_cuda_graphs(tmp_path) -> None:
    out = tmp_path / "gpu.json"
    record = main(["--device", "cpu", "--smoke", "--sections", "cell,compile_modes", "--out", str(out)])
    rows = {(r["section"], r["quantity"]): r for r in record["rows"]}
    (cell,) = [r for (s, q), r in rows.items() if s == "cell" and "wall minutes" in q]
    assert 0 < float(cell["value"]) < 5 and cell["target"] == "<= 3 min" and cell["status"] == ""  # smoke: not judged
    assert "vit_tiny, max_epochs 1, 256 + 64 images" in cell["quantity"]
    saved = json.loads((tmp_path / "bench_gpu_cell" / "results.json").read_text())
    assert saved["status"] == "complete" and saved["model"]["name"] == "vit_tiny"
    assert saved["data"]["num_classes"] == 100
    (timings,) = [r["value"] for (s, q), r in rows.items() if s == "cell" and "timings" in q]
    assert f"fit_s {saved['timings']['fit_s']:.1f} s" in timings
    modes = {q.split(",")[1].strip(): r["value"] for (s, q), r in rows.items() if s == "compile_modes"}
    assert modes["eager (model section); compile s"] == "not measured: needs the model section"
    assert modes["reduce-overhead (CUDA graphs); compile s; / default"] == "skipped: CUDA only"
    rate, compile_s, ratio = modes["max-autotune-no-cudagraphs; compile s; / default"].split("; ")
    assert float(rate) > 0 and math.isfinite(float(compile_s.split()[0])) and ratio == "n/a (eager backend: no mode)"


class FakeTrain:
    """train.py on a fake clock: `seconds` pass, then it writes a record (or not) and exits with `code`."""

    def __init__(self, monkeypatch, seconds: float, code: int = 0, status: str = "complete") -> None:
        self.now, self.seconds, self.code, self.status, self.commands = 1000.0, seconds, code, status, []
        monkeypatch.setattr(gpu_runs.time, "perf_counter", lambda: self.now)
        monkeypatch.setattr(gpu_runs.subprocess, "run", self)

    def __call__(self, command, stdout, stderr, timeout):
        self.commands.append((command, timeout))
        if self.seconds > timeout:
            raise subprocess.TimeoutExpired(command, timeout)
        self.now += self.seconds
        run_dir = next(a.split("=", 1)[1] for a in command if a.startswith("hydra.run.dir="))
        record = {"status": self.status, "timings": {"fit_s": 150.0, "test_s": 2.0, "total_s": 160.0}}
        (gpu_runs.Path(run_dir) / "results.json").write_text(json.dumps(record))
        stdout.write("loading\nError executing job: boom\n")
        return subprocess.CompletedProcess(command, self.code)


@pytest.mark.parametrize(("seconds", "status"), [(170.0, "met"), (190.0, "NOT met")])
def test_the_paper_cell_is_judged_on_its_wall_clock(tmp_path, monkeypatch, seconds, status) -> None:
    fake = FakeTrain(monkeypatch, seconds)
    state = {"started": fake.now, "budget_s": 420.0, "cell_s": 200.0}
    rows = cell_section(FULL, CUDA, state, tmp_path)
    assert rows[0]["value"] == f"{seconds / 60:.2f}" and rows[0]["status"] == status
    assert rows[1]["value"] == "fit_s 150.0 s, test_s 2.0 s, total_s 160.0 s"
    ((command, timeout),) = fake.commands
    assert timeout == 420.0  # the budget left is the run's hard limit
    assert set(PAPER_CELL) <= set(command)


def test_the_cell_is_skipped_when_the_budget_cannot_hold_it(tmp_path, monkeypatch) -> None:
    fake = FakeTrain(monkeypatch, 10.0)
    state = {"started": fake.now - 300.0, "budget_s": 420.0, "cell_s": 150.0}  # 120 s left, 150 s projected
    (skipped,) = cell_section(FULL, CUDA, state, tmp_path)
    assert skipped["value"] == "skipped: 120 s of the budget left, the cell is projected at 150 s"
    assert fake.commands == [] and not (tmp_path / "bench_gpu_cell").exists()
    state["cell_s"] = 110.0  # now it fits: it runs, limited to the 120 s left
    assert cell_section(FULL, CUDA, state, tmp_path)[0]["status"] == "met" and fake.commands[0][1] == 120.0


def test_a_failed_or_cut_short_cell_is_a_row(tmp_path, monkeypatch) -> None:
    FakeTrain(monkeypatch, 10.0, code=1, status="failed")
    state = {"started": time.perf_counter(), "budget_s": 420.0}
    assert cell_section(FULL, CUDA, state, tmp_path)[0]["value"] == "failed: exit 1: Error executing job: boom"
    FakeTrain(monkeypatch, 10.0, code=0, status="running")  # exit 0, yet the record says the cell did not finish
    assert cell_section(FULL, CUDA, state, tmp_path)[0]["value"] == "failed: exit 0: Error executing job: boom"
    fake = FakeTrain(monkeypatch, 500.0)
    state = {"started": fake.now, "budget_s": 420.0}  # no projection: it runs, and the budget stops it
    stopped = cell_section(FULL, CUDA, state, tmp_path)[0]["value"]
    assert stopped == "stopped at the budget: 420 s (log bench_gpu_cell.log)"


def test_the_projected_cell_time_comes_from_the_projection() -> None:
    # the projection section's formula: 200 x (1 + 0.1 + 0.01) s + 30 s = 252 s, printed as 4.2 minutes
    assert projected_cell_s(FULL, CUDA, dict(PROJECTION)) == pytest.approx(252.0)
    assert projected_cell_s(FULL, CUDA, {"cell_s": 99.0, **PROJECTION}) == 99.0
    assert projected_cell_s(FULL, CUDA, {}) is None  # projection not computed
    assert projected_cell_s(SMOKE, CPU, dict(PROJECTION)) is None  # the smoke cell is not the projected cell


def test_compile_modes_skip_what_the_budget_cannot_hold() -> None:
    settings = replace(SMOKE, compile_reserve_s=60.0)
    state = {"started": time.perf_counter() - 400.0, "budget_s": 420.0, "train_img_s": 100.0, "compile_s": 2.0}
    default, autotune, graphs = compile_modes_section(settings, CPU, state)
    assert default["value"] == "100; 2.0 s"
    assert autotune["value"].startswith("skipped: 20 s of the budget left, a compile may take 60 s")
    assert graphs["value"] == "skipped: CUDA only"


def test_the_smoke_cell_runs_on_the_cpu_trainer(tmp_path) -> None:
    command = cell_command(SMOKE, CPU, tmp_path)
    assert "trainer=cpu" in command and "trainer.max_epochs=1" in command and "model=vit_tiny" in command
    assert command[1].endswith("train.py") and f"hydra.run.dir={tmp_path}" in command
