"""Every config under conf/ composes; names, presets and value checks behave as documented."""

from __future__ import annotations

import json
import typing

import pytest
from helpers import CONF, Spawner, compose_config, typed
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from vit_locality.config.identity import identity_hash
from vit_locality.config.schema import StatsConfig
from vit_locality.errors import ConfigError
from vit_locality.precheck.gate import settings_from
from vit_locality.precheck.preflight import check_command
from vit_locality.precheck.refusals import no_such_setting, schema_keys

GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir())


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml") if not p.stem.startswith("_"))  # _*: shared bases


@pytest.mark.parametrize(
    "override", [f"{g}={o}" for g in GROUPS for o in _options(g)], ids=lambda s: s.replace("=", "-")
)
def test_every_config_composes_and_validates(override: str) -> None:
    cfg = compose_config([override])
    OmegaConf.resolve(cfg)  # every interpolation resolves
    gpus_asked = cfg.trainer.accelerator in ("gpu", "cuda")
    settings_from(cfg, machine=not gpus_asked or _has_cuda())  # a GPU config is compared with a machine that has GPUs


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_default_is_paper_vit_modern_cifar100() -> None:
    cfg = typed()
    assert (cfg.data.name, cfg.model.name) == ("cifar100", "vit_paper")
    assert (cfg.model.depth, cfg.model.dim, cfg.model.heads, cfg.model.mlp_ratio) == (8, 192, 8, 2.0)
    assert (cfg.aug.autoaug, cfg.aug.cutmix, cfg.loss.ls) == (True, True, 0.1)
    assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.data.batch_size, cfg.trainer.max_epochs) == (
        1e-3,
        0.05,
        128,
        200,
    )
    assert cfg.seed == 0


def test_baseline_preset_and_command_line_win_over_preset() -> None:
    base = typed(["protocol=baseline"])
    assert (base.aug.autoaug, base.aug.cutmix, base.loss.ls) == (False, False, 0.0)
    mixed = typed(["protocol=baseline", "aug.cutmix=true"])
    assert (mixed.aug.autoaug, mixed.aug.cutmix, mixed.loss.ls) == (False, True, 0.0)


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        (
            ["data=synthetic", "model=vit_tiny", "aug.autoaug=true", "aug.cutmix=false", "loss.ls=0.1"],
            "synthetic_vit_tiny_aa1_cm0_ls0.1_s0",
        ),
        (
            ["data=synthetic", "model=vit_tiny", "protocol=baseline", "loss.ls=0", "seed=3"],
            "synthetic_vit_tiny_aa0_cm0_ls0_s3",
        ),
        (["protocol=baseline"], "cifar100_vit_paper_aa0_cm0_ls0_s0"),
    ],
)
def test_run_name_says_the_cell(overrides: list[str], name: str) -> None:
    cfg = typed(overrides)
    assert cfg.run_name == name
    assert "=" not in cfg.run_name and "/" not in cfg.run_name


def test_ls_zero_and_zero_point_zero_are_one_cell() -> None:
    a, b = compose_config(["loss.ls=0"]), compose_config(["loss.ls=0.0"])
    assert a.run_name == b.run_name


def test_mistyped_key_fails_in_struct_mode() -> None:
    with pytest.raises(ConfigCompositionException, match="cutmx"):
        compose_config(["aug.cutmx=true"])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("loss.ls=1.5", "loss.ls"),
        ("loss.ls=-0.1", "loss.ls"),
        ("model.depth=0", "model.depth"),
        ("model.dim=100", "model.dim"),
        ("seed=-1", "seed"),
    ],
)
def test_bad_values_name_the_key(override: str, key: str) -> None:
    cfg = compose_config([override])
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        settings_from(cfg)


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("aug.cutmix=maybe", "aug.cutmix='maybe' is not allowed: true or false"),
        ("optim.lr=abc", "optim.lr='abc' is not allowed: a number"),
        ("model.depth=2.5", "model.depth=2.5 is not allowed: an integer"),
        ("aug.policy=randaugment", "aug.policy='randaugment' is not allowed: one of auto, cifar10, imagenet, svhn,"),
        ("stats.units=miles", "stats.units='miles' is not allowed: one of unit, grid, pixels"),
        ("callbacks.progress_bar=bar", "callbacks.progress_bar='bar' is not allowed: one of tqdm, rich, none"),
        ("data.eval_batch_size=big", "data.eval_batch_size='big' is not allowed: an integer >= 1, or null"),
        ("optim.betas=0.9", "optim.betas=0.9 is not allowed: two numbers in [0, 1)"),
    ],
)
def test_schema_refuses_a_wrong_type_in_one_line(override: str, line: str) -> None:
    """Hydra composes the value as typed; pydantic refuses it once, and the pre-check says so in one line."""
    compose_config([override])
    problems = check_command([override], CONF)
    assert len(problems) == 1 and problems[0].startswith(line) and "\n" not in problems[0], problems


