"""A cell trains with the user's callbacks and loggers by `_target_` beside its own: Lightning's LearningRateMonitor
puts the learning rate into every logger, TensorBoard (logger=tensorboard) and MLflow (logger=mlflow) write inside the
cell's run directory, and the record holds the entries as given."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from helpers import QUICK, InProcessTraining, compose_config

CELL = [*QUICK, "stats.enabled=false", "startup.print_config=false", "+trainer.limit_train_batches=2"]
LR_MONITOR = (
    "+callbacks.lr_monitor={_target_: lightning.pytorch.callbacks.LearningRateMonitor, logging_interval: epoch}"
)


def _scalar_tags(log_dir: Path) -> set[str]:
    """The scalar figures in a TensorBoard directory's event files, read by TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return set(events.Tags()["scalars"])


def test_a_cell_trains_with_a_user_callback_and_tensorboard(tmp_path: Path, trains: InProcessTraining) -> None:
    run_dir = tmp_path / "run"
    record = trains.run_cell_as_train(compose_config([*CELL, LR_MONITOR, "logger=tensorboard"]), run_dir)
    assert record["status"] == "complete"
    log_dir = run_dir / "tensorboard"
    assert list(log_dir.glob("events.out.tfevents.*")), sorted(p.name for p in run_dir.iterdir())
    tags = _scalar_tags(log_dir)
    assert any(tag.startswith("lr-AdamW") for tag in tags), tags  # the user callback's figure, in the user logger
    assert any(tag.endswith("/acc1") for tag in tags), tags  # and the cell's own
    assert record["config"]["callbacks"]["lr_monitor"] == {
        "_target_": "lightning.pytorch.callbacks.LearningRateMonitor",
        "logging_interval": "epoch",
    }
    assert record["config"]["logger"]["tensorboard"]["save_dir"] is None  # as given; filled in when the cell starts
    assert (run_dir / "csv" / "metrics.csv").is_file()  # the CSV record stays


def test_a_cell_trains_with_mlflow_in_its_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trains: InProcessTraining
) -> None:
    if importlib.util.find_spec("mlflow") is None:
        pytest.skip("mlflow is not installed here: pip install mlflow (or mlflow-skinny) to run this test")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3.x writes a file store only when told so
    run_dir = tmp_path / "run"
    record = trains.run_cell_as_train(compose_config([*CELL, LR_MONITOR, "logger=mlflow"]), run_dir)
    assert record["status"] == "complete"
    runs = list((run_dir / "mlflow").glob("*/*/metrics"))  # <experiment>/<run>/metrics/<figure>
    assert len(runs) == 1, sorted(p.name for p in run_dir.iterdir())
    assert (runs[0] / "lr-AdamW").exists() and (runs[0] / "train" / "loss_epoch").is_file()
