"""Run directory names: one value, one spelling; a setting equal to its default is the same cell; the last of two
overrides of a key wins; long names are shortened to fit, readably and never shared by two different cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import QUICK, compose_config, run_train

from vit_locality.config.identity import (
    MAX_NAME_CHARS,
    canonical_text,
    config_lookup,
    fitted_name,
    identity_hash,
    named_settings,
)
from vit_locality.config.preflight import check_command
from vit_locality.paths import CONF_DIR

BASE = "synthetic_vit_tiny_aa1_cm1_ls0.1_s0"
# Ten ordinary tuning settings: with QUICK's four, a name of more than 255 bytes before names were fitted.
TUNING = [
    "optim.lr=0.002",
    "optim.weight_decay=0.1",
    "optim.warmup_epochs=2",
    "optim.min_lr_ratio=0.01",
    "optim.betas=[0.9,0.95]",
    "aug.cutmix_alpha=0.8",
    "aug.cutmix_prob=0.5",
    "aug.policy=cifar10",
    "data.noise=0.1",
    "data.split_seed=1",
]


def name_of(overrides: list[str]) -> str:
    """The name the job's `${cell_name:...}` gives, from the composed config and the defaults of its groups."""
    cfg = compose_config(overrides)
    groups = [o for o in overrides if "." not in o.split("=")[0]]
    defaults = compose_config(groups)
    return fitted_name(str(cfg.run_name), named_settings(overrides, config_lookup(cfg), config_lookup(defaults)))


def test_ten_tuning_settings_fit_and_keep_what_fits_readable() -> None:
    name = name_of(["data=synthetic", "model=vit_tiny", *QUICK, *TUNING])
    assert len(name) <= MAX_NAME_CHARS and name.startswith(BASE + "_aug.cutmix_alpha-0.8")
    assert name.rsplit("_", 1)[1].startswith("hash-")


def test_a_300_character_value_and_a_long_float_are_shortened() -> None:
    assert len(fitted_name(BASE, {"aug.policy": "x" * 300})) <= MAX_NAME_CHARS
    optuna_like = named_settings(["optim.lr=0.00012345678901234567", "aug.cutmix_alpha=1.2345678901234567"])
    assert canonical_text(0.00012345678901234567) in optuna_like.values()  # every digit, or two trials could meet
    assert len(fitted_name(BASE, {**optuna_like, "model.stem": "y" * 100})) <= MAX_NAME_CHARS


def test_different_settings_never_share_a_name() -> None:
    long_value = "v" * 200
    names = {
        fitted_name(BASE, {"aug.policy": long_value}),
        fitted_name(BASE, {"aug.policy": long_value + "w"}),
        fitted_name(BASE, {"aug.policy": long_value, "optim.lr": "0.002"}),
        fitted_name(BASE, {"optim.lr": "0.002", "zz.extra": long_value}),
        fitted_name(BASE, {"optim.lr": "0.003", "zz.extra": long_value}),
        fitted_name(BASE + "x", {"aug.policy": long_value}),
    }
    assert len(names) == 6 and all(len(name) <= MAX_NAME_CHARS for name in names)
    assert fitted_name(BASE, {"aug.policy": long_value}) == fitted_name(BASE, {"aug.policy": long_value})


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (["optim.lr=1e-3"], ["optim.lr=0.001"]),
        (["data.period=4"], ["data.period=4.0"]),
        (["optim.lr=0.001"], []),  # equal to its default: not named, the same cell as without it
        (["trainer.max_epochs=7", "trainer.max_epochs=1"], ["trainer.max_epochs=1"]),  # the last one wins
        (["stats.enabled=True"], ["stats.enabled=true"]),
    ],
)
def test_one_value_one_name_one_identity(one: list[str], other: list[str]) -> None:
    base = ["data=synthetic", "model=vit_tiny"]
    assert name_of([*base, *one]) == name_of([*base, *other])
    assert identity_hash(compose_config([*base, *one])) == identity_hash(compose_config([*base, *other]))


def test_a_setting_different_from_its_default_is_named_in_its_canonical_spelling() -> None:
    assert name_of(["data=synthetic", "optim.lr=3e-3"]).endswith("_optim.lr-0.003")
    assert named_settings(["trainer.max_epochs=abc", "trainer.max_epochs=2"]) == {"trainer.max_epochs": "2"}


def test_the_readme_flags_of_a_cell_find_the_protocol_cell_again() -> None:
    """`protocol=baseline` gives loss.ls 0.0; the README's flags for that cell say `loss.ls=0`."""
    preset = ["data=synthetic", "model=vit_tiny", "protocol=baseline"]
    flags = ["data=synthetic", "model=vit_tiny", "aug.autoaug=false", "aug.cutmix=false", "loss.ls=0"]
    assert name_of(preset) == name_of(flags)
    assert identity_hash(compose_config(preset)) == identity_hash(compose_config(flags))


@pytest.mark.parametrize("sweep", ["loss.ls=0,0.0", "data.period=4,4.0", "optim.lr=1e-3,0.001"])
def test_a_sweep_over_two_spellings_of_one_value_is_refused_as_one_cell(sweep: str) -> None:
    problems = check_command(["-m", "data=synthetic", "model=vit_tiny", sweep], CONF_DIR)
    assert len(problems) == 1 and "are one cell" in problems[0] and "give each value once" in problems[0]


@pytest.mark.slow
def test_ten_tuning_settings_train_into_a_fitted_directory_with_the_full_settings_recorded(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", *QUICK, *TUNING, "stats.enabled=false", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = [p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(run_dir.name) <= MAX_NAME_CHARS and "_hash-" in run_dir.name
    config = json.loads((run_dir / "results.json").read_text())["config"]
    assert config["optim"]["betas"] == [0.9, 0.95] and config["data"]["split_seed"] == 1
    again = run_train(
        ["-m", *QUICK, *TUNING, "stats.enabled=false", "optim.lr=2e-3", f"hydra.sweep.dir={sweep}"], cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "complete already: skipped" in again.stdout + again.stderr
    assert [p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")] == [run_dir]
