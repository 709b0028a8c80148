"""User callbacks and loggers by `_target_`, the lightning-hydra-template's form: on the command line
(`+callbacks.<name>._target_=<class>`) or in a YAML file of conf/callbacks or conf/logger, checked by the pre-check
in one line naming the key, kept as given in the record, and built after the cell's own."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from helpers import CONF, QUICK, typed
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from vit_locality.callbacks import build_callbacks

from vit_locality.config import extensions
from vit_locality.config.extensions import DISPLAY_ONLY_CALLBACKS, display_only, user_entries
from vit_locality.precheck.preflight import check_command
from vit_locality.run.builders import build_loggers
from vit_locality.run.checkpoints import IdentityStamp

LR_MONITOR = "lightning.pytorch.callbacks.LearningRateMonitor"
ADD_LR_MONITOR = f"+callbacks.lr_monitor._target_={LR_MONITOR}"


def test_the_pre_check_accepts_a_callback_by_target_and_the_record_holds_it_as_given() -> None:
    assert check_command([*QUICK, ADD_LR_MONITOR, "+callbacks.lr_monitor.logging_interval=step"], CONF) == []
    record = typed([*QUICK, ADD_LR_MONITOR, "+callbacks.lr_monitor.logging_interval=step"]).as_record()
    assert record["callbacks"] == {
        "progress_bar": "none",
        "checkpoint_every_n_epochs": 1,
        "lr_monitor": {"_target_": LR_MONITOR, "logging_interval": "step"},
    }


def test_an_entry_given_whole_is_one_entry() -> None:
    whole = f"+callbacks.lr_monitor={{_target_: {LR_MONITOR}, logging_interval: step}}"
    assert check_command([*QUICK, whole], CONF) == []


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["+callbacks.x._target_=nowhere.Bar"],
            "callbacks.x._target_='nowhere.Bar' is not allowed: it does not import: no module named nowhere",
        ),
        (
            ["+callbacks.x._target_=vit_locality.errors.ConfigError"],
            "callbacks.x._target_='vit_locality.errors.ConfigError' is not allowed: not a Lightning callback "
            "(a subclass of lightning.pytorch.callbacks.Callback)",
        ),
        (
            ["+callbacks.x._target_=lightning.pytorch.callbacks.LearningRateMonitr"],
            "callbacks.x._target_='lightning.pytorch.callbacks.LearningRateMonitr' is not allowed: it does not import: "
            "lightning.pytorch.callbacks has no LearningRateMonitr (did you mean LearningRateMonitor?)",
        ),
        (["+callbacks.x.logging_interval=step"], "callbacks.x._target_: missing (a user callback is a mapping with"),
        (["+callbacks.x._target_=3"], "callbacks.x._target_=3 is not allowed: a dotted class path"),
        (
            [ADD_LR_MONITOR, "+callbacks.lr_monitor.logging_intervl=step"],
            "callbacks.lr_monitor.logging_intervl is not an argument of LearningRateMonitor (did you mean "
            "logging_interval?)",
        ),
        (
            ["+callbacks.stop._target_=lightning.pytorch.callbacks.EarlyStopping"],
            "callbacks.stop.monitor: missing, and EarlyStopping needs it",
        ),
        (
            ["+logger.x._target_=lightning.pytorch.callbacks.LearningRateMonitor"],
            "logger.x._target_='lightning.pytorch.callbacks.LearningRateMonitor' is not allowed: not a Lightning "
            "logger (a subclass of lightning.pytorch.loggers.Logger)",
        ),
        (
            ["+callbacks.x=1"],  # a plain value is no entry: a typo of a declared setting, with the nearest one
            "+callbacks.x: no such setting, and nothing would read it (the nearest real one is callbacks.progress_bar)",
        ),
        (
            ["+logger.wandb.project=x"],  # a declared section's keys stay closed
            "+logger.wandb.project: no such setting, and nothing would read it",
        ),
    ],
)
def test_a_wrong_entry_is_one_line_naming_its_key(overrides: list[str], message: str) -> None:
    problems = check_command([*QUICK, *overrides], CONF)
    assert len(problems) == 1 and problems[0].startswith(message), problems
    assert "\n" not in problems[0]


@pytest.mark.parametrize(
    "target, pointer",
    [
        ("lightning.pytorch.callbacks.ModelCheckpoint", "callbacks.checkpoint_every_n_epochs"),
        ("lightning.pytorch.callbacks.TQDMProgressBar", "callbacks.progress_bar=tqdm|rich|none"),
        ("lightning.pytorch.callbacks.RichProgressBar", "callbacks.progress_bar=tqdm|rich|none"),
    ],
)
def test_a_callback_the_cell_has_its_own_of_is_refused_naming_the_setting(target: str, pointer: str) -> None:
    problems = check_command([*QUICK, f"+callbacks.mine._target_={target}"], CONF)
    assert len(problems) == 1 and problems[0].startswith(f"callbacks.mine._target_='{target}' is not allowed: ")
    assert pointer in problems[0], problems


def test_trainer_callbacks_is_refused_pointing_to_the_callbacks_section() -> None:
    assert check_command([*QUICK, "+trainer.callbacks=[]"], CONF) == [
        "trainer.callbacks is not a setting here: add each callback as +callbacks.<name>._target_=<class> "
        "(docs/training.md)"
    ]


def test_a_wandb_logger_entry_is_refused_for_logger_wandb() -> None:
    problems = check_command([*QUICK, "+logger.wb._target_=lightning.pytorch.loggers.WandbLogger"], CONF)
    assert len(problems) == 1 and "W&B is logger=wandb" in problems[0], problems


def test_a_logger_whose_package_is_missing_is_refused_up_front(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    hidden = ("tensorboard", "tensorboardX")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in hidden else real(name, *a))
    problems = check_command([*QUICK, "logger=tensorboard"], CONF)
    assert problems == [
        "logger.tensorboard._target_='lightning.pytorch.loggers.TensorBoardLogger' is not allowed: it needs "
        "tensorboard or tensorboardX installed (pip install tensorboard)"
    ]


@pytest.mark.parametrize("overrides", [["callbacks=lr_monitor"], ["logger=tensorboard"], ["logger=mlflow"]])
def test_the_example_files_compose_and_keep_the_cells_own_settings(overrides: list[str]) -> None:
    if overrides == ["logger=mlflow"] and importlib.util.find_spec("mlflow") is None:
        pytest.skip("mlflow is not installed here: the gate refuses logger=mlflow without it")
    assert check_command([*QUICK, *overrides], CONF) == []
    record = typed([*QUICK, *overrides]).as_record()
    assert {k: record["callbacks"][k] for k in ("progress_bar", "checkpoint_every_n_epochs")} == {
        "progress_bar": "none",
        "checkpoint_every_n_epochs": 1,
    }
    assert record["logger"]["wandb"] is None
    section = "callbacks" if overrides[0].startswith("callbacks") else "logger"
    assert len(user_entries(record[section])) == 1


def test_an_entry_from_a_file_can_be_changed_and_switched_off() -> None:
    assert check_command([*QUICK, "callbacks=lr_monitor", "+callbacks.lr_monitor.log_momentum=true"], CONF) == []
    switched_off = typed([*QUICK, "callbacks=lr_monitor", "callbacks.lr_monitor=null"])
    assert switched_off.callbacks.user_entries() == {}


def test_user_entries_are_the_mappings_with_a_target() -> None:
    section = {"progress_bar": "tqdm", "off": None, "plain": {"a": 1}, "lr": {"_target_": LR_MONITOR, "x": 1}}
    assert user_entries(section) == {"lr": {"_target_": LR_MONITOR, "x": 1}}


@pytest.mark.parametrize(
    "target, shows_only",
    [
        (LR_MONITOR, True),
        ("lightning.pytorch.callbacks.lr_monitor.LearningRateMonitor", True),
        ("pytorch_lightning.callbacks.LearningRateMonitor", True),
        ("pytorch_lightning.callbacks.model_summary.ModelSummary", True),
        ("lightning.pytorch.callbacks.DeviceStatsMonitor", True),
        ("lightning.pytorch.callbacks.RichModelSummary", True),
        ("lightning.pytorch.callbacks.EarlyStopping", False),
        ("lightning.pytorch.callbacks.Timer", False),  # with a duration it stops the fit, as trainer.max_time does
        ("lightning.pytorch.callbacks.StochasticWeightAveraging", False),
        ("lightning.pytorch.callbacks.NoSuchCallback", False),
        ("my_project.callbacks.LearningRateMonitor", False),  # the user's own class may do anything
    ],
)
def test_display_only_callbacks_in_any_spelling(target: str, shows_only: bool) -> None:
    assert display_only(target) is shows_only
    assert all(display_only(known) for known in DISPLAY_ONLY_CALLBACKS)


def test_user_callbacks_come_after_the_cells_own(tmp_path: Path) -> None:
    settings = typed([*QUICK, ADD_LR_MONITOR, "+callbacks.lr_monitor.logging_interval=step"])
    callbacks = build_callbacks(settings, tmp_path)
    assert isinstance(callbacks[-1], LearningRateMonitor) and callbacks[-1].logging_interval == "step"
    assert any(isinstance(callback, IdentityStamp) for callback in callbacks[:-1])
    assert len(callbacks) == len(build_callbacks(typed(QUICK), tmp_path)) + 1


def test_a_user_logger_told_no_directory_writes_in_the_run_directory(tmp_path: Path) -> None:
    settings = typed([*QUICK, "logger=tensorboard", "+logger.other._target_=lightning.pytorch.loggers.CSVLogger"])
    csv, tensorboard, other = build_loggers(settings, tmp_path / "run")
    assert isinstance(tensorboard, TensorBoardLogger) and isinstance(other, CSVLogger)
    assert Path(tensorboard.log_dir) == tmp_path / "run" / "tensorboard"
    assert Path(other.save_dir) == tmp_path / "run" / "other"
    given = typed([*QUICK, "logger=tensorboard", f"logger.tensorboard.save_dir={tmp_path / 'elsewhere'}"])
    assert Path(build_loggers(given, tmp_path / "run")[1].log_dir) == tmp_path / "elsewhere"
    assert extensions.filled_directories({"_target_": LR_MONITOR}, "x") == {}  # no directory argument: none filled
