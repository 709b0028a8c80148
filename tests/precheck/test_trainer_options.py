"""Every Lightning Trainer argument is a `trainer.<name>` setting: checked up front against the installed Trainer,
passed to it as given, and part of the run identity when it can change a result. Plus the template's habits:
debug configs, the config tree at start, the rich progress bar and an Optuna search whose objective the cell returns.
"""

from __future__ import annotations

import inspect
import json
import math
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import yaml
from helpers import CONF, QUICK, Spawner, compose_config, typed
from omegaconf import OmegaConf

from vit_locality.config.identity import identity_hash
from vit_locality.config.schema import DECLARED_TRAINER_KEYS
from vit_locality.errors import ConfigError
from vit_locality.precheck.gate import settings_from
from vit_locality.precheck.preflight import check_command
from vit_locality.precheck.trainer_options import RESERVED, check_trainer_options, trainer_parameters
from vit_locality.precheck.tree import config_tree_text
from vit_locality.report.load.run_settings import quick_run
from vit_locality.run.builders import build_trainer
from vit_locality.store.record import RunRecord


def test_parameters_are_the_installed_signature() -> None:
    signature = inspect.signature(L.Trainer.__init__)
    assert set(trainer_parameters()) == set(signature.parameters) - {"self"}
    assert trainer_parameters()["fast_dev_run"].shown == "Union[int, bool]"
    assert (
        "Accelerator" in trainer_parameters()["accelerator"].shown
        and "." not in trainer_parameters()["accelerator"].shown
    )


@pytest.mark.parametrize(
    "name, accepted, refused",
    [
        ("fast_dev_run", [True, 3], ["maybe", 1.5, None]),
        ("limit_train_batches", [2, 0.5, None], ["all", [1]]),
        ("deterministic", [True, "warn", None], ["yes", 1]),  # Literal["warn"]: that one string
        ("max_time", ["00:12:00:00", {"hours": 12}, None], [12, [1]]),
        ("devices", [1, [0, 1], "auto"], [1.5, None]),
    ],
)
def test_values_are_checked_against_the_trainers_own_annotations(name: str, accepted: list, refused: list) -> None:
    for value in accepted:
        check_trainer_options({name: value})
    for value in refused:
        with pytest.raises(ConfigError, match=rf"^trainer\.{name}=.* is not allowed: the Trainer takes "):
            check_trainer_options({name: value})


def test_declared_trainer_keys_are_trainer_arguments() -> None:
    assert set(trainer_parameters()) >= DECLARED_TRAINER_KEYS


def _lightning_loaded_by_check(args: list[str]) -> bool:
    code = (
        "import sys; from vit_locality.precheck.preflight import check_command; "
        "from vit_locality.paths import CONF_DIR; "
        f"assert check_command({args!r}, CONF_DIR) == []; print('lightning' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return out.strip() == "True"


def test_the_trainer_signature_is_read_only_for_other_trainer_settings(spawns: Spawner) -> None:
    """Lightning takes seconds to import: a command with only the declared trainer settings is checked without it."""
    assert not _lightning_loaded_by_check(["data=synthetic", "trainer.max_epochs=3", "trainer=cpu"])
    assert _lightning_loaded_by_check(["data=synthetic", "+trainer.max_steps=3"])
    assert _lightning_loaded_by_check(["trainer=ddp_cpu"])  # a strategy beyond auto: Lightning's connector judges it


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "+trainer.max_step=3",
            "trainer.max_step is not an argument of the installed Lightning Trainer (did you mean max_steps",
        ),
        ("+trainer.max_steps=abc", "trainer.max_steps='abc' is not allowed: the Trainer takes int"),
        ("+trainer.max_steps=-2", "trainer.max_steps=-2 is not allowed: an integer >= -1"),
        ("+trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches=0 is not allowed: an integer >= 1"),
        ("+trainer.fast_dev_run=maybe", "trainer.fast_dev_run='maybe' is not allowed: the Trainer takes"),
        (
            "+trainer.gradient_clip_algorithm=l3",
            "trainer.gradient_clip_algorithm='l3' is not allowed: one of norm, value or null",
        ),
        (
            "+trainer.profiler=fancy",
            "trainer.profiler='fancy' is not allowed: one of simple, advanced, pytorch, xla or null",
        ),
        ("+trainer.val_check_interval=0", "trainer.val_check_interval=0 is not allowed"),
        ("+trainer.overfit_batches=1.5", "trainer.overfit_batches=1.5 is not allowed: null, a count of batches"),
        ("+trainer.logger=false", "trainer.logger is not a setting here: choose loggers with logger=csv|wandb"),
        ("+trainer.enable_checkpointing=false", "trainer.enable_checkpointing is not a setting here"),
    ],
)
def test_a_wrong_trainer_argument_is_one_line_before_anything_runs(override: str, message: str) -> None:
    problems = check_command([*QUICK, override], CONF)
    assert len(problems) == 1 and problems[0].startswith(message), problems


