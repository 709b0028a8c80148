"""A figure measured on the test set is never called validation.

Per-epoch figures are `test_epoch/*` when the evaluation split is the test set (data.val_size=0, the paper's
protocol) and `val/*` only with a held-out split; a search never selects on the test set: it is refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import QUICK, InProcessTraining, compose_config

from vit_locality.config.settings import eval_prefix, selection_problem
from vit_locality.errors import ConfigError
from vit_locality.precheck.gate import settings_from

TEST_SET_LINE = "optimized_metric=val/acc1 needs data.val_size > 0: the evaluation split is the test set"


def test_the_split_names_the_figures() -> None:
    assert eval_prefix(0) == "test_epoch" and eval_prefix(500) == "val"


@pytest.mark.parametrize(
    ("metric", "val_size", "problem"),
    [
        ("val/acc1", 0, TEST_SET_LINE),
        ("val/acc1", 500, None),
        (
            "test/acc1",
            500,
            "optimized_metric=test/acc1 is measured on the test set: select on val/* with data.val_size > 0",
        ),
        ("test_epoch/loss", 0, "optimized_metric=test_epoch/loss is measured on the test set: select on val/*"),
        ("train/acc1", 0, None),
        ("min_mad_early", 0, None),
    ],
)
def test_selecting_on_the_test_set_is_refused(metric: str, val_size: int, problem: str | None) -> None:
    found = selection_problem(metric, val_size)
    assert found == problem if problem is None else found.startswith(problem)


def test_a_search_on_val_without_a_held_out_split_is_one_line() -> None:
    """The user's command: `hparams_search=optuna_lr data.val_size=0` (optimized_metric=val/acc1)."""
    cfg = compose_config(["data=synthetic", "model=vit_tiny", "hparams_search=optuna_lr", "data.val_size=0"])
    with pytest.raises(ConfigError) as caught:
        settings_from(cfg, machine=False)
    assert str(caught.value) == TEST_SET_LINE
    settings_from(compose_config(["data=synthetic", "model=vit_tiny", "hparams_search=optuna_lr"]), machine=False)


@pytest.mark.parametrize(("val_size", "prefix", "absent"), [(0, "test_epoch", "val"), (64, "val", "test_epoch")])
def test_a_run_logs_its_split_by_name(
    tmp_path: Path, val_size: int, prefix: str, absent: str, trains: InProcessTraining
) -> None:
    cfg = compose_config([*QUICK, "stats.enabled=false", f"data.val_size={val_size}"])
    record = trains.run_cell_as_train(cfg, tmp_path / "run")
    metrics = record["metrics"]
    assert {f"{prefix}/acc1", f"{prefix}/loss", "test/acc1"} <= set(metrics)
    assert not any(key.startswith(f"{absent}/") for key in metrics)
    assert record["measured_on"]["eval_split"] == ("val" if val_size else "test")
