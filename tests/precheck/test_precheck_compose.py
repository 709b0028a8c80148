"""A single run is composed twice: by the pre-check (Hydra's compose API) and by Hydra for its job, which gets the
pre-check's settings and run directory. A sweep of N cells N + 1 times: Hydra's config of the command, and each cell
once by the sweeper (plugins/sweeper.py), which checks it and hands that config to its launcher. A cell's settings are
validated once, in the launching process, whatever the launcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
import hydra.compose
import pytest
from helpers import CONF, QUICK, Spawner
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig

from vit_locality.precheck import command_line, composer
from vit_locality.precheck.preflight import check_command, plan_command
from vit_locality.precheck.resolvers import register_resolvers
from vit_locality.sweep.command import CommandContext, run_dirs_of

SHORT = ["data=synthetic", "model=vit_tiny", "trainer.max_steps=2", "stats.probe_size=64"]


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []

    def counting_compose(*args: Any, **kwargs: Any) -> Any:
        calls.append(list(kwargs["overrides"]))
        return compose(*args, **kwargs)

    for module in (command_line, composer):  # a cell's config; a launcher's or sweeper's own options
        monkeypatch.setattr(module, "compose", counting_compose)
    return calls


def test_each_cell_is_composed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    assert check_command(["-m", "data=synthetic,cifar10", "optim.lr=1e-3,2e-3,3e-3", "seed=0,1"], CONF) == []
    cells = [c for c in calls if any(o.startswith("optim.lr=") for o in c)]
    assert len(cells) == 12 and len({tuple(c) for c in cells}) == 12
    assert len(calls) == 12 + 1  # and the sweep's own config (its fixed overrides), no reference


def test_a_single_run_is_composed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    assert check_command([*SHORT, "aug.cutmix=true"], CONF) == []
    assert calls == [[*SHORT, "aug.cutmix=true"]]


def test_an_addition_is_composed_without_it_to_find_what_it_creates(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    problems = check_command(["data=synthetic", "+optim.momentum=0.9"], CONF)
    assert problems == [
        "+optim.momentum: no such setting, and nothing would read it (the nearest real one is optim.betas)"
    ]
    assert ["data=synthetic"] in calls
    calls.clear()
    assert check_command(["data=synthetic", "+trainer.max_steps=3"], CONF) == []  # a Trainer argument: none
    assert ["data=synthetic"] not in calls


@pytest.mark.parametrize(
    ("value", "shown"), [("yes", "'yes'"), ("2", "2"), ("on", "'on'"), ("1.0", "1.0"), ("'true'", "'true'")]
)
def test_a_flag_coerced_by_omegaconf_is_refused(value: str, shown: str) -> None:
    assert check_command([f"aug.cutmix={value}"], CONF) == [f"aug.cutmix={shown} is not allowed: true or false"]


@pytest.mark.parametrize(
    "args",
    [
        ["aug.cutmix=false"],
        ["aug.cutmix=${aug.autoaug}"],  # an interpolation: what it points at is a flag
        ["data=synthetic", "+trainer.fast_dev_run=1"],  # not a schema flag: Lightning reads 1 as one batch
        ["stats.enabled=true", "aug.autoaug=False"],
    ],
)
def test_flags_and_values_that_are_not_flags_pass(args: list[str]) -> None:
    assert check_command(args, CONF) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["+seed=3"], "+seed: seed is set already; drop the + to change it, or use ++seed= either way"),
        (["~seed=5"], "~seed=5: nothing to delete (seed has another value)"),
        (["~logger.wandb"], "~logger.wandb: nothing to delete (logger.wandb is null or absent)"),
        (["~stats.pictures"], "stats.pictures: missing, and the run needs it (deleted with ~stats.pictures?)"),
    ],
)
def test_hydras_refusals_are_one_line(args: list[str], message: str) -> None:
    assert check_command(args, CONF) == [message]


CELLS = [
    [*SHORT],
    [*SHORT, "trainer.devices=2"],
    ["data=glyphs", "model=vit_tiny_sincos", "data.train_size=4000", "trainer.max_steps=2"],
    ["protocol=baseline", "data=synthetic"],
    ["debug=overfit", "data=synthetic"],
    [*SHORT, "optim.lr=0.001"],  # equal to its default
]


def _resolved_in_a_job(cell: list[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """`run_name` as the job resolves it, with Hydra's compose API out of reach of the resolver."""
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=cell, return_hydra_config=True)

    def no_composition(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the resolver composed a config")

    HydraConfig.instance().set_config(cfg)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(hydra, "compose", no_composition)
            patch.setattr(hydra.compose, "compose", no_composition, raising=False)
            return str(cfg.run_name)
    finally:
        HydraConfig.instance().cfg = None


@pytest.mark.parametrize("cell", CELLS, ids=[" ".join(c)[-50:] for c in CELLS])
def test_the_job_names_its_cell_as_the_pre_check_did_without_composing(
    cell: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # outputs/ here (outputs/debug/ for a debug preset): where a single run lives
    checked = plan_command(cell, CONF)
    assert checked.problems == []
    plans = [checked.plan]
    (run_dir,) = plans[0].run_dirs.values()
    assert run_dir.parts[0] == "outputs" and _resolved_in_a_job(cell, monkeypatch) == run_dir.name


COUNTER = Path(__file__).parents[1] / "compose_counter"
LAUNCHERS = ["hydra/launcher=basic", "hydra/launcher=joblib"]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_four_cell_sweep_is_composed_five_times(
    launcher: str, tmp_path: Path, spawns: Spawner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted by wrapping Hydra's config loader in every process (the launcher's workers too): the command's own
    config and each cell once, N + 1; each cell's settings are validated once, in the launching process, and reach
    its job there or in a joblib worker."""
    counted = tmp_path / "compositions"
    monkeypatch.setenv("COMPOSE_COUNT_FILE", str(counted))
    monkeypatch.setenv("PYTHONPATH", f"{COUNTER}:{__import__('os').environ.get('PYTHONPATH', '')}")
    sweep = ["aug.cutmix=true,false", "loss.ls=0,0.1", "+trainer.fast_dev_run=true", "stats.enabled=false"]
    proc = spawns.run_train(["-m", *QUICK, *sweep, launcher, f"hydra.sweep.dir={tmp_path / 's'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(counted.read_text().splitlines()) == 4 + 1
    validated = Path(f"{counted}.validated").read_text().split()
    assert len(validated) == 4 and len(set(validated)) == 1  # the launching process's check, nowhere else
    counted.unlink()
    Path(f"{counted}.validated").unlink()
    single = spawns.run_train([*QUICK, "+trainer.fast_dev_run=true", "stats.enabled=false"], cwd=tmp_path)
    assert single.returncode == 0, single.stderr[-3000:]
    assert len(counted.read_text().splitlines()) == 2
    assert len(Path(f"{counted}.validated").read_text().split()) == 1


def test_a_schema_refusal_names_the_declared_type() -> None:
    assert check_command(["threads=abc"], CONF) == ["threads='abc' is not allowed: an integer in [1, 1024], or null"]
    assert check_command(["ckpt_mode=bogus"], CONF) == ["ckpt_mode='bogus' is not allowed: one of weights, resume"]


def test_a_resume_is_checked_against_its_checkpoint_in_the_pre_check(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vit_locality.errors import ConfigError
    from vit_locality.precheck import gate

    checkpoint = tmp_path / "last.ckpt"
    checkpoint.write_bytes(b"not read here")
    asked: list[str] = []

    def refuse(cfg: Any) -> None:
        asked.append(str(cfg.ckpt_mode))
        raise ConfigError("ckpt_mode=resume is not allowed: refused")

    monkeypatch.setattr(gate, "check_start", refuse)
    assert check_command([*SHORT, f"ckpt_path={checkpoint}"], CONF) == []  # weights: nothing to compare
    assert check_command([*SHORT, f"ckpt_path={checkpoint}", "ckpt_mode=resume"], CONF) == [
        "ckpt_mode=resume is not allowed: refused"
    ]
    assert asked == ["resume"]


def test_a_slurm_sweep_follows_each_cell_in_the_directory_the_pre_check_named(tmp_path: Path) -> None:
    """The launching process names each SLURM job's cell from the pre-check's directories: looked up by the overrides
    Hydra's sweeper hands the job (the task's only, a repeated key once), not the command line's."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from vit_locality.sweep import slurm_launcher

    sweep = ["aug.cutmix=true,false", "loss.ls=0,0.1", "data.train_size=128", "data.train_size=96"]
    slurm = ["hydra/launcher=slurm", "hydra.launcher.partition=debug", f"hydra.sweep.dir={tmp_path / 's'}"]
    checked = plan_command(["-m", *QUICK, *sweep, *slurm], CONF)
    assert checked.problems == [] and checked.plan is not None
    # What the entry point hands the launching process (sweep/command.py), read back as the launcher reads it.
    context = CommandContext.from_json(CommandContext("id", run_dirs=run_dirs_of(checked.plan.run_dirs)).to_json())
    (batch,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides([*QUICK, *sweep]), None)
    followed = [slurm_launcher.tracked(None, job, context.run_dir_index()) for job in batch]
    assert len(batch) == 4 and all(cell.run_dir is not None for cell in followed)
    assert len({cell.run_dir for cell in followed}) == 4 and all("train_size-96" in cell.name for cell in followed)
