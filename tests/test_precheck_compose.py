"""The pre-check composes every cell with Hydra's public compose API, and hands each cell's run directory name to the
jobs, so `run_name` looks its name up instead of composing a config of its own."""

from __future__ import annotations

import json
from typing import Any

import hydra
import hydra.compose
import pytest
from helpers import CONF
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from vit_locality.precheck import preflight, resolvers
from vit_locality.precheck.names import fitted_name, identity_settings, reference_choices
from vit_locality.precheck.preflight import check_command
from vit_locality.precheck.resolvers import CELL_NAMES_ENV, CellNames, register_resolvers

SHORT = ["data=synthetic", "model=vit_tiny", "trainer.max_steps=2", "stats.probe_size=64"]


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []

    def counting_compose(*args: Any, **kwargs: Any) -> Any:
        calls.append(list(kwargs["overrides"]))
        return compose(*args, **kwargs)

    monkeypatch.setattr(preflight, "compose", counting_compose)
    return calls


def test_each_cell_is_composed_once_and_each_reference_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    assert check_command(["-m", "data=synthetic,cifar10", "optim.lr=1e-3,2e-3,3e-3", "seed=0,1"], CONF) == []
    cells = [c for c in calls if any(o.startswith("optim.lr=") for o in c)]
    assert len(cells) == 12 and len({tuple(c) for c in cells}) == 12
    references = [c for c in calls if c in (["data=synthetic", "model=vit_paper"], ["data=cifar10", "model=vit_paper"])]
    assert len(references) == 2
    assert len(calls) == 12 + 2 + 1  # and the sweep's own config (its fixed overrides)


def test_a_single_run_is_composed_once_and_named_against_one_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    assert check_command([*SHORT, "aug.cutmix=true"], CONF) == []
    assert calls == [[*SHORT, "aug.cutmix=true"], ["data=synthetic", "model=vit_tiny"]]


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


def _named_against_its_reference(cell: list[str]) -> str:
    """The name by its definition: the base and every identity setting that differs from the config of the cell's
    data and model choices alone, that reference composed here."""
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=cell, return_hydra_config=True)
        reference = compose(config_name="train", overrides=list(reference_choices(cfg.hydra.runtime.choices)))
        with open_dict(cfg):
            cfg.pop("hydra")
    return fitted_name(str(cfg.run_name), identity_settings(cfg, reference))  # outside a job run_name is the base


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
def test_the_job_looks_up_the_name_its_reference_gives_without_composing(
    cell: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _named_against_its_reference(cell)
    names = CellNames()
    assert check_command(cell, CONF, names=names) == []
    assert list(names.names.values()) == [expected]
    monkeypatch.setenv(CELL_NAMES_ENV, "")
    names.hand_over()
    assert _resolved_in_a_job(cell, monkeypatch) == expected
    # A cell the pre-check did not list (a search sweeper's trial): named against the handed reference.
    monkeypatch.setenv(CELL_NAMES_ENV, json.dumps({"names": {}, "references": names.references}))
    assert _resolved_in_a_job(cell, monkeypatch) == expected


def test_a_job_no_entry_point_named_shows_its_command_lines_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """No names handed over (a Hydra app of one's own calling `main`): no reference, so every identity setting the
    command line sets is shown, even one equal to its default (optim.lr=0.001)."""
    cell = [*SHORT, "optim.lr=0.001", "data.num_workers=3"]
    monkeypatch.delenv(CELL_NAMES_ENV, raising=False)
    base = _named_against_its_reference(["data=synthetic", "model=vit_tiny"])
    suffix = "_optim.lr-0.001_stats.probe_size-64_trainer.max_steps-2"
    assert _resolved_in_a_job(cell, monkeypatch) == base + suffix
    assert _named_against_its_reference(cell) == base + "_stats.probe_size-64_trainer.max_steps-2"


def test_a_sweeps_names_are_handed_over_for_every_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CELL_NAMES_ENV, "")  # the hand-over below is undone after the test
    names = CellNames()
    assert check_command(["-m", *SHORT, "loss.ls=0,0.1", "trainer.devices=1,2"], CONF, names=names) == []
    assert len(set(names.names.values())) == 4 and list(names.references) == ["data=synthetic model=vit_tiny"]
    monkeypatch.setattr(resolvers, "MAX_HANDED_CHARS", len(json.dumps({"references": names.references})) + 50)
    names.hand_over()  # too many names for the environment: the references alone, from which the job names itself
    handed = json.loads(resolvers.os.environ[CELL_NAMES_ENV])
    assert handed["names"] == {} and handed["references"] == names.references


def test_a_config_without_its_choices_finds_its_name_by_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DDP child composes its cell's saved config.yaml alone (no data or model choice): the name rank 0 has."""
    names = CellNames()
    assert check_command([*SHORT, "optim.lr=0.002"], CONF, names=names) == []
    (name,) = names.names.values()
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*SHORT, "optim.lr=0.002"])
    assert name.endswith("_optim.lr-0.002_stats.probe_size-64_trainer.max_steps-2")
    assert names.name("ignored", cfg, ()) == name
    assert CellNames().name("base", cfg, ()) == "base"  # unlisted and no reference: named against itself


def test_a_schema_refusal_names_the_declared_type() -> None:
    assert check_command(["threads=abc"], CONF) == ["threads='abc' is not allowed: an integer in [1, 1024], or null"]
    assert check_command(["ckpt_mode=bogus"], CONF) == ["ckpt_mode='bogus' is not allowed: one of weights, resume"]


def test_a_resume_is_checked_against_its_checkpoint_in_the_pre_check(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vit_locality.errors import ConfigError
    from vit_locality.precheck import start_check

    checkpoint = tmp_path / "last.ckpt"
    checkpoint.write_bytes(b"not read here")
    asked: list[str] = []

    def refuse(cfg: Any) -> None:
        asked.append(str(cfg.ckpt_mode))
        raise ConfigError("ckpt_mode=resume is not allowed: refused")

    monkeypatch.setattr(start_check, "check_start", refuse)
    assert check_command([*SHORT, f"ckpt_path={checkpoint}"], CONF) == []  # weights: nothing to compare
    assert check_command([*SHORT, f"ckpt_path={checkpoint}", "ckpt_mode=resume"], CONF) == [
        "ckpt_mode=resume is not allowed: refused"
    ]
    assert asked == ["resume"]
