"""Who handles which signal (vit_locality/run/interrupts.py), without a cluster: SIGUSR2 takes SIGTERM's path in
the main process and is handed to submitit once afterwards; data workers ignore it; Lightning's SLURM auto-requeue
is off; the launching process's lines for a job's start, requeue and end."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import Spawner
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vit_locality.run.builders import slurm_environment
from vit_locality.run.interrupts import SigtermGate, requeue_after_time_limit
from vit_locality.sweep.slurm_launcher import END_CONFIRM_POLLS, TrackedCell, observe


def test_sigusr2_stops_like_sigterm_once_and_only_in_the_process_that_installed_it(monkeypatch) -> None:
    handled: list[int] = []
    monkeypatch.setattr(signal, "getsignal", lambda signum: lambda *_: handled.append(signum))
    outside = SigtermGate()
    with pytest.raises(SIGTERMException):
        outside.on_time_limit(signal.SIGUSR2, None)  # outside fit: at once
    gate = SigtermGate()
    with gate.deferring():
        gate.on_time_limit(signal.SIGUSR2, None)
        gate.on_time_limit(signal.SIGUSR2, None)  # a second one changes nothing
    assert handled == [signal.SIGTERM] and gate.time_limit
    forked = SigtermGate()
    forked.pid = -1  # as in a data worker forked before it reset its handlers
    forked.on_time_limit(signal.SIGUSR2, None)
    forked(signal.SIGTERM, None)
    assert not forked.time_limit


def test_submitit_gets_the_time_limit_once_after_the_cell_and_a_refusal_says_why(caplog) -> None:
    calls: list[int] = []
    gate = SigtermGate()
    gate.on_time_limit_before = lambda signum, frame: calls.append(signum)
    requeue_after_time_limit(gate, "cell")
    assert calls == []  # no SIGUSR2 came: nothing to hand on
    gate.time_limit = True
    requeue_after_time_limit(gate, "cell")
    assert calls == [signal.SIGUSR2]

    def used_up(signum: int, frame: object) -> None:
        raise RuntimeError("Job not requeued because: timed-out too many times.")

    gate.on_time_limit_before = used_up
    with caplog.at_level(logging.INFO, logger="vit_locality"):
        requeue_after_time_limit(gate, "cell")  # returns: the cell's own interruption ends the process
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        "cell: submitit did not requeue the job after the time limit "
        "(Job not requeued because: timed-out too many times)"
    ]


def test_a_data_worker_ignores_sigusr2(spawns: Spawner) -> None:
    code = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGUSR2, lambda *a: os._exit(7))\n"  # what a worker inherits: submitit's handler
        "from vit_locality.data.workers import init_data_worker\n"
        "init_data_worker(0)\n"
        "os.kill(os.getpid(), signal.SIGUSR2); time.sleep(0.2); print('alive')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "alive", done.stderr[-2000:]


def test_lightning_reads_ranks_from_slurm_without_requeueing_itself(monkeypatch) -> None:
    for name in ("SLURM_NTASKS", "SLURM_JOB_NAME"):
        monkeypatch.delenv(name, raising=False)
    assert slurm_environment() == []
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    (environment,) = slurm_environment()
    assert environment.auto_requeue is False


def fake_job(tmp_path: Path) -> SimpleNamespace:
    paths = SimpleNamespace(result_pickle=tmp_path / "result.pkl")
    return SimpleNamespace(job_id="7_1", num_tasks=1, task=lambda task: SimpleNamespace(paths=paths))


def test_the_launching_process_says_start_requeue_and_end_once_each(tmp_path: Path, caplog) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cell = TrackedCell("cellA", fake_job(tmp_path), run_dir, [])
    seen = [("RUNNING", 0), ("COMPLETING", 1), ("PENDING", 1), ("RUNNING", 1), ("RUNNING", 1), ("COMPLETED", 1)]
    with caplog.at_level(logging.INFO, logger="vit_locality"):
        for state, restarts in seen:
            observe(cell, (state, "None", restarts))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "cellA: job 7_1 started",
        "cellA: job 7_1 requeued: requeued by SLURM (the cell recorded no reason) (its record: no record)",
        "cellA: job 7_1 started (attempt 2)",
        "cellA: job 7_1 ended (COMPLETED); the cell is no record",
    ]
    assert cell.ended


def test_a_requeued_job_seen_failed_for_a_moment_is_not_ended(tmp_path: Path, caplog) -> None:
    """After submitit's requeue, squeue showed the job FAILED for one poll before it waited again (seen on the real
    cluster): an interrupted cell's end is believed only once it has stayed END_CONFIRM_POLLS polls."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps({"status": "interrupted", "error": "SIGUSR2 (time limit)"}))
    cell = TrackedCell("cellC", fake_job(tmp_path), run_dir, [])
    seen = [("RUNNING", 0), ("FAILED", 0), ("PENDING", 1), ("RUNNING", 1)]
    with caplog.at_level(logging.INFO, logger="vit_locality"):
        for state, restarts in seen:
            observe(cell, (state, "None", restarts))
        assert not cell.ended
        for _ in range(END_CONFIRM_POLLS + 1):  # out of requeues: it stays FAILED
            observe(cell, ("FAILED", "None", 1))
    lines = [r.getMessage().split(": ", 1)[1].split(":")[0] for r in caplog.records]
    assert lines == [
        "job 7_1 started",
        "job 7_1 requeued",
        "job 7_1 started (attempt 2)",
        "job 7_1 ended (FAILED); the cell is interrupted",
    ]
    assert cell.ended


