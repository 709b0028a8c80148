"""Applying one cell's values to its composed config, and refusing a `+key` that nothing reads: the pre-check's
view of what an override does to the config."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from typing import Any

from hydra.core.override_parser.types import Override
from omegaconf import BooleanNode, DictConfig, OmegaConf, open_dict
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    ConfigTypeError,
)

from vit_locality.config.refusals import SPELLING_HINT, no_such_setting
from vit_locality.errors import ConfigError

# The one section whose new keys something reads: any Trainer argument (checked against the installed Trainer).
OPEN_SECTIONS = ("trainer",)


MAX_LISTED = 24  # keys of a section a refusal lists when none is close to the one typed


def apply_value(cfg: DictConfig, override: Override) -> None:
    """A value override as Hydra's config loader applies it after composition; in struct mode, so a key that is not
    in the config fails unless `+`/`++` adds it."""
    key, value = override.key_or_group, override.value()
    if override.is_delete():
        _delete(cfg, key, value)
    elif override.is_add() and OmegaConf.select(cfg, key, throw_on_missing=False) is not None:
        if not isinstance(value, dict | list):
            raise ConfigError(f"+{key}: {key} is set already; drop the + to change it, or use ++{key}= either way")
        OmegaConf.update(cfg, key, value, merge=True, force_add=True)
    elif override.is_add() or override.is_force_add():
        OmegaConf.update(cfg, key, value, merge=True, force_add=True)
    else:
        _refuse_non_flag(cfg, key, value)
        try:
            OmegaConf.update(cfg, key, value, merge=True)
        except (ConfigAttributeError, ConfigKeyError):
            raise ConfigError(no_such_setting(key)) from None


def _refuse_non_flag(cfg: DictConfig, key: str, value: Any) -> None:
    """A flag (a schema's bool) takes true or false (or null where it may be unset): OmegaConf would read `2`, `yes`
    or `on` as true."""
    node = _node(cfg, key)
    if isinstance(node, BooleanNode) and value is not None and not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} is not allowed: true or false")


def _node(cfg: DictConfig, key: str) -> Any:
    """The config node at the dotted `key`, or None where there is none."""
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or node._is_none() or node._is_missing():
            return None
        node = node._get_node(part, validate_access=False, throw_on_missing_key=False)
        if node is None:
            return None
    return node


def _has_key(cfg: DictConfig, key: str) -> bool:
    """Whether the dotted `key` is in the config, whatever its value (null and ??? included)."""
    return _node(cfg, key) is not None


def new_keys(cfg: DictConfig, key: str, value: Any) -> list[str]:
    """The dotted keys `+key=value` creates: the key itself, or for a mapping merged onto an existing section, each
    of the mapping's keys that the section lacks."""
    if not _has_key(cfg, key):
        return [key]
    if isinstance(value, dict) and isinstance(OmegaConf.select(cfg, key), DictConfig):
        return [new for name, item in value.items() for new in new_keys(cfg, f"{key}.{name}", item)]
    return []


def _dotted_keys(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, DictConfig) and not node._is_none() and not node._is_missing():
        for name in node:
            key = f"{prefix}.{name}" if prefix else str(name)
            yield key
            yield from _dotted_keys(node._get_node(name, validate_access=False), key)


def check_unread_settings(cfg: DictConfig, added: Iterable[str]) -> None:
    """A `+key` that no code reads would train the plain run under a name that claims the setting: refused, naming
    the nearest real key. Only a Trainer argument may be added (trainer_options checks it against the Trainer)."""
    added = list(added)
    for key in added:
        section, _, name = key.rpartition(".")
        if section in OPEN_SECTIONS and name:
            continue
        real = [k for k in _dotted_keys(cfg) if k not in added and k != "hydra" and not k.startswith("hydra.")]
        siblings = [k for k in real if k.rpartition(".")[0] == section] or real
        nearest = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
        if nearest:
            hint = f"the nearest real one is {nearest[0]}"
        elif len(siblings) <= MAX_LISTED:
            hint = f"the real ones here are {', '.join(siblings)}"
        else:
            hint = SPELLING_HINT
        raise ConfigError(f"+{key}: no such setting, and nothing would read it ({hint})")


def _delete(cfg: DictConfig, key: str, value: Any) -> None:
    """`~key` deletes the key; `~key=value` only if it holds that value. A setting a schema declares cannot be
    deleted (Hydra refuses it too)."""
    current = OmegaConf.select(cfg, key, throw_on_missing=False)
    if current is None or (value is not None and value != current):
        raise ConfigError(f"~{key}: nothing to delete ({key} is {current!r})")
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    try:
        with open_dict(cfg):  # as Hydra's config loader: a schema's own flags still hold below
            del node[leaf]
    except ConfigTypeError:
        raise ConfigError(f"~{key} is not allowed: a setting the schema declares (set it instead)") from None