def test_reserved_names_are_real_trainer_arguments() -> None:
    """A reserved name that Lightning dropped would hide a real argument's check: each must exist."""
    assert set(RESERVED) <= set(trainer_parameters())


def test_bool_is_not_an_int_count() -> None:
    with pytest.raises(ConfigError, match="trainer.max_steps=True is not allowed"):
        check_trainer_options({"max_steps": True})
    check_trainer_options({"max_steps": 3, "fast_dev_run": True, "val_check_interval": 0.5, "limit_val_batches": 2})


def test_every_setting_reaches_the_trainer(tmp_path: Path) -> None:
    extra = [
        "++trainer.max_steps=3",
        "+trainer.accumulate_grad_batches=2",
        "+trainer.val_check_interval=0.5",
        "trainer.gradient_clip_val=1.0",
        "+trainer.gradient_clip_algorithm=value",
        "+trainer.limit_test_batches=2",
        "+trainer.min_epochs=1",
        "+trainer.num_sanity_val_steps=0",
    ]
    trainer = build_trainer(settings_from(compose_config([*QUICK, *extra])), tmp_path, loggers=[], callbacks=[])
    assert trainer.max_steps == 3
    assert trainer.accumulate_grad_batches == 2
    assert trainer.val_check_interval == 0.5
    assert (trainer.gradient_clip_val, trainer.gradient_clip_algorithm) == (1.0, "value")
    assert trainer.limit_test_batches == 2
    assert trainer.num_sanity_val_steps == 0
    assert trainer.fit_loop.min_epochs == 1


def test_settings_that_change_results_enter_the_identity() -> None:
    base = identity_hash(typed(QUICK))
    assert identity_hash(typed([*QUICK, "++trainer.max_steps=3"])) != base
    assert identity_hash(typed([*QUICK, "+trainer.accumulate_grad_batches=2"])) != base
    assert identity_hash(typed([*QUICK, "+trainer.profiler=simple"])) == base  # measuring time only
    assert identity_hash(typed([*QUICK, "startup.print_config=false"])) == base


@pytest.mark.parametrize("name", ["fdr", "limit", "overfit", "profiler"])
def test_debug_configs_compose_validate_and_are_quick_runs(name: str) -> None:
    cfg = compose_config(["data=synthetic", "model=vit_tiny", f"debug={name}"])
    settings_from(cfg, machine=False)
    assert cfg.sweep_name == "debug"
    if name != "profiler":
        assert cfg.trainer.accelerator == "cpu"
    if name != "profiler":  # the report leaves these out of any table
        record = RunRecord(Path("."), {"config": OmegaConf.to_container(cfg, resolve=True)})
        assert (
            quick_run(record)
            == {
                "fdr": "trainer.fast_dev_run=true",
                "limit": "trainer.limit_train_batches=3, trainer.limit_val_batches=2, trainer.limit_test_batches=2",
                "overfit": "trainer.overfit_batches=1",
            }[name]
        )
    if name == "overfit":
        assert (cfg.aug.autoaug, cfg.aug.cutmix, cfg.loss.ls) == (False, False, 0.0)  # nothing to stop memorising


def test_config_tree_shows_every_section_with_values() -> None:
    text = config_tree_text(compose_config(QUICK))
    lines = text.splitlines()
    assert lines[0] == "config"
    for section in ("data", "model", "aug", "loss", "optim", "trainer", "stats"):
        assert any(line.strip(" │├└─") == section for line in lines), section
    assert "lr: 0.001" in text and "name: vit_tiny" in text and "hydra" not in text
    assert compose_config(["experiment=demo"]).startup.print_config is False


