"""Faults with data workers on: a SIGKILL and a re-run end on an unbroken run's weights, whatever the number of
workers; SIGTERM to the whole process group (as `timeout`, `kill -- -PGID` and `scancel` send it) leaves a
resumable checkpoint; several cells per machine with the joblib and submitit_local launchers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import QUICK, REPO, Spawner, wait_for

from vit_locality.store.record import scan_records

# Two epochs of 8 steps, AutoAugment and CutMix on (the default protocol), two data workers: long enough that a
# signal sent as the first epoch's checkpoint appears lands in the second epoch.
WORKERS = [
    *[a for a in QUICK if not a.startswith(("data.num_workers", "data.batch_size", "trainer.max_epochs"))],
    "data.num_workers=2",
    "data.batch_size=32",
    "trainer.max_epochs=2",
    "trainer.deterministic=true",
    "stats.pictures=false",
]


def _with(args: list[str], **settings: object) -> list[str]:
    """`args` with some `key=value` settings replaced."""
    return [*[a for a in args if a.split("=")[0] not in settings], *[f"{k}={v}" for k, v in settings.items()]]


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]


def _assert_same_weights(a: Path, b: Path) -> None:
    first, second = _final_weights(a), _final_weights(b)
    assert first.keys() == second.keys()
    differing = [k for k in first if not torch.equal(first[k], second[k])]
    assert not differing, f"{len(differing)} of {len(first)} tensors differ, e.g. {differing[:3]}"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _assert_group_ends(pgid: int, timeout: float = 30) -> None:
    """No process of the group (a data worker) outlives the main process for long."""
    deadline = time.monotonic() + timeout
    while _group_alive(pgid):
        assert time.monotonic() < deadline, f"processes of group {pgid} are left behind"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory: pytest.TempPathFactory, spawns: Spawner) -> Path:
    """An unbroken run with two data workers."""
    run_dir = tmp_path_factory.mktemp("unbroken") / "run"
    proc = spawns.run_train([*WORKERS, f"hydra.run.dir={run_dir}"], cwd=run_dir.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def test_sigkill_with_workers_then_same_command_ends_on_the_unbroken_weights(
    unbroken: Path, tmp_path: Path, spawns: Spawner
) -> None:
    broken = tmp_path / "broken"
    args = [*WORKERS, f"hydra.run.dir={broken}"]
    proc = spawns.start_train(args, tmp_path, tmp_path / "killed.log", own_group=True)
    wait_for(broken / "checkpoints" / "last.ckpt", proc)
    time.sleep(0.3)  # into the second epoch
    proc.send_signal(signal.SIGKILL)  # the main process only: its data workers must notice on their own
    proc.wait(timeout=60)
    _assert_group_ends(proc.pid)
    assert _record(broken)["status"] == "running"

    resumed = spawns.run_train(args, cwd=tmp_path)
    assert resumed.returncode == 0 and "resuming" in resumed.stdout + resumed.stderr, resumed.stderr[-3000:]
    _assert_same_weights(unbroken, broken)
    assert _record(unbroken)["metrics"]["test/acc1"] == _record(broken)["metrics"]["test/acc1"]


def test_the_number_of_workers_does_not_change_the_weights(unbroken: Path, tmp_path: Path, spawns: Spawner) -> None:
    in_process = tmp_path / "in_process"
    proc = spawns.run_train([*_with(WORKERS, **{"data.num_workers": 0}), f"hydra.run.dir={in_process}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_same_weights(unbroken, in_process)


def test_sigterm_to_the_process_group_saves_a_resumable_checkpoint(tmp_path: Path, spawns: Spawner) -> None:
    run_dir = tmp_path / "run"
    args = [*WORKERS, f"hydra.run.dir={run_dir}"]
    log = tmp_path / "terminated.log"
    proc = spawns.start_train(args, tmp_path, log, own_group=True)
    wait_for(run_dir / "checkpoints" / "last.ckpt", proc)
    os.killpg(proc.pid, signal.SIGTERM)  # main process and data workers alike
    assert proc.wait(timeout=120) == 143, log.read_text()[-3000:]
    _assert_group_ends(proc.pid, timeout=10)
    assert "killed by signal" not in log.read_text()
    assert _record(run_dir)["status"] == "interrupted"
    assert (run_dir / "checkpoints" / "interrupted.ckpt").exists()

    again = spawns.run_train(args, cwd=tmp_path)
    assert again.returncode == 0 and "resuming" in again.stdout + again.stderr, again.stderr[-3000:]
    assert _record(run_dir)["status"] == "complete"


def test_a_process_that_fails_with_live_workers_still_exits(tmp_path: Path, spawns: Spawner) -> None:
    """At exit multiprocessing sends its daemonic workers SIGTERM and waits for them: the workers that ignore a
    group's SIGTERM must still obey their parent's, or the exit waits forever."""
    script = (
        "from vit_locality.data import SyntheticDataModule\n"
        "loader = SyntheticDataModule(train_size=64, test_size=16, batch_size=16, num_workers=2).train_dataloader()\n"
        "batches = iter(loader)\n"
        "next(batches)\n"
        "raise RuntimeError('failed while the data workers are alive')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "failed while the data workers are alive" in proc.stderr


@pytest.mark.parametrize(
    "launcher", [["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], ["hydra/launcher=submitit_local"]]
)
def test_parallel_cells_with_data_workers_complete(launcher: list[str], tmp_path: Path, spawns: Spawner) -> None:
    """joblib runs cells in loky worker processes, whose default process class cannot start the DataLoader's."""
    sweep = tmp_path / "sweep"
    cell = [a for a in QUICK if not a.startswith("data.num_workers")]  # the data set's default workers
    args = ["-m", "protocol=baseline,modern", *cell, "stats.pictures=false", *launcher, f"hydra.sweep.dir={sweep}"]
    proc = spawns.run_train(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(scan_records([sweep]).complete) == 2
