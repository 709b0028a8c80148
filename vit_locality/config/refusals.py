"""Hydra's and OmegaConf's errors turned into the pre-check's one line: the key, the value and what is allowed."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from omegaconf.errors import (
    ValidationError,
)

SPELLING_HINT = "check the spelling; `--cfg job` lists every key"
# Config choices that a Hydra plugin of an optional extra brings (pyproject.toml): (plugin, extra).
PLUGIN_EXTRAS = {("hydra/sweeper", "optuna"): ("the Optuna sweeper (hparams_search=...)", "search")}


def _group_options(conf_dir: Path, group: str) -> list[str]:
    """The values a user may pick for a config group: its files in conf/ and, while Hydra is initialised, what its
    config search path adds (the launchers and sweepers of Hydra's plugins). Names starting with `_` are bases."""
    names = {p.stem for p in (conf_dir / group).glob("*.yaml")}
    if GlobalHydra.instance().is_initialized():
        names.update(GlobalHydra.instance().config_loader().get_group_options(group))
    return sorted(name for name in names if not name.startswith("_"))


def no_such_setting(key: str) -> str:
    return f"{key}: no such setting ({SPELLING_HINT})"


def _allowed_type(node: Any) -> str:
    """What a schema field takes, in words, from the node OmegaConf refused a value for."""
    kind = node._metadata.ref_type if node is not None else None
    null = " or null" if node is not None and node._is_optional() else ""
    if isinstance(kind, type) and issubclass(kind, Enum):
        return f"one of {', '.join(str(member.value) for member in kind)}{null}"
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return words.get(kind, "a value of the type the schema gives") + null


def _schema_refusal(error: ValidationError) -> str | None:
    """`optim.lr='abc' is not allowed: a number` for a value the schema (schema.py) refuses, or None."""
    if not error.full_key or error.parent_node is None:
        return None
    node = error.parent_node._get_node(error.key, validate_access=False, throw_on_missing_key=False)
    value = error.value
    shown = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    return f"{error.full_key}={shown!r} is not allowed: {_allowed_type(node)}"


def explain(error: Exception, conf_dir: Path) -> str:
    """One line for a composition error: the key, the value and what is allowed."""
    refused = next((e for e in (error, error.__cause__) if isinstance(e, ValidationError)), None)
    line = _schema_refusal(refused) if refused is not None else None
    if line:
        return line
    text = str(error)
    missing = re.search(r"Could not find '([\w/]+)/([^'/]+)'", text)
    if missing:
        group, value = missing.groups()
        if (group, value) in PLUGIN_EXTRAS:
            plugin, extra = PLUGIN_EXTRAS[group, value]
            return f"{group}={value} needs {plugin}, which is not installed: pip install 'vit-locality[{extra}]'"
        return f"{group}={value} is not allowed: one of {', '.join(_group_options(conf_dir, group))}"
    unknown = re.search(r"Could not override '([\w.]+)'", text) or re.search(r"Key '(\w+)' is not in struct", text)
    if unknown:
        return no_such_setting(unknown.group(1))
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    full_key = getattr(error, "full_key", None)
    return f"{full_key}: {first}" if full_key and full_key not in first else first
