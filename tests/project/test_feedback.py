"""What a user sees while and after a run: the time left on the per-epoch line, no warning from the project's own
defaults, the table of a sweep's cells after every multirun, and a `make clean` that never deletes results."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import QUICK, REPO, Spawner
from vit_locality.callbacks import duration_text, epochs_left


@pytest.mark.parametrize(
    "seconds, text", [(0, "0 s"), (59.4, "59 s"), (60, "1 min 00 s"), (245, "4 min 05 s"), (7380, "2 h 03 min")]
)
def test_duration_text(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_epochs_left_by_epochs_and_by_steps() -> None:
    trainer = SimpleNamespace(max_epochs=10, current_epoch=3, max_steps=-1, global_step=40, num_training_batches=10)
    assert epochs_left(trainer) == 6  # epoch index 3 just ended: 4..9 remain
    trainer.max_steps = 65  # 25 steps left at 10 per epoch: 3 epochs, fewer than the 6 by max_epochs
    assert epochs_left(trainer) == 3
    trainer.current_epoch = 9
    assert epochs_left(trainer) == 0


def test_a_sweep_logs_time_left_prints_its_table_and_no_warning(tmp_path: Path, spawns: Spawner) -> None:
    """Workers on (the default), a 2-epoch 2-cell sweep: each epoch line but the last says the time left, stderr
    holds no warning, and the sweep ends with a table of its cells."""
    quick = [a for a in QUICK if not a.startswith(("trainer.max_epochs", "data.num_workers"))]
    args = ["-m", *quick, "trainer.max_epochs=2", "loss.ls=0,0.1", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    done = spawns.run_train(args, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if re.search(r"epoch \d/2 \(", line)]
    assert len(lines) == 4
    assert all(re.search(r"\(\d+\.\d s, about \d+ s left\)", line) for line in lines if "epoch 1/2" in line)
    assert not any("left" in line for line in lines if "epoch 2/2" in line)
    assert "Warning" not in done.stderr and "warn" not in done.stderr.lower(), done.stderr
    table = done.stdout[done.stdout.rindex("cell") :]
    assert "Modern" in table and "-LS" in table and "complete" in table


def test_make_clean_keeps_results_and_clean_runs_asks(spawns: Spawner) -> None:
    dry = subprocess.run(["make", "-n", "clean"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "multirun" not in dry and "outputs" not in dry and "reports" not in dry and "data" not in dry
    refused = subprocess.run(["make", "clean-runs"], cwd=REPO, input="n\n", capture_output=True, text=True)
    assert refused.returncode != 0 and "finished results included" in refused.stdout