def test_fast_dev_run_ends_at_once_with_a_record(tmp_path: Path, spawns: Spawner) -> None:
    done = spawns.run_train(
        [*QUICK, "debug=fdr", "trainer.max_epochs=200", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path
    )
    assert done.returncode == 0, done.stderr[-1500:]
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["status"] == "complete" and record["config"]["trainer"]["fast_dev_run"] is True
    assert record["epochs"] == 1  # one batch, not 200 epochs
    assert "config" in done.stdout and "├── data" in done.stdout  # the tree printed at start


def test_rich_progress_bar_runs(tmp_path: Path, spawns: Spawner) -> None:
    args = [*QUICK, "callbacks.progress_bar=rich", "startup.print_config=false", f"hydra.run.dir={tmp_path / 'run'}"]
    done = spawns.run_train(args, tmp_path)
    assert done.returncode == 0, done.stderr[-1500:]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["status"] == "complete"


def test_optuna_search_optimises_the_metric_the_cells_return(tmp_path: Path, spawns: Spawner) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "search"
    quick = [a for a in QUICK if not a.startswith("data.num_workers")]  # data workers on, as users run it
    args = ["-m", "hparams_search=optuna_lr", *quick, "data.train_size=192", "data.val_size=64",
            "hydra.sweeper.n_trials=3", f"hydra.sweep.dir={sweep}", "startup.print_config=false"]  # fmt: skip
    done = spawns.run_train(args, tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(p.read_text()) for p in sweep.glob("*/results.json")]
    assert len(records) == 3 and all(r["status"] == "complete" for r in records)
    assert len({r["config"]["optim"]["lr"] for r in records}) == 3  # three different trials, three directories
    assert all(r["data_fingerprint"]["sizes"]["eval"] == 64 for r in records)  # measured on the held-out split
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    values = [r["metrics"]["val/acc1"] for r in records]
    assert math.isclose(best["best_value"], max(values))
    winner = next(r for r in records if r["metrics"]["val/acc1"] == max(values))
    assert math.isclose(best["best_params"]["optim.lr"], winner["config"]["optim"]["lr"])


@pytest.mark.parametrize("value", ["0", "0.0"])
def test_a_training_limit_that_trains_nothing_is_refused_up_front(value: str) -> None:
    """`trainer.limit_train_batches=0` would record the untrained model's test figures as a complete cell."""
    assert check_command(["data=synthetic", "model=vit_tiny", f"trainer.limit_train_batches={value}"], CONF) == [
        f"trainer.limit_train_batches={value} is not allowed: null, a count of batches >= 1 or a fraction in (0, 1] "
        "(0 trains nothing: no cell)"
    ]


@pytest.mark.parametrize("value", ["1", "0.5", "null", "1.0"])
def test_a_training_limit_that_trains_a_batch_passes(value: str) -> None:
    assert check_command(["data=synthetic", "model=vit_tiny", f"trainer.limit_train_batches={value}"], CONF) == []


def test_no_epoch_limit_is_accepted_when_the_steps_end_the_run() -> None:
    """Lightning's `max_epochs=-1` ("no limit"): accepted with `trainer.max_steps`, which then sets the run's length
    and its learning-rate schedule (the warm-up counts epochs of the loader's steps: tests/model/test_optim.py)."""
    tiny = ["data=synthetic", "model=vit_tiny", "trainer.max_epochs=-1"]
    assert check_command([*tiny, "trainer.max_steps=5"], CONF) == []
    assert check_command(tiny, CONF) == [
        "trainer.max_epochs=-1 is not allowed: an integer >= 1, or -1 (no epoch limit) with trainer.max_steps >= 1 "
        "to end the run"
    ]
    for value in ("0", "-2"):
        (problem,) = check_command([*tiny[:2], f"trainer.max_epochs={value}", "trainer.max_steps=5"], CONF)
        assert problem.startswith(f"trainer.max_epochs={value} is not allowed: an integer >= 1, or -1")