def test_a_cancelled_job_that_leaves_squeue_while_its_end_awaits_confirmation_says_cancelled(
    tmp_path: Path, caplog
) -> None:
    """scancel on the real cluster: squeue showed CANCELLED for fewer polls than END_CONFIRM_POLLS before the job
    left it (MinJobAge, on a loaded machine); the end says the state it was seen in, not "gone from squeue"."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps({"status": "interrupted", "error": "SIGTERM"}))
    cell = TrackedCell("cellD", fake_job(tmp_path), run_dir, [])
    with caplog.at_level(logging.INFO, logger="vit_locality"):
        observe(cell, ("RUNNING", "None", 0))
        observe(cell, ("CANCELLED", "None", 0))
        assert not cell.ended
        observe(cell, None)
    assert caplog.records[-1].getMessage() == "cellD: job 7_1 ended (CANCELLED); the cell is interrupted: SIGTERM"
    assert cell.ended


def test_a_requeue_between_two_polls_is_still_said(tmp_path: Path, caplog) -> None:
    cell = TrackedCell("cellB", fake_job(tmp_path), None, [])
    with caplog.at_level(logging.INFO, logger="vit_locality"):
        observe(cell, ("RUNNING", "None", 0))
        observe(cell, ("RUNNING", "None", 1))  # it went back to the queue and started again in between
        observe(cell, None)  # gone from squeue
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(": ", 1)[1].split(":")[0] for line in lines] == [
        "job 7_1 started",
        "job 7_1 requeued",
        "job 7_1 started (attempt 2)",
        "job 7_1 ended (gone from squeue); the cell is no record",
    ]


def test_a_signal_before_the_cell_records_anything_still_ends_it_as_interrupted(monkeypatch, tmp_path: Path) -> None:
    """SIGTERM or SIGUSR2 while the data is built (before fit): an interruption with its exit status, not a silent
    exit 0 (Lightning's SIGTERMException is a SystemExit without a code)."""
    from helpers import QUICK, compose_config

    import vit_locality.run.cell as cell

    def stopped(cfg: object) -> None:
        raise SIGTERMException()

    monkeypatch.setattr(cell, "build_datamodule", stopped)
    with pytest.raises(cell.CellInterrupted) as stop:
        cell.run_cell(compose_config(QUICK), tmp_path / "run", lambda cfg, run_dir: [])
    assert stop.value.exit_code == 143 and "run the same command to resume" in str(stop.value)


def test_a_time_limit_submitit_will_not_requeue_ends_the_cell_interrupted(monkeypatch, tmp_path: Path) -> None:
    """max_num_timeout used up: submitit's handler raises; the cell still ends as an interruption (exit 140, the
    line that says the same command resumes it), never as a failure."""
    import os
    import time

    from helpers import QUICK, compose_config

    import vit_locality.run.cell as cell

    refused: list[int] = []

    def submitit_refuses(signum: int, frame: object) -> None:
        refused.append(signum)
        raise RuntimeError("Job not requeued because: timed-out too many times.")

    def time_limit_arrives(cfg: object) -> None:
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(5)  # the handler runs first

    previous = signal.signal(signal.SIGUSR2, submitit_refuses)
    try:
        monkeypatch.setattr(cell, "build_datamodule", time_limit_arrives)
        with pytest.raises(cell.CellInterrupted) as stop:
            cell.run_cell(compose_config(QUICK), tmp_path / "run", lambda cfg, run_dir: [])
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert refused == [signal.SIGUSR2]
    assert stop.value.exit_code == 140 and "SIGUSR2 (time limit)); run the same command to resume" in str(stop.value)


@pytest.mark.parametrize(
    ("record", "said"),
    [
        ({"status": "running", "previous_stop": "SIGTERM"}, "preempted or requeued by SLURM (SIGTERM): checkpointed"),
        ({"status": "interrupted", "error": "SIGTERM"}, "preempted or requeued by SLURM (SIGTERM): checkpointed"),
        ({"status": "running"}, "requeued by SLURM (the cell recorded no reason)"),
        ({"status": "failed", "previous_stop": "SIGTERM"}, "requeued by SLURM (the cell recorded no reason)"),
    ],
)
def test_a_requeue_seen_after_the_next_attempt_started_still_says_why(
    tmp_path: Path, caplog, record: dict, said: str
) -> None:
    """Between two polls the job was requeued and its next attempt started (seen under load on the real cluster):
    the new attempt's record keeps why the last one stopped, and the launcher reads it while that one runs."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps(record))
    cell = TrackedCell("cellD", fake_job(tmp_path), run_dir, [])
    with caplog.at_level(logging.INFO, logger="vit_locality"):
        for restarts in (0, 1):  # RUNNING at both polls: the requeue shows only as a new start
            observe(cell, ("RUNNING", "None", restarts))
    (requeued,) = [r.getMessage() for r in caplog.records if "requeued" in r.getMessage()]
    assert requeued == f"cellD: job 7_1 requeued: {said} (its record: {record['status']})"
