"""Hydra's submitit SLURM launcher, saying one line per cell when its job is submitted, starts, is requeued (and
why) and ends. Jobs are followed with `squeue`: submitit's `sacct` poll fails without accounting storage."""

from __future__ import annotations

import getpass
import logging
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
from omegaconf import DictConfig, OmegaConf

from vit_locality.store.record import PREVIOUS_STOP, RecordError, read_record
from vit_locality.sweep.command import cell_key, current_command

log = logging.getLogger("vit_locality")
POLL_S = 5.0
WAITING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESV_DEL_HOLD", "SUSPENDED"}
PASSING = {"COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}
# A requeued job may show an ended state (FAILED) for a moment before it waits again: believed after this many polls.
END_CONFIRM_POLLS = 6


@dataclass
class TrackedCell:
    """One cell's job as the launching process last saw it in squeue."""

    name: str
    job: Any  # submitit's SlurmJob
    run_dir: Path | None
    overrides: list[str]
    state: str = "SUBMITTED"
    starts: int = 0
    ended: bool = False
    seen: bool = False
    unconfirmed_end: int = 0  # polls in a row that showed an interrupted cell's job ended
    unconfirmed_state: str = ""  # the ended state those polls showed

    @property
    def job_id(self) -> str:
        return str(self.job.job_id)

    def results_written(self) -> bool:
        """Every task of the job has written submitit's result pickle."""
        return all(self.job.task(task).paths.result_pickle.exists() for task in range(self.job.num_tasks))

    def record_says(self) -> tuple[str, str]:
        """The cell's recorded status and error ('no record', '' when it has none yet)."""
        try:
            record = read_record(self.run_dir) if self.run_dir is not None else None
        except RecordError as error:
            return str(error), ""
        if record is None:
            return "no record", ""
        # A new attempt already running keeps why the last one stopped (run/cell.py's previous_stop).
        error = record.data.get("error") or (record.data.get(PREVIOUS_STOP) if record.status == "running" else "")
        return record.status, str(error or "")


def requeue_reason(error: str) -> str:
    """Why a job went back to the queue, from what its cell recorded when it stopped."""
    if error.startswith("SIGUSR2"):
        return "time limit (SIGUSR2): checkpointed and requeued by submitit"
    if error.startswith("SIGTERM"):
        return "preempted or requeued by SLURM (SIGTERM): checkpointed"
    return f"requeued by SLURM ({error or 'the cell recorded no reason'})"


def squeue_states(job_ids: Sequence[str]) -> dict[str, tuple[str, str, int]] | None:
    """State, reason and restart count of each job squeue still shows; None when squeue fails."""
    command = ["squeue", "-h", "-r", "-t", "all", "-u", getpass.getuser()]
    command += ["-O", "JobArrayID:|,State:|,Reason:|,RestartCnt:|"]
    try:
        output = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as error:
        log.warning("squeue failed (%s); trying again", error)
        return None
    wanted, states = set(job_ids), {}
    for line in output.splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) >= 4 and parts[0] in wanted:
            states[parts[0]] = (parts[1], parts[2], int(parts[3]) if parts[3].isdigit() else 0)
    return states


def follow(cells: list[TrackedCell], poll_s: float = POLL_S) -> None:
    """Poll until every cell's job has ended, saying each change of a cell in one line."""
    while not all(cell.ended for cell in cells):
        states = squeue_states([cell.job_id for cell in cells if not cell.ended])
        for cell in cells:
            if not cell.ended and states is not None:
                observe(cell, states.get(cell.job_id))
        if not all(cell.ended for cell in cells):
            time.sleep(poll_s)


def observe(cell: TrackedCell, seen: tuple[str, str, int] | None) -> None:
    """Compare one cell's job with what was last seen of it; log a start, a requeue or the end."""
    if seen is None:  # gone from squeue (MinJobAge passed), or its result is there
        if cell.seen or cell.results_written():
            end(cell, "COMPLETED" if cell.results_written() else cell.unconfirmed_state or "gone from squeue")
        return
    state, _, restarts = seen
    state = state.split()[0]
    cell.seen = True
    if state == "RUNNING":
        if restarts + 1 > cell.starts:  # a new start; a requeue and restart between two polls shows only here
            if cell.starts and cell.state == "RUNNING":
                say_requeued(cell)
            cell.starts = restarts + 1
            attempt = f" (attempt {cell.starts})" if cell.starts > 1 else ""
            log.info("%s: job %s started%s", cell.name, cell.job_id, attempt)
    elif state in WAITING:
        if cell.state == "RUNNING":
            say_requeued(cell)
    elif state in PASSING:  # on its way out of RUNNING: ended or requeued, the next poll tells
        return
    elif cell.unconfirmed_end < END_CONFIRM_POLLS and cell.record_says()[0] == "interrupted":
        cell.unconfirmed_end += 1  # perhaps requeued on its way: the state it was last seen running in stays
        cell.unconfirmed_state = state
        return
    else:
        end(cell, state)
    cell.unconfirmed_end, cell.unconfirmed_state = 0, ""
    cell.state = state