@pytest.mark.parametrize(
    "override", ["optim.lr=1e-3", "aug.policy=svhn", "stats.units=grid", "data.eval_batch_size=null", "model.depth=2"]
)
def test_schema_takes_a_value_of_its_type(override: str) -> None:
    assert check_command(["data=synthetic", override], CONF) == []


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("optim.momentum=0.9", "optim.momentum"),
        ("stats.unit=grid", "stats.unit"),
        ("data.train_size=3", "data.train_size"),  # a synthetic-only key on CIFAR-100
    ],
)
def test_schema_refuses_an_unknown_key(override: str, key: str) -> None:
    with pytest.raises(ConfigCompositionException, match=key.split(".")[1]):
        compose_config([override])
    assert check_command([override], CONF) == [no_such_setting(key, schema_keys())]  # the nearest key, if any


def test_every_group_option_validates_as_its_section() -> None:
    """Each option file of a config group (not an `@package _global_` patch) composes into a cell whose every section
    its model validates, with nothing left over: no key of a file lacks its field."""
    for group in GROUPS:
        for option in _options(group):
            text = (CONF / group / f"{option}.yaml").read_text()
            if "@package _global_" in text or group == "hydra":
                continue
            settings = typed(["data=synthetic", "model=vit_tiny", f"{group}={option}"])
            section = getattr(settings, group)
            fields = set(type(section).model_fields) if section is not None else set()
            fields |= set(section.user_entries()) if hasattr(section, "user_entries") else set()  # by _target_
            assert set(compose_config([f"{group}={option}"])[group]) <= fields | {"wandb"}, f"{group}={option}"


def test_shared_bases_are_never_offered_as_options() -> None:
    """conf/data/_shared.yaml, _downloadable.yaml and conf/model/_base.yaml are what the files start from, not
    options."""
    assert {str(p.relative_to(CONF)) for p in CONF.glob("*/_*.yaml")} == {
        "data/_shared.yaml",
        "data/_downloadable.yaml",
        "model/_base.yaml",
    }
    refusal = check_command(["data=_bogus"], CONF)[0]
    assert refusal.endswith("one of cifar10, cifar100, glyphs, synthetic, tiny_imagenet")
    assert check_command(["model=_bogus"], CONF)[0].endswith("vit_small, vit_tiny, vit_tiny_sincos")


def test_typed_floats_make_zero_and_zero_point_zero_one_identity() -> None:
    """`loss.ls=0` and `loss.ls=0.0` are one float once validated, so one cell, one identity."""
    a, b = typed(["loss.ls=0"]), typed(["loss.ls=0.0"])
    assert a.loss.ls == 0.0 and isinstance(a.as_record()["loss"]["ls"], float)
    assert identity_hash(a) == identity_hash(b)
    assert identity_hash(typed(["loss.ls=0.1"])) != identity_hash(a)


def test_choices_serialise_as_their_strings() -> None:
    """A choice (Enum) setting is its string in a record's JSON, in f-strings and in comparisons."""
    settings = settings_from(compose_config(["stats.units=grid", "logger=wandb"]), machine=False)
    record = json.loads(json.dumps(settings.as_record()))
    assert (record["stats"]["units"], record["callbacks"]["progress_bar"], record["logger"]["wandb"]["mode"]) == (
        "grid",
        "tqdm",
        "auto",
    )
    units = settings.stats.units
    assert units == "grid" and f"{units}" == "grid" and str(settings.callbacks.progress_bar) == "tqdm"


