"""A directory where a checkpoint file belongs is refused before anything trains, in one line: the run could not
save its next checkpoint there, and resuming from the predecessor would hide that until an epoch later."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_fakes import IDENTITY, resume_point, write_checkpoints
from helpers import QUICK, Spawner

from vit_locality.errors import exit_code_of
from vit_locality.run.checkpoints import (
    NotACheckpointFile,
    interrupted_checkpoint,
    last_checkpoint,
    previous_checkpoint,
)


@pytest.mark.parametrize("where", [last_checkpoint, interrupted_checkpoint], ids=["last", "interrupted"])
def test_a_directory_in_place_of_a_checkpoint_is_refused_not_skipped(tmp_path: Path, where) -> None:
    write_checkpoints(tmp_path, last_prev=4, interrupted_prev=6)
    blocked = where(tmp_path)
    blocked.mkdir(parents=True)
    with pytest.raises(NotACheckpointFile) as refusal:
        resume_point(tmp_path, IDENTITY)
    assert str(refusal.value) == (
        f"{blocked} is a directory, where a checkpoint file belongs: move it away and run again"
    )
    assert exit_code_of(refusal.value) == 2
    assert previous_checkpoint(blocked).is_file()  # the predecessor was there to fall back on, and was not used


def test_train_refuses_a_directory_named_last_ckpt_before_training(tmp_path: Path, spawns: Spawner) -> None:
    run_dir = tmp_path / "run"
    last_checkpoint(run_dir).mkdir(parents=True)
    proc = spawns.run_train([*QUICK, f"hydra.run.dir={run_dir}"], cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "where a checkpoint file belongs" in line]
    assert len(errors) == 1 and "Epoch" not in proc.stdout + proc.stderr
    assert not (run_dir / "results.json").exists()