def say_requeued(cell: TrackedCell) -> None:
    status, error = cell.record_says()
    log.info("%s: job %s requeued: %s (its record: %s)", cell.name, cell.job_id, requeue_reason(error), status)


def end(cell: TrackedCell, state: str) -> None:
    cell.ended = True
    status, error = cell.record_says()
    detail = f": {error}" if error and status != "complete" else ""
    log.info("%s: job %s ended (%s); the cell is %s%s", cell.name, cell.job_id, state, status, detail)


def job_return(cell: TrackedCell) -> JobReturn:
    """The job's own return when it wrote one; otherwise an empty one (the cell's record says what happened)."""
    if cell.results_written():
        try:
            return cell.job.results()[0]
        except Exception as error:  # the job raised: submitit's error pickle
            log.warning("%s: job %s raised: %s", cell.name, cell.job_id, str(error).strip().splitlines()[0])
    return JobReturn(overrides=cell.overrides, status=JobStatus.COMPLETED, _return_value=None)


def launch_and_follow(
    self: BaseSubmititLauncher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> Sequence[JobReturn]:
    """The plugin's launch (same executor settings, one array job per batch), then `follow` the jobs."""
    assert self.config is not None and self.hydra_context is not None
    executor = slurm_executor(self)
    Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    numbers = [initial_job_idx + index for index in range(len(job_overrides))]
    jobs = executor.map_array(
        self,
        [list(overrides) for overrides in job_overrides],  # the arguments of the launcher's __call__, one list each
        ["hydra.sweep.dir"] * len(numbers),
        numbers,
        [f"job_id_for_{number}" for number in numbers],
        [Singleton.get_state()] * len(numbers),
    )
    run_dirs = current_command().run_dir_index()  # the pre-check's names: no cell is composed here
    cells = [tracked(job, list(overrides), run_dirs) for job, overrides in zip(jobs, job_overrides, strict=True)]
    for cell in cells:
        log.info("%s: submitted as job %s (%s)", cell.name, cell.job_id, " ".join(filter_overrides(cell.overrides)))
    follow(cells)
    return [job_return(cell) for cell in cells]


def slurm_executor(launcher: BaseSubmititLauncher) -> Any:
    """submitit's SLURM executor with the launcher's settings (hydra.launcher.*), as the plugin makes it."""
    import submitit

    params = dict(launcher.params)
    folder = params.pop("submitit_folder")
    max_num_timeout = params.pop("max_num_timeout")
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=max_num_timeout)
    shared = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{key if key in shared else f"slurm_{key}": value for key, value in params.items()})
    return executor


@dataclass
class PackOnNode:
    """A pack's SLURM job: the command's Hydra config set, the cells' settings checked on the node's machine (they
    were validated on the submission host), then the command's task trains the pack (vit_locality.train.CellJobs)."""

    jobs: Any
    config: DictConfig

    def __call__(self, entries: list[tuple[Any, Path]], cfgs: list[DictConfig], pack_id: str) -> list[Any]:
        from hydra.core.hydra_config import HydraConfig

        from vit_locality.precheck.gate import on_this_machine

        HydraConfig.instance().set_config(self.config)
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)  # its lines in the job output
        return self.jobs.run_pack([(on_this_machine(s), run_dir) for s, run_dir in entries], cfgs, pack_id)


def submit_packs(
    launcher: BaseSubmititLauncher, jobs: Any, packs: list[tuple[list[tuple[Any, Path]], list[DictConfig], str]]
) -> list[list[Any]]:
    """One SLURM job per pack (one array), followed as a cell's job is; what each pack's cells return (None where its
    job wrote no result)."""
    assert launcher.config is not None
    executor = slurm_executor(launcher)
    entries, cfgs, ids = (list(column) for column in zip(*packs, strict=True))
    submitted = executor.map_array(PackOnNode(jobs, launcher.config), entries, cfgs, ids)
    cells = []
    for index, (job, pack) in enumerate(zip(submitted, entries, strict=True)):
        cells.append(TrackedCell(f"pack {index + 1} of {len(packs)} ({len(pack)} cells)", job, pack[0][1], []))
        log.info("%s: submitted as job %s (%s)", cells[-1].name, job.job_id, ", ".join(d.name for _, d in pack))
    follow(cells)
    return [pack_values(cell, len(pack)) for cell, pack in zip(cells, entries, strict=True)]


def pack_values(cell: TrackedCell, count: int) -> list[Any]:
    """A pack job's returns, one per cell; None each where the job wrote none (its cells' records say why)."""
    if cell.results_written():
        try:
            return list(cell.job.results()[0])
        except Exception as error:  # the job raised: submitit's error pickle
            log.warning("%s: job %s raised: %s", cell.name, cell.job_id, str(error).strip().splitlines()[0])
    return [None] * count


def tracked(job: Any, overrides: list[str], run_dirs: Mapping[tuple[str, ...], Path]) -> TrackedCell:
    """The cell's name and run directory as the pre-check named them (`run_dirs`, by `cell_key`); else named by its
    overrides."""
    run_dir = run_dirs.get(cell_key(overrides))
    if run_dir is not None:
        return TrackedCell(run_dir.name, job, run_dir, overrides)
    return TrackedCell(" ".join(filter_overrides(overrides)) or "cell", job, None, overrides)
