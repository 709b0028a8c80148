"""Hydra's and OmegaConf's errors turned into the pre-check's one line: the key, the value and what is allowed."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from omegaconf.errors import ConfigTypeError, ValidationError

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


def _declared(owner: Any, key: Any) -> tuple[Any, bool]:
    """The type a schema section (a dataclass) declares for `key`, and whether it may be null; (None, False) where
    the section is no schema or does not declare the key."""
    if not (isinstance(owner, type) and dataclasses.is_dataclass(owner)):
        return None, False
    try:
        kind = typing.get_type_hints(owner).get(str(key))
    except Exception:  # an annotation that does not evaluate here: the words stay general
        return None, False
    members = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else ()
    if type(None) not in members:
        return kind, False
    rest = [member for member in members if member is not type(None)]
    return (rest[0] if len(rest) == 1 else None), True


def _allowed_type(kind: Any, optional: bool) -> str:
    """What a schema field of type `kind` takes, in words."""
    null = " or null" if optional else ""
    if isinstance(kind, type) and issubclass(kind, Enum):
        return f"one of {', '.join(str(member.value) for member in kind)}{null}"
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return words.get(kind, "a value of the type the schema gives") + null


def _schema_refusal(error: ValidationError) -> str | None:
    """`optim.lr='abc' is not allowed: a number` for a value the schema (schema.py) refuses, or None."""
    if not error.full_key or error.parent_node is None:
        return None
    kind, optional = _declared(OmegaConf.get_type(error.parent_node), error.key)
    value = error.value
    shown = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    return f"{error.full_key}={shown!r} is not allowed: {_allowed_type(kind, optional)}"


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
    added = re.search(r"An item is already at '([\w.]+)'", text)
    if added:
        key = added.group(1)
        return f"+{key}: {key} is set already; drop the + to change it, or use ++{key}= either way"
    absent = re.search(r"Could not delete from config\. '([\w.]+)' does not exist", text)
    if absent:
        return f"~{absent.group(1)}: nothing to delete ({absent.group(1)} is null or absent)"
    other = re.search(r"Could not delete from config\. The value of '([\w.]+)' is (.*) and not (.*)\.$", text)
    if other:
        key, value, asked = other.groups()
        return f"~{key}: nothing to delete ({key} is {value}, not {asked})"
    merging = re.search(r"Error merging override ~([\w.]+)", text)
    if merging and isinstance(error.__cause__, ConfigTypeError):  # Hydra deletes in struct mode; a schema refuses
        return f"~{merging.group(1)} is not allowed: a setting the schema declares (set it instead)"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    full_key = getattr(error, "full_key", None)
    return f"{full_key}: {first}" if full_key and full_key not in first else first
