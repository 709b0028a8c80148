"""Run directory names: one value, one spelling; the identity hash in every name tells cells apart, and a directory
of the same identity already there is the cell's whatever it is named; the last of two overrides of a key wins; long
names are shortened to fit, readably and never shared by two different cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import QUICK, Spawner, compose_config, typed
from hydra import compose, initialize_config_dir

from vit_locality.config.identity import canonical_text, identity_hash
from vit_locality.config.settings import RunSettings
from vit_locality.paths import CONF_DIR
from vit_locality.precheck.gate import resolved
from vit_locality.precheck.names import ID_SUFFIX, MAX_NAME_CHARS, cell_name, fitted_name, named_settings
from vit_locality.precheck.preflight import check_command
from vit_locality.precheck.resolvers import register_resolvers

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


def name_of(overrides: list[str], parent: Path | None = None) -> str:
    """The name the job's `${cell_name:...}` gives: from the cell's own validated config and its overrides."""
    cfg = compose_config(overrides)
    return cell_name(str(cfg.run_name), overrides, RunSettings.from_values(resolved(cfg)), parent)


def id_of(name: str) -> str:
    match = ID_SUFFIX.search(name)
    assert match is not None, name
    return match.group(1)


def test_ten_tuning_settings_fit_and_keep_what_fits_readable() -> None:
    overrides = ["data=synthetic", "model=vit_tiny", *QUICK, *TUNING]
    name = name_of(overrides)
    assert len(name) <= MAX_NAME_CHARS and name.startswith(BASE + "_aug.cutmix_alpha-0.8")
    assert name.endswith("_id-" + identity_hash(typed(overrides))[:8])


def test_a_300_character_value_and_a_long_float_are_shortened() -> None:
    assert len(fitted_name(BASE, {"aug.policy": "x" * 300}, "0" * 16)) <= MAX_NAME_CHARS
    optuna_like = named_settings(["optim.lr=0.00012345678901234567", "aug.cutmix_alpha=1.2345678901234567"])
    assert canonical_text(0.00012345678901234567) in optuna_like.values()  # every digit, or two trials could meet
    assert len(fitted_name(BASE, {**optuna_like, "model.stem": "y" * 100}, "0" * 16)) <= MAX_NAME_CHARS


def test_different_cells_never_share_a_name() -> None:
    """The identity hash ends every name: cells whose readable parts are cut alike still differ."""
    base = ["data=synthetic", "model=vit_tiny", *TUNING]
    names = {name_of([*base, f"data.generator_seed={seed}"]) for seed in range(5)}
    assert len(names) == 5 and all(len(name) <= MAX_NAME_CHARS for name in names)
    assert name_of(base) == name_of(base)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (["optim.lr=1e-3"], ["optim.lr=0.001"]),
        (["data.period=4"], ["data.period=4.0"]),
        (["optim.lr=0.001"], []),  # equal to its default: the same cell as without it
        (["trainer.max_epochs=7", "trainer.max_epochs=1"], ["trainer.max_epochs=1"]),  # the last one wins
        (["stats.enabled=True"], ["stats.enabled=true"]),
    ],
)
def test_one_value_one_identity_one_directory(one: list[str], other: list[str], tmp_path: Path) -> None:
    """However a value is typed (or left at its default), one identity; its directory, once made, is found again."""
    base = ["data=synthetic", "model=vit_tiny"]
    assert id_of(name_of([*base, *one])) == id_of(name_of([*base, *other]))
    assert identity_hash(typed([*base, *one])) == identity_hash(typed([*base, *other]))
    (tmp_path / name_of([*base, *one])).mkdir()
    assert name_of([*base, *other], tmp_path) == name_of([*base, *one])


def test_a_setting_the_command_sets_is_named_in_its_canonical_spelling() -> None:
    assert "_optim.lr-0.003_id-" in name_of(["data=synthetic", "optim.lr=3e-3"])
    assert named_settings(["trainer.max_epochs=abc", "trainer.max_epochs=2"]) == {"trainer.max_epochs": "2"}


def test_the_readme_flags_of_a_cell_find_the_protocol_cell_again() -> None:
    """`protocol=baseline` gives loss.ls 0.0; the README's flags for that cell say `loss.ls=0`."""
    preset = ["data=synthetic", "model=vit_tiny", "protocol=baseline"]
    flags = ["data=synthetic", "model=vit_tiny", "aug.autoaug=false", "aug.cutmix=false", "loss.ls=0"]
    assert name_of(preset) == name_of(flags)
    assert identity_hash(typed(preset)) == identity_hash(typed(flags))


@pytest.mark.parametrize("sweep", ["loss.ls=0,0.0", "data.period=4,4.0", "optim.lr=1e-3,0.001"])
def test_a_sweep_over_two_spellings_of_one_value_is_refused_as_one_cell(sweep: str) -> None:
    problems = check_command(["-m", "data=synthetic", "model=vit_tiny", sweep], CONF_DIR)
    assert len(problems) == 1 and "are one cell" in problems[0] and "give each value once" in problems[0]


