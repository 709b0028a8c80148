"""Every setting of every section refuses a value it cannot read in one line naming the setting as typed:
`loss.ls='abc' is not allowed: a number in [0, 1)`, never an internal (the run name built from it, a resolver)."""

from __future__ import annotations

import pytest
from helpers import CONF, compose_config
from omegaconf import OmegaConf

from vit_locality.precheck.preflight import check_command

# One composition per variant of the data and model sections, and with the W&B logger: together every field.
BASES = [
    ["data=glyphs", "model=vit_tiny_sincos", "logger=wandb"],
    ["data=synthetic", "model=vit_convstem"],
    ["data=cifar10", "model=vit_tiny"],
]
# The settings whose value is free text: a name or a path, so `abc` is a value they take.
TEXT = {
    "data.root",
    "model.name",
    "sweep_name",
    "run_name",
    "logger.wandb.project",
    "logger.wandb.entity",
    "logger.wandb.group",
    "logger.wandb.job_type",
}


def _leaves(tree: dict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        keys += _leaves(value, dotted + ".") if isinstance(value, dict) else [dotted]
    return keys


def _fields() -> list[tuple[list[str], str]]:
    seen: dict[str, list[str]] = {}
    for base in BASES:
        for key in _leaves(OmegaConf.to_container(compose_config(base), resolve=False)):
            seen.setdefault(key, base)
    return [(base, key) for key, base in sorted(seen.items())]


FIELDS = _fields()


def test_the_walk_covers_every_section() -> None:
    sections = {key.split(".")[0] for _, key in FIELDS}
    assert {"data", "model", "aug", "loss", "optim", "trainer", "stats", "callbacks", "logger", "startup"} <= sections
    assert {"data.min_height", "data.period", "data.root", "model.stem", "model.pos_init"} <= {k for _, k in FIELDS}
    assert len(FIELDS) > 80


@pytest.mark.parametrize(("base", "key"), FIELDS, ids=[key for _, key in FIELDS])
def test_an_unreadable_value_is_refused_naming_its_key(base: list[str], key: str, tmp_path) -> None:
    problems = check_command([*base, f"{key}=abc", f"hydra.run.dir={tmp_path}/run"], CONF)
    if key in TEXT:
        assert problems == [] or not problems[0].startswith(f"{key}="), problems
        return
    assert len(problems) == 1 and problems[0].startswith(f"{key}='abc' is not allowed: "), problems
    assert "\n" not in problems[0]
