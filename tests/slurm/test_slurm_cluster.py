"""Cells on a real SLURM cluster (tests/slurm/local_cluster.sh: one node, this machine), each against an unbroken
run of the same cell outside SLURM: the grid as an array job, a preemption (`scontrol requeue`), a time limit
(SIGUSR2 mid-training), `scancel` and the same command again, DDP with ranks from SLURM, and a cell that fails for
a real reason. Who handles which signal: vit_locality/run/interrupts.py.

SLURM holds a requeued job for two minutes before it may start again (its begin time); the tests move that begin
time to now (`scontrol update StartTime=now`) after a few seconds, which changes nothing else about the requeue.
Each job asks for one CPU; the node advertises this machine's cores. The unbroken runs (one per cell, shared) train
while the time-limit test's first attempt sleeps, which is why that test comes first; `make test` runs this file on
one worker (--dist loadfile), so each is trained once. Measured on 2 cores shared with other test runs (load 8-14):
time limit 6 min 10 s with the three unbroken runs, grid 3 min 2 s, preemption 2 min 6 s, scancel 2 min 4 s, DDP
1 min 31 s, failure 35 s.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from data_fakes import write_fake_cifar10
from helpers import QUICK, REPO

# Every test here needs the cluster: through the fixture, the slurm and slow tiers (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("slurm_cluster")

STEPS_PER_EPOCH = 8
REQUEUE_SETTLE_S = 5.0  # seconds a requeued job waits on its begin time before the tests move it to now
ON_SLURM = [  # after the launcher's choice (hydra/launcher=slurm unless the args choose slurm_node)
    "hydra.launcher.partition=debug",
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=2",
]
# A cell that resumes bit-exactly (deterministic kernels, one thread), its data workers on.
EXACT = [
    *[a for a in QUICK if not a.startswith(("data.train_size", "data.batch_size", "data.num_workers"))],
    "data.train_size=256",
    "data.batch_size=32",
    "data.num_workers=1",
    "trainer.deterministic=true",
    "stats.pictures=false",
    "stats.probe_size=64",
]
PACED = Path(__file__).resolve().parent / "paced"
COMPOSE_COUNTER = Path(__file__).resolve().parent.parent / "compose_counter"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0"}


def with_epochs(epochs: int) -> list[str]:
    return [*[a for a in EXACT if not a.startswith("trainer.max_epochs")], f"trainer.max_epochs={epochs}"]


def train(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """train.py in the foreground, with the same threads as the jobs (the same float sums)."""
    command = [sys.executable, str(REPO / "train.py"), *args]
    return subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def start_sweep(
    args: list[str],
    sweep_dir: Path,
    log: Path,
    pace: tuple[Path, float] | None = None,
    count_compositions: Path | None = None,
) -> subprocess.Popen:
    """train.py -m on the cluster in the background; `pace` (progress file, seconds) slows the jobs' first attempt
    down to a pause after every batch (paced/sitecustomize.py); `count_compositions` (a file) gets one line per
    composition of Hydra's config in every process, the jobs' too (compose_counter/sitecustomize.py)."""
    env = dict(ENV)
    if pace is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACED), env.get("PYTHONPATH")]))
        env["VIT_LOCALITY_TEST_PACE"] = f"{pace[0]}:{pace[1]}"
    if count_compositions is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(COMPOSE_COUNTER), env.get("PYTHONPATH")]))
        env["COMPOSE_COUNT_FILE"] = str(count_compositions)
    launcher = [] if any(a.startswith("hydra/launcher=") for a in args) else ["hydra/launcher=slurm"]
    command = [
        sys.executable,
        str(REPO / "train.py"),
        "-m",
        *launcher,
        *args,
        *ON_SLURM,
        f"hydra.sweep.dir={sweep_dir}",
    ]
    return subprocess.Popen(command, cwd=sweep_dir.parent, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def sweep(args: list[str], sweep_dir: Path, log: Path) -> tuple[int, str]:
    """train.py -m on the cluster to its end: exit status and output."""
    proc = start_sweep(args, sweep_dir, log)
    out = finish(proc, log)
    return proc.returncode, out


def job_ids(log: Path) -> list[str]:
    """The jobs the sweep says it submitted, in its own lines."""
    return re.findall(r"submitted as job (\S+)", log.read_text()) if log.exists() else []


def hurry_requeued(ids: list[str], waiting_since: dict[str, float]) -> None:
    """A requeued job of `ids` that has waited for its begin time a few seconds may start now. Not at once: slurmd
    refuses a start whose credential is dated no later than the requeue's revocation of the old one (same second),
    and kills the job ('Job credential revoked'); SLURM's own two-minute hold exists for that reason."""
    listed = subprocess.run(["squeue", "-h", "-r", "-t", "PD", "-o", "%i %r"], capture_output=True, text=True).stdout
    now, held = time.monotonic(), set()
    for line in listed.splitlines():
        job, _, reason = line.partition(" ")
        if job in ids and reason.strip() == "BeginTime":
            held.add(job)
            if now - waiting_since.setdefault(job, now) >= REQUEUE_SETTLE_S:
                subprocess.run(["scontrol", "update", f"jobid={job}", "StartTime=now"], capture_output=True)
    for job in set(waiting_since) - held:
        del waiting_since[job]