def test_cutmix_needs_two_images_per_batch() -> None:
    settings_from(compose_config(["data.batch_size=1", "aug.cutmix=false"]))
    with pytest.raises(ConfigError, match="data.batch_size"):
        settings_from(compose_config(["data.batch_size=1", "aug.cutmix=true"]))


def test_identity_ignores_workers_but_not_protocol() -> None:
    ref = identity_hash(typed(["data=synthetic"]))
    assert identity_hash(typed(["data=synthetic", "data.num_workers=7"])) == ref
    assert identity_hash(typed(["data=synthetic", "loss.ls=0.2"])) != ref
    assert identity_hash(typed(["data=synthetic", "trainer.max_epochs=3"])) != ref


def test_device_autoaugment_and_compile_settings() -> None:
    settings_from(compose_config(["aug.device=gpu", "data=synthetic"]))
    with pytest.raises(ConfigError, match="^aug.device='tpu' is not allowed: one of cpu, gpu$"):  # the field's choices
        settings_from(compose_config(["aug.device=tpu"]))
    with pytest.raises(ConfigError, match="aug.device"):  # ColorJitter has no batched version
        settings_from(compose_config(["data=tiny_imagenet", "aug.autoaug=true", "aug.device=gpu"]))
    assert typed(["trainer=cpu"]).compiles is False  # auto: off on CPU
    assert typed(["trainer=cpu", "model.compile=true"]).compiles is True
    # a compiled step draws another random stream (same distributions): its own identity; auto on a CPU is eager
    ref = identity_hash(typed(["data=synthetic", "trainer=cpu"]))
    assert identity_hash(typed(["data=synthetic", "trainer=cpu", "model.compile=auto"])) == ref
    assert identity_hash(typed(["data=synthetic", "trainer=cpu", "model.compile=true"])) != ref


def test_config_checks_load_no_torch(spawns: Spawner) -> None:
    """The pre-check answers a typo before torch is loaded: config, preflight and their vocabulary stay light."""
    import subprocess
    import sys

    code = (
        "import sys, vit_locality.precheck.gate, vit_locality.precheck.preflight, vit_locality.catalog, "
        "vit_locality.config.schema, vit_locality.precheck.resolvers, vit_locality.store.record; "
        "print(sorted(m for m in ('torch', 'torchvision', 'lightning') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_trainer_names_are_lightnings() -> None:
    """The pre-check lists Lightning's names without importing it (2 s); an upgrade that changes them fails here."""
    import typing

    from lightning.fabric.connector import _PRECISION_INPUT
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    from vit_locality.config.trainer_checks import ACCELERATORS, PRECISIONS, STRATEGIES

    assert set(ACCELERATORS) == {"auto", "gpu", *AcceleratorRegistry.available_accelerators()}
    assert set(STRATEGIES) == {"auto", *StrategyRegistry.available_strategies()}
    literal = {str(value) for part in typing.get_args(_PRECISION_INPUT) for value in typing.get_args(part)}
    assert set(PRECISIONS) == {"auto", *literal}  # auto: this project's (builders.resolve_precision)


def test_vocabulary_written_out_for_the_check_matches_its_source() -> None:
    from vit_locality.attention.units import UNITS

    assert typing.get_args(StatsConfig.model_fields["units"].annotation) == UNITS


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["stats.early_layers=9"], "stats.early_layers"),  # vit_paper has 8 layers
        (["optim.lr=inf"], "optim.lr"),
        (["data=synthetic", "data.val_size=5000"], "data.val_size"),
        (["trainer.precision=bogus"], "trainer.precision"),
        (["sweep_name=a/b"], "sweep_name"),
    ],
)
def test_new_checks_name_the_key(overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from(compose_config(overrides))
    assert str(caught.value).startswith(f"{key}=")
