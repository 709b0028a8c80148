"""Test helpers: compose the project's Hydra config in-process; run one cell as train.py does (`InProcessTraining`,
which a test gets from the `trains` fixture); run train.py in a subprocess (`Spawner`, from the `spawns` fixture).
The runners are reached through those fixtures (tests/conftest.py) so that every test that trains or spawns is in the
slow tier."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from vit_locality.config.settings import RunSettings
from vit_locality.paths import CONF_DIR
from vit_locality.precheck.gate import settings_from
from vit_locality.precheck.resolvers import register_resolvers
from vit_locality.run.cell import run_cell
from vit_locality.train import cell_callbacks

REPO = Path(__file__).resolve().parents[1]
# torch threads of the train.py subprocesses: the caller's OMP_NUM_THREADS (make test: 1, one per pytest worker, so
# two workers never run four threads on two cores), else 2.
TRAIN_THREADS = os.environ.get("OMP_NUM_THREADS", "2")
CONF = CONF_DIR

# Small and fast settings for runs in tests: a tiny model on a small synthetic set, no progress bars.
QUICK = [
    "data=synthetic",
    "model=vit_tiny",
    "trainer=cpu",
    "trainer.max_epochs=1",
    "data.train_size=256",
    "data.test_size=64",
    "data.batch_size=64",
    "data.num_workers=0",
    "callbacks.progress_bar=none",
]
# What QUICK adds to a run directory's name: every setting it changes that changes results, sorted by key.
QUICK_NAMED = {"data.batch_size": "64", "data.test_size": "64", "data.train_size": "256", "trainer.max_epochs": "1"}


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=overrides or [], return_hydra_config=False)


def settings_for(overrides: list[str] | None = None) -> RunSettings:
    """The settings a cell of these overrides gets through the gate, as train.py gives them (this machine's checks
    included)."""
    return settings_from(compose_config(overrides))


def typed(overrides: list[str] | None = None) -> RunSettings:
    """A cell's settings without this machine's checks (the run name its base, as outside a Hydra job)."""
    return settings_from(compose_config(overrides), machine=False)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until `path` exists; the process is killed if it never comes, so a failed test leaves nothing running."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path} did not appear (training {'ended' if proc.poll() is not None else 'hung'})")
        time.sleep(0.02)


# train.py with every training batch followed by a pause and its global step written to a file: a test can then
# signal a run at a chosen step. Sleeping and writing draw no random numbers, so the run's results are untouched.
PACED_TRAIN = """
import sys, time
from pathlib import Path
from vit_locality.model.classifier import ViTClassifier
progress, pause = Path(sys.argv[1]), float(sys.argv[2])
batch_end = ViTClassifier.on_train_batch_end
def paced(self, outputs, batch, batch_idx):
    batch_end(self, outputs, batch, batch_idx)
    progress.write_text(str(self.global_step))
    time.sleep(pause)
ViTClassifier.on_train_batch_end = paced
sys.argv = [sys.argv[0], *sys.argv[3:]]
from vit_locality.train import cli
cli()
"""


class InProcessTraining:
    """Training in this process. A test gets the one instance from the `trains` fixture (tests/conftest.py), which
    puts it in the slow tier; no test makes its own."""

    @staticmethod
    def run_cell_as_train(cfg: DictConfig | RunSettings, run_dir: Path) -> dict[str, Any]:
        """One cell in this process as train.py runs it: through the gate, with the callbacks train.py gives it
        (checkpoints, reseeding, statistics)."""
        settings = cfg if isinstance(cfg, RunSettings) else settings_from(cfg)
        return run_cell(settings, run_dir, cell_callbacks)

    @staticmethod
    def run_pack_as_train(entries: list[tuple[RunSettings, Path]], pack_id: str = "test-pack") -> list[Any]:
        """Cells trained as one pack in this process, as hydra/launcher=packed trains them (train.py's callbacks)."""
        from vit_locality.run.pack import run_pack

        return run_pack(entries, cell_callbacks, "", pack_id)


class Spawner:
    """train.py in a subprocess. A test gets the one instance from the `spawns` fixture (tests/conftest.py), which
    puts it in the slow tier; no test makes its own."""

    @staticmethod
    def run_train(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
        """Run train.py as a user would; the environment keeps W&B offline and threads modest."""
        env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": TRAIN_THREADS, "HYDRA_FULL_ERROR": "0"}
        env.pop("WANDB_API_KEY", None)
        return subprocess.run(
            [sys.executable, str(REPO / "train.py"), *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    @staticmethod
    def make_dry_run(*args: str) -> list[list[str]]:
        """The commands `make -n` prints for a target, each split into its arguments, so whitespace and quoting
        do not matter to a test."""
        done = subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        lines = [line for line in done.stdout.splitlines() if line.strip() and not line.startswith("make")]
        return [shlex.split(line) for line in lines]

    @staticmethod
    def start_train(args: list[str], cwd: Path, log: Path, own_group: bool = False) -> subprocess.Popen:
        """train.py in the background, output to `log`; `own_group` gives it a process group of its own (and its
        data workers), as `timeout` or a batch system starts it, so a test can signal the whole group."""
        env = {**os.environ, "OMP_NUM_THREADS": TRAIN_THREADS, "WANDB_MODE": "offline"}  # as run_train: same sums
        return subprocess.Popen(
            [sys.executable, str(REPO / "train.py"), *args],
            cwd=cwd,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=own_group,
        )

    @staticmethod
    def start_paced_train(args: list[str], cwd: Path, log: Path, progress: Path, pause_s: float) -> subprocess.Popen:
        """train.py in a process group of its own (as start_train with `own_group`), writing its global step to
        `progress` after every training batch and then pausing `pause_s` seconds, so a signal lands after a known
        step."""
        env = {**os.environ, "OMP_NUM_THREADS": TRAIN_THREADS, "WANDB_MODE": "offline"}  # as run_train: same sums
        return subprocess.Popen(
            [sys.executable, "-c", PACED_TRAIN, str(progress), str(pause_s), *args],
            cwd=cwd,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _step_written(progress: Path) -> int:
    """The last step a paced run wrote; -1 before the first (or while the file is being rewritten)."""
    text = progress.read_text().strip() if progress.exists() else ""
    return int(text) if text.isdigit() else -1


def wait_for_step(progress: Path, step: int, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Until a paced run (start_paced_train) has finished training step `step`; the process is killed otherwise."""
    deadline = time.monotonic() + timeout
    while _step_written(progress) < step:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            state = "ended" if proc.poll() is not None else "hung"
            raise AssertionError(f"step {step} was not reached (training {state})")
        time.sleep(0.02)