def test_ten_tuning_settings_train_into_a_fitted_directory_with_the_full_settings_recorded(
    tmp_path: Path, spawns: Spawner
) -> None:
    sweep = tmp_path / "sweep"
    proc = spawns.run_train(["-m", *QUICK, *TUNING, "stats.enabled=false", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = [p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(run_dir.name) <= MAX_NAME_CHARS and ID_SUFFIX.search(run_dir.name)
    config = json.loads((run_dir / "results.json").read_text())["config"]
    assert config["optim"]["betas"] == [0.9, 0.95] and config["data"]["split_seed"] == 1
    again = spawns.run_train(
        ["-m", *QUICK, *TUNING, "stats.enabled=false", "optim.lr=2e-3", f"hydra.sweep.dir={sweep}"], cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "complete already: skipped" in again.stdout + again.stderr
    assert [p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")] == [run_dir]


def job_name(overrides: list[str]) -> str:
    """The run directory's name as a Hydra job resolves `run_name`, with Hydra's record of the job set (as in
    train.py); the pre-check passes the command first, as `cli` runs it."""
    from hydra.core.hydra_config import HydraConfig

    assert check_command(["-m", *overrides], CONF_DIR) == []
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        try:
            return str(cfg.run_name)
        finally:
            HydraConfig.instance().cfg = None


SHORT = ["trainer.max_steps=2", "stats.probe_size=64"]
DEMO_BY_HAND = [
    "data=glyphs",
    "model=vit_tiny_sincos",
    "data.train_size=4000",
    "data.test_size=1000",
    "data.batch_size=32",
    "data.min_height=0.6",
    "data.max_height=0.8",
    "trainer.max_epochs=10",
    "optim.lr=2e-3",
    "optim.warmup_epochs=1",
]


def test_the_process_count_reaches_the_name() -> None:
    """Two processes mix their own halves of a batch: another cell, so another directory."""
    one = job_name(["data=synthetic", "model=vit_tiny", *SHORT])
    two = job_name(["data=synthetic", "model=vit_tiny", *SHORT, "trainer.devices=2"])
    assert id_of(one) != id_of(two) and one.endswith(f"_s0_trainer.max_steps-2_id-{id_of(one)}")
    assert identity_hash(typed(["data=synthetic", "model=vit_tiny", *SHORT, "trainer.devices=2"])) != (
        identity_hash(typed(["data=synthetic", "model=vit_tiny", *SHORT]))
    )


def test_what_an_experiment_sets_reaches_the_name_and_equal_identities_share_it() -> None:
    demo = job_name(["experiment=demo", *SHORT])
    assert demo != job_name(["data=glyphs", "model=vit_tiny_sincos", *SHORT])  # other settings, other directory
    assert id_of(demo) == id_of(job_name([*DEMO_BY_HAND, *SHORT]))  # the demo's values typed by hand: the same cell
    assert identity_hash(typed(["experiment=demo", *SHORT])) == identity_hash(typed([*DEMO_BY_HAND, *SHORT]))
    assert id_of(demo) != id_of(job_name([*DEMO_BY_HAND[:-1], *SHORT]))  # one of them left out: not the same cell


def test_a_preset_is_named_by_what_it_sets() -> None:
    """`debug=overfit` changes the batch size and the learning rate: never the directory of the plain cell."""
    assert job_name(["debug=overfit", "data=synthetic"]) != job_name(["data=synthetic", "protocol=baseline"])
    assert job_name(["protocol=baseline", "data=synthetic"]) == job_name(
        ["data=synthetic", "aug.autoaug=false", "aug.cutmix=false", "loss.ls=0"]
    )


def test_the_sweep_check_names_a_cell_as_the_job_does() -> None:
    """The pre-check's names (names.cell_name from the cell's config) are the job's: two cells of one sweep that
    differ only in the devices are two directories, not one refused."""
    assert check_command(["-m", "data=synthetic", "model=vit_tiny", *SHORT, "trainer.devices=1,2"], CONF_DIR) == []


def test_a_refused_directory_names_an_override_that_runs_the_cell(tmp_path: Path, spawns: Spawner) -> None:
    """A single run refused its directory (it holds a complete run of another config) is told what to type; typed,
    the advice runs the cell elsewhere, the other run untouched."""
    args = [*QUICK, "trainer.max_steps=2", "stats.enabled=false"]
    first = spawns.run_train(args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs").iterdir()
    results = run_dir / "results.json"
    record = json.loads(results.read_text())
    record["identity_hash"] = "0" * 16  # as a run of another config would have left it
    results.write_text(json.dumps(record))
    refused = spawns.run_train(args, cwd=tmp_path)
    assert refused.returncode == 2
    line = next(line for line in (refused.stdout + refused.stderr).splitlines() if "different config" in line)
    advice = line.rsplit(" add ", 1)[1].strip()
    assert advice.startswith("hydra.run.dir=")
    followed = spawns.run_train([*args, advice], cwd=tmp_path)
    assert followed.returncode == 0, followed.stderr[-3000:]
    assert json.loads(results.read_text())["identity_hash"] == "0" * 16
    followed_dir = tmp_path / advice.split("=", 1)[1]  # as typed where the command ran (relative or absolute)
    assert json.loads((followed_dir / "results.json").read_text())["status"] == "complete"