def finish(proc: subprocess.Popen, log: Path, timeout: float = 600) -> str:
    """Wait for the sweep, letting its requeued jobs start soon; its output."""
    deadline, waiting_since = time.monotonic() + timeout, {}
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the sweep did not end in time:\n" + log.read_text()[-3000:])
        hurry_requeued(job_ids(log), waiting_since)
        time.sleep(1)
    return log.read_text()


def wait_for_step(progress: Path, step: int, proc: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    """Until a paced job has trained `step` steps (it pauses after each)."""
    deadline = time.monotonic() + timeout
    while not (progress.exists() and progress.read_text().strip().isdigit() and int(progress.read_text()) >= step):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"step {step} was not reached:\n" + log.read_text()[-3000:])
        time.sleep(0.05)


def cell_dir(sweep_dir: Path) -> Path:
    (run_dir,) = [p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return run_dir


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]


def assert_same_as_unbroken(run_dir: Path, unbroken: Path) -> None:
    a, b = weights(unbroken), weights(run_dir)
    assert a.keys() == b.keys()
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
    assert record(run_dir)["metrics"] == record(unbroken)["metrics"]


def job_log(sweep_dir: Path) -> str:
    """What the job's processes wrote (submitit's logs of every task and attempt)."""
    return "".join(path.read_text() for path in sorted((sweep_dir / ".submitit").rglob("*_log.*")))


def submitit_events(sweep_dir: Path) -> list[str]:
    """submitit's own lines in the jobs' output, once each (its format; Hydra's log repeats them in its own)."""
    lines = "".join(path.read_text() for path in sorted((sweep_dir / ".submitit").rglob("*_log.out"))).splitlines()
    return [line for line in lines if line.startswith("submitit ")]


