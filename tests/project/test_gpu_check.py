"""The first-GPU-session check (benchmarks/gpu_check.py) runs its steps for real on the CPU in its dry run, names every
step in its summary, records a step that outlives its timeout as "timeout" (its process group stopped), and goes on
after a step that fails. No assertion depends on this machine's speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Spawner

from benchmarks import gpu_check

REPO = Path(__file__).resolve().parents[2]


def _check(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m benchmarks.gpu_check --dry-run --out <tmp> ...` as a user runs it; its result and summary.json."""
    out = tmp_path / "gpu_check"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    command = [sys.executable, "-m", "benchmarks.gpu_check", "--dry-run", "--out", str(out), *args]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    return done, json.loads((out / "summary.json").read_text())


def _alive_with(text: str) -> list[int]:
    """Processes (not zombies) whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text in argv and state != "Z":
            found.append(int(entry.name))
    return found


def test_dry_run_runs_every_step_it_can_on_the_cpu(tmp_path, spawns: Spawner) -> None:
    done, summary = _check(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    steps = {s["step"]: s for s in summary["steps"]}
    assert list(steps) == gpu_check.STEP_NAMES and summary["dry_run"] and summary["passed"]
    assert steps["fdr_ddp"]["status"] == "skipped: no CUDA"
    ran = [name for name in gpu_check.STEP_NAMES if name not in ("fdr_ddp", "bench")]
    assert all(steps[name]["status"] == "ok" for name in ran), {n: steps[n]["status"] for n in ran}
    bench_status = steps["bench"]["status"]  # a slow machine may spend the dry run's budget before the bench
    assert bench_status == "ok" or bench_status.startswith("skipped: time budget"), steps["bench"]
    for name in ran:  # really executed: a log with the command and its output, the key line read from it
        log = Path(steps[name]["log"]).read_text()
        assert log.startswith("$ ") and steps[name]["line"] and steps[name]["seconds"] > 0, name
    assert "torch " in steps["install"]["line"] and "no CUDA device visible" in steps["cuda"]["line"]
    assert "test acc1" in steps["fdr_workers"]["line"] and "data.on_device=false" in steps["fdr_workers"]["command"]
    assert "host-sync warnings in 5 training steps" in steps["sync_count"]["line"]
    assert "1 epoch in" in steps["paper_epoch"]["line"] and "0 recompiles" in steps["paper_epoch"]["line"]
    assert steps["modern_eager"]["line"].startswith("eager, 1 epoch in"), steps["modern_eager"]["line"]
    compiled = steps["modern_compiled"]["line"]  # the whole step and the evaluation forward: two graphs
    assert compiled.startswith("mode=default (CUDA graphs need a CUDA device"), compiled
    assert "1 epoch in" in compiled and "2 graphs, 0 graph breaks, 0 recompiles" in compiled, compiled
    for name in gpu_check.STEP_NAMES:  # the printed table names every step
        assert f"\n{name} " in done.stdout, name
    assert "gpu-check passed" in done.stdout


def test_a_timeout_and_a_failure_are_recorded_and_the_rest_still_runs(tmp_path, spawns: Spawner) -> None:
    args = ["--steps", "cuda,fdr_auto,fdr_workers,fdr_deterministic", "--timeout", "fdr_auto=1"]
    done, summary = _check(tmp_path, *args, "--args", "fdr_workers=aug.cutmx=true")
    assert done.returncode == 1, done.stdout + done.stderr
    steps = {s["step"]: s for s in summary["steps"]}
    assert list(steps) == gpu_check.STEP_NAMES  # the steps left out are named too
    assert steps["install"]["status"] == "skipped: not in --steps"
    assert steps["cuda"]["status"] == "ok"
    assert steps["fdr_auto"]["status"] == "timeout" and steps["fdr_auto"]["line"].startswith("timed out after 1 s")
    assert not _alive_with(str(tmp_path / "gpu_check" / "runs" / "fdr_auto"))  # its process group was stopped
    assert steps["fdr_workers"]["status"] == "failed" and "aug.cutmx" in steps["fdr_workers"]["line"]
    assert steps["fdr_deterministic"]["status"] == "ok"  # after the timeout and the failure
    assert summary["not_passed"] == ["fdr_auto", "fdr_workers"]
    assert "NOT passed: fdr_auto, fdr_workers" in done.stdout


def test_key_lines_and_option_errors(capsys) -> None:
    """The key lines as the runs print them, and a mistyped step named in one line."""
    ctx = gpu_check.Context(dry=False, out=Path("unused"))
    log = "$ python train.py data=cifar100 ...\n[x][vit_locality][INFO] - epoch 1/1 (12.5 s): train/loss_epoch 4.1\n"
    recompiles = "V1204 [0/1] [__recompiles] Recompiling function forward in vit.py:10\n"
    assert (
        gpu_check.epoch_key(log + recompiles * 2, ctx)
        == "real CIFAR-100: 1 epoch in 12.5 s (as the run logged it), 2 recompiles"
    )
    assert gpu_check.last_line("a\nRuntimeError: no deterministic implementation\n\n") == (
        "RuntimeError: no deterministic implementation"
    )
    with pytest.raises(SystemExit):
        gpu_check.parse(["--timeout", "fdr_atuo=3"])
    assert "--timeout 'fdr_atuo=3': expected STEP=VALUE with STEP one of all, install" in capsys.readouterr().err
