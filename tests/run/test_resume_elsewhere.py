"""`ckpt_mode=resume` into a new directory gives a whole cell: its own last.ckpt, every record key of an unbroken
run of the cell, and the attention statistics of the epochs before the resume (from the directory the checkpoint
came from, which the record names). Data workers on, as users run; a real SIGTERM for the mid-epoch checkpoint."""

from __future__ import annotations

import csv
import logging
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import QUICK, InProcessTraining, compose_config

from vit_locality.model.classifier import ViTClassifier
from vit_locality.run.cell import CellInterrupted

CELL = [*QUICK, "trainer.max_epochs=2", "data.num_workers=1", "stats.probe_size=16", "stats.pictures=false"]
NOT_COMPARED = {"start", "timings", "run_name"}  # what a resumed cell records of itself


def _keys(node: Any, prefix: str = "") -> set[str]:
    """Every key path of a record (`metrics.train/acc1`, `attention.final.per_head`), lists taken as values."""
    if not isinstance(node, dict):
        return {prefix}
    paths = set()
    for key, value in node.items():
        if not prefix and key in NOT_COMPARED:
            continue
        paths |= _keys(value, f"{prefix}.{key}" if prefix else str(key))
    return paths


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "attention_stats.csv").open(newline="") as handle:
        return sorted(csv.DictReader(handle), key=lambda row: (int(row["epoch"]), int(row["layer"]), int(row["head"])))


def _same_rows(resumed: list[dict[str, str]], unbroken: list[dict[str, str]]) -> None:
    assert [(r["epoch"], r["step"], r["layer"], r["head"]) for r in resumed] == [
        (r["epoch"], r["step"], r["layer"], r["head"]) for r in unbroken
    ]
    for mine, theirs in zip(resumed, unbroken, strict=True):
        assert {k: float(v) for k, v in mine.items()} == pytest.approx({k: float(v) for k, v in theirs.items()})


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory: pytest.TempPathFactory, trains: InProcessTraining) -> tuple[Path, dict[str, Any]]:
    run_dir = tmp_path_factory.mktemp("unbroken") / "run"
    return run_dir, trains.run_cell_as_train(compose_config(CELL), run_dir)


def test_a_complete_cell_resumed_into_a_new_directory_is_a_whole_cell(
    unbroken: tuple[Path, dict[str, Any]], tmp_path: Path, trains: InProcessTraining
) -> None:
    source, expected = unbroken
    checkpoint = source / "checkpoints" / "last.ckpt"
    run_dir = tmp_path / "elsewhere"
    record = trains.run_cell_as_train(compose_config([*CELL, f"ckpt_path={checkpoint}", "ckpt_mode=resume"]), run_dir)
    assert record["status"] == "complete"
    assert _keys(record) == _keys(expected)  # train/acc1, train/loss_epoch, test_epoch/*, attention.initial, ...
    assert record["metrics"] == pytest.approx(expected["metrics"])
    assert (run_dir / "checkpoints" / "last.ckpt").read_bytes() == checkpoint.read_bytes()
    _same_rows(_rows(run_dir), _rows(source))
    assert record["start"]["history_from"] == str(source.resolve())


def test_a_checkpoint_without_its_directory_resumes_and_says_the_history_is_missing(
    unbroken: tuple[Path, dict[str, Any]], tmp_path: Path, caplog: pytest.LogCaptureFixture, trains: InProcessTraining
) -> None:
    source, expected = unbroken
    lonely = tmp_path / "lonely.ckpt"
    shutil.copy(source / "checkpoints" / "last.ckpt", lonely)
    run_dir = tmp_path / "elsewhere"
    with caplog.at_level(logging.WARNING, logger="vit_locality"):
        record = trains.run_cell_as_train(compose_config([*CELL, f"ckpt_path={lonely}", "ckpt_mode=resume"]), run_dir)
    assert record["start"]["history_from"] is None
    assert "holds the statistics of the epochs after epoch 2 only" in caplog.text
    assert {row["epoch"] for row in _rows(run_dir)} == {"2"}  # the final model, measured again
    assert record["metrics"] == pytest.approx(expected["metrics"])


def test_an_interrupted_checkpoint_resumed_into_a_new_directory_keeps_the_whole_history(
    unbroken: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trains: InProcessTraining
) -> None:
    """SIGTERM mid-epoch 2 (interrupted.ckpt), then the cell resumed from that file into another directory: the
    same figures, record keys and statistics rows as the unbroken run."""
    source, expected = unbroken
    stopped = tmp_path / "stopped"
    real = ViTClassifier.training_step

    def terminated_at_step_6(self: ViTClassifier, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == 6:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, batch, batch_idx)

    monkeypatch.setattr(ViTClassifier, "training_step", terminated_at_step_6)
    with pytest.raises(CellInterrupted):
        trains.run_cell_as_train(compose_config(CELL), stopped)
    monkeypatch.setattr(ViTClassifier, "training_step", real)
    interrupted = stopped / "checkpoints" / "interrupted.ckpt"
    run_dir = tmp_path / "elsewhere"
    record = trains.run_cell_as_train(compose_config([*CELL, f"ckpt_path={interrupted}", "ckpt_mode=resume"]), run_dir)
    assert record["metrics"]["test/acc1"] == expected["metrics"]["test/acc1"]  # bit-exact
    assert record["metrics"] == pytest.approx(expected["metrics"])
    assert _keys(record) == _keys(expected)
    _same_rows(_rows(run_dir), _rows(source))
    assert record["start"]["history_from"] == str(stopped.resolve())
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == expected["steps"]