def unbroken_run(args: list[str], tmp_path: Path) -> Path:
    run_dir = tmp_path / "unbroken"
    done = train([*args, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


GRID_CELL = [*with_epochs(1), "data.train_size=64", "data.test_size=32"]  # the grid's Modern cell
DDP_CELL = [*with_epochs(2), "trainer=ddp_cpu"]
_UNBROKEN: dict[tuple[str, ...], Path] = {}


def unbroken(args: list[str], factory: pytest.TempPathFactory) -> Path:
    """The unbroken run of a cell outside SLURM, trained once per module (several tests compare with the same)."""
    key = tuple(args)
    if key not in _UNBROKEN:
        _UNBROKEN[key] = unbroken_run(args, factory.mktemp("unbroken"))
    return _UNBROKEN[key]


def test_a_time_limit_mid_training_requeues_once_and_resumes_bit_exactly(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A 3-minute limit with SIGUSR2 60 s before it; SLURM's timer sends it up to a minute early, so it
    lands 60-120 s into the job, while the paced first attempt trains (24 steps of 5 s pauses). The main process
    finishes its batch, writes interrupted.ckpt, and submitit requeues the job once; the data workers ignore the
    signal. The requeued attempt trains at full speed and completes. While the first attempt sleeps, this worker
    trains the unbroken runs the module's tests compare with (first in the module for that reason)."""
    args = with_epochs(3)
    limit = ["hydra.launcher.timeout_min=3", "hydra.launcher.signal_delay_s=60"]
    sweep_dir, log, progress = tmp_path / "sweep", tmp_path / "sweep.log", tmp_path / "step"
    proc = start_sweep([*args, *limit], sweep_dir, log, pace=(progress, 5.0))  # 2 minutes of pauses
    with ThreadPoolExecutor(1) as pool:  # the unbroken runs train while finish() lets the requeued job start
        ready = pool.submit(lambda: [unbroken(cell, tmp_path_factory) for cell in (args, GRID_CELL, DDP_CELL)])
        out = finish(proc, log)
        ready.result()
    assert proc.returncode == 0, out[-3000:]
    (job,) = job_ids(log)
    requeues = out.count(f"job {job} requeued: time limit (SIGUSR2)")
    assert requeues >= 1 and out.count("requeued:") == requeues, out[-3000:]
    jobs = job_log(sweep_dir)
    events = submitit_events(sweep_dir)  # one handler call and one requeue per signal: none from the data workers
    assert len([e for e in events if "Caught signal SIGUSR2" in e]) == requeues, events
    assert len([e for e in events if "Requeued job" in e]) == requeues, events
    assert "stopped for the time limit and checkpointed" in jobs and "DataLoader worker" not in jobs
    assert "Bypassing SIGTERM" not in jobs and "auto-requeue" not in jobs  # Lightning's requeue is off
    step = int(re.search(r"interrupted at step (\d+)", jobs).group(1))
    if step % STEPS_PER_EPOCH:  # mid-epoch: the requeued job starts at the batch after it
        assert "resuming epoch" in jobs
    else:  # the signal came during an epoch's last batch: the requeued job starts the next epoch
        assert f"({step // STEPS_PER_EPOCH} epochs done)" in jobs and "resuming epoch" not in jobs
    run_dir = cell_dir(sweep_dir)
    assert record(run_dir)["status"] == "complete"
    assert_same_as_unbroken(run_dir, unbroken(args, tmp_path_factory))


@pytest.fixture
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference of the preemption, time-limit and scancel tests: one run of their cell outside SLURM."""
    return unbroken(with_epochs(3), tmp_path_factory)


def test_the_8_cell_grid_runs_as_an_array_job(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """8 one-epoch cells as one array job, two at a time; the Modern cell against a run outside SLURM. Hydra's config
    is composed N + 1 times in all the sweep's processes, its jobs' included: the command's own config and each cell
    once by the sweeper, which hands the configs to the jobs; each cell's settings are validated once, on the
    submission host (a job checks its node's machine on them)."""
    args = GRID_CELL
    sweep_dir, log, counted = tmp_path / "grid", tmp_path / "grid.log", tmp_path / "compositions"
    grid = ["aug.cutmix=true,false", "aug.autoaug=true,false", "loss.ls=0,0.1"]
    proc = start_sweep([*args, *grid], sweep_dir, log, count_compositions=counted)
    out = finish(proc, log)
    assert proc.returncode == 0, out[-3000:]
    assert len(counted.read_text().splitlines()) == 8 + 1
    assert len(Path(f"{counted}.validated").read_text().split()) == 8
    ids = job_ids(log)
    assert len(ids) == 8 and len({i.split("_")[0] for i in ids}) == 1, ids  # one array job of 8 tasks
    assert out.count("ended (COMPLETED); the cell is complete") == 8, out[-3000:]
    assert "sacct" not in out
    verdict = json.loads((sweep_dir / "verdict.json").read_text())
    assert [cell["status"] for cell in verdict["cells"]] == ["complete"] * 8
    modern = next(Path(cell["run"]) for cell in verdict["cells"] if "_aa1_cm1_ls0.1_" in cell["run"])
    assert_same_as_unbroken(modern, unbroken(args, tmp_path_factory))


def test_a_preempted_job_is_requeued_and_resumes_bit_exactly(tmp_path: Path, reference: Path) -> None:
    """`scontrol requeue` (SIGTERM, as a preemption) in the second epoch, after the first epoch's
    checkpoint; SLURM requeues the job itself, which resumes from interrupted.ckpt."""
    args = with_epochs(3)
    sweep_dir, log, progress = tmp_path / "sweep", tmp_path / "sweep.log", tmp_path / "step"
    proc = start_sweep(args, sweep_dir, log, pace=(progress, 0.3))
    wait_for_step(progress, STEPS_PER_EPOCH + 3, proc, log)
    (job,) = job_ids(log)
    subprocess.run(["scontrol", "requeue", job], check=True)
    out = finish(proc, log)
    assert proc.returncode == 0, out[-3000:]
    run_dir = cell_dir(sweep_dir)
    assert f"job {job} requeued: preempted or requeued by SLURM (SIGTERM)" in out, out[-3000:]
    assert f"job {job} started (attempt 2)" in out and out.count("requeued:") == 1
    assert record(run_dir)["status"] == "complete"
    jobs = job_log(sweep_dir)
    assert "resuming epoch 2 after its batch" in jobs and "DataLoader worker" not in jobs
    assert_same_as_unbroken(run_dir, reference)


def test_scancel_mid_epoch_is_interrupted_and_the_same_command_resumes(tmp_path: Path, reference: Path) -> None:
    """`scancel` in the second epoch ends the job (no requeue): the cell is recorded interrupted, the
    sweep exits 1, and the same command resumes it to the unbroken run's weights."""
    args = with_epochs(3)
    sweep_dir, log, progress = tmp_path / "sweep", tmp_path / "sweep.log", tmp_path / "step"
    proc = start_sweep(args, sweep_dir, log, pace=(progress, 0.3))
    wait_for_step(progress, STEPS_PER_EPOCH + 3, proc, log)
    (job,) = job_ids(log)
    subprocess.run(["scancel", job], check=True)
    out = finish(proc, log)
    run_dir = cell_dir(sweep_dir)
    assert proc.returncode == 1, out[-3000:]
    assert f"job {job} ended (CANCELLED); the cell is interrupted: SIGTERM" in out, out[-3000:]
    assert record(run_dir)["status"] == "interrupted" and (run_dir / "checkpoints" / "interrupted.ckpt").exists()
    assert "interrupted (SIGTERM); run the same command to resume" in job_log(sweep_dir)

    code, again = sweep(args, sweep_dir, tmp_path / "again.log")
    assert code == 0, again[-3000:]
    assert record(run_dir)["status"] == "complete"
    assert_same_as_unbroken(run_dir, reference)


def test_ddp_on_a_node_takes_its_ranks_from_slurm(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """`hydra/launcher=slurm_node` with 2 tasks (srun starts both ranks; Lightning reads them from
    SLURM's variables, it starts no process itself): the weights of trainer=ddp_cpu outside SLURM."""
    args = DDP_CELL
    node = ["hydra/launcher=slurm_node", "hydra.launcher.tasks_per_node=2"]
    code, out = sweep([*node, *args], tmp_path / "sweep", tmp_path / "sweep.log")
    assert code == 0, out[-3000:]
    logs = sorted((tmp_path / "sweep" / ".submitit").rglob("*_log.out"))
    assert [re.search(r"_(\d+)_log", path.name)[1] for path in logs] == ["0", "1"]  # a log per task: both ranks ran
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in logs[1].read_text()
    run_dir = cell_dir(tmp_path / "sweep")
    assert record(run_dir)["batch"]["world_size"] == 2
    assert_same_as_unbroken(run_dir, unbroken(args, tmp_path_factory))


def test_a_cell_failing_for_a_real_reason_is_failed_and_not_requeued(tmp_path: Path) -> None:
    """A damaged data file fails the cell in the job (exit 2); SLURM does not requeue a failed job."""
    write_fake_cifar10(tmp_path / "data", n_train_per_batch=40, n_test=20)
    batch = tmp_path / "data" / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(batch.read_bytes()[:200])
    args = ["data=cifar10", "model=vit_tiny", f"data.root={tmp_path / 'data'}", "data.download=false"]
    code, out = sweep([*args, "data.verify=false", "data.batch_size=16"], tmp_path / "sweep", tmp_path / "sweep.log")
    (job,) = job_ids(tmp_path / "sweep.log")
    assert code == 1, out[-3000:]
    assert f"job {job} ended (FAILED); the cell is failed: " in out and "data_batch_3" in out, out[-3000:]
    assert "requeued" not in out and not [e for e in submitit_events(tmp_path / "sweep") if "Requeued" in e]
    assert record(cell_dir(tmp_path / "sweep"))["status"] == "failed"


def test_packed_slurm_runs_one_job_per_pack_of_ordinary_cells(tmp_path: Path) -> None:
    """Four cells in packs of two: two jobs, each training its pack as one fused model on its node; every cell an
    ordinary complete record of its pack, and the same command again finds them complete."""
    args = [*GRID_CELL, "hydra/launcher=packed_slurm", "hydra.launcher.cells_per_pack=2", "aug.cutmix=true,false"]
    args += ["seed=0,1"]
    sweep_dir, log = tmp_path / "packs", tmp_path / "packs.log"
    code, out = sweep(args, sweep_dir, log)
    assert code == 0, out[-3000:]
    ids = job_ids(log)
    ended = re.findall(r"pack \d of 2 \(2 cells\): job \S+ ended \(COMPLETED\); the cell is complete", out)
    assert len(ids) == 2 and len(ended) == 2, out[-3000:]
    records = [json.loads(path.read_text()) for path in sweep_dir.glob("*/results.json")]
    assert len(records) == 4 and {r["status"] for r in records} == {"complete"}
    assert sorted(r["packed"]["cells"] for r in records) == [2, 2, 2, 2]
    assert len({r["packed"]["pack_id"] for r in records}) == 2
    assert "pack of 2 cells on cpu, from epoch 1/1" in job_log(sweep_dir)
    verdict = json.loads((sweep_dir / "verdict.json").read_text())
    assert [cell["status"] for cell in verdict["cells"]] == ["complete"] * 4


def test_a_preempted_pack_is_requeued_and_resumes_every_cell_bit_exactly(tmp_path: Path) -> None:
    """`scontrol requeue` (SIGTERM) of a pack's job in the second epoch: every cell of the pack checkpointed, the job
    requeued by SLURM, every cell resumed where it stopped and ending as the same pack run outside SLURM ends."""
    cells = [*with_epochs(3), "aug.cutmix=true,false"]
    reference = tmp_path / "reference"
    done = train(["-m", *cells, "hydra/launcher=packed", f"hydra.sweep.dir={reference}"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    sweep_dir, log, progress = tmp_path / "sweep", tmp_path / "sweep.log", tmp_path / "step"
    proc = start_sweep([*cells, "hydra/launcher=packed_slurm"], sweep_dir, log, pace=(progress, 0.3))
    wait_for_step(progress, STEPS_PER_EPOCH + 3, proc, log)
    (job,) = job_ids(log)
    subprocess.run(["scontrol", "requeue", job], check=True)
    out = finish(proc, log)
    assert proc.returncode == 0, out[-3000:]
    assert f"job {job} requeued: preempted or requeued by SLURM (SIGTERM)" in out, out[-3000:]
    assert "pack of 2 cells on cpu, from epoch 2/3, step" in job_log(sweep_dir)
    names = sorted(path.parent.name for path in reference.glob("*/results.json"))
    assert len(names) == 2 and names == sorted(path.parent.name for path in sweep_dir.glob("*/results.json"))
    for name in names:
        assert record(sweep_dir / name)["status"] == "complete"
        assert_same_as_unbroken(sweep_dir / name, reference / name)
