"""The two rules the pre-check adds to what Hydra's composition refuses: a `+key` that nothing reads (a Trainer
argument and a user callback's or logger's `_target_` and arguments are read), and a flag given something other than
true or false. Both read plain containers of composed configs (public OmegaConf API only)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf

from vit_locality.config.schema import CallbacksConfig, LoggerConfig
from vit_locality.errors import ConfigError
from vit_locality.precheck.refusals import SPELLING_HINT, dotted_keys

# The one section whose new keys something reads: any Trainer argument (checked against the installed Trainer).
OPEN_SECTIONS = ("trainer",)
# Sections whose new entries something reads: a user callback or logger, `+<section>.<name>._target_=<class>` and its
# arguments, for any name the section does not declare (the schema and the gate check them: config/extensions.py).
ENTRY_SECTIONS = {"callbacks": CallbacksConfig, "logger": LoggerConfig}
MAX_LISTED = 24  # keys of a section a refusal lists when none is close to the one typed
_ABSENT = object()


def unresolved_tree(cfg: DictConfig) -> dict[str, Any]:
    """The config as nested dicts, unresolved: every key it has, null sections and `???` values included."""
    return OmegaConf.to_container(cfg, resolve=False)


def _found(tree: Any, key: str) -> Any:
    """The value at the dotted `key` of a plain tree, or _ABSENT where the tree has no such key."""
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return _ABSENT
        tree = tree[part]
    return tree


def may_create_keys(override: Override) -> bool:
    """Whether a `+`/`++` value override might add a key something must read (a Trainer argument need not)."""
    if not (override.is_add() or override.is_force_add()):
        return False
    section = override.key_or_group.rpartition(".")[0]
    return section not in OPEN_SECTIONS and not sets_user_entry(override)


def sets_user_entry(override: Override) -> bool:
    """Whether a `+` override sets a user callback or logger: `<section>.<name>.<argument>`, or `<section>.<name>`
    given a mapping, for a name the section does not declare (`logger.wandb.*` and `callbacks.progress_bar` are
    declared settings, checked as any other)."""
    section, _, rest = override.key_or_group.partition(".")
    name, dot, _ = rest.partition(".")
    if section not in ENTRY_SECTIONS or not name or name in ENTRY_SECTIONS[section].model_fields:
        return False
    return bool(dot) or isinstance(override.value(), dict)


def new_keys(before: dict[str, Any], key: str, value: Any) -> list[str]:
    """The dotted keys `+key=value` creates in the plain config `before` it: the key itself, or for a mapping merged
    onto an existing section, each of the mapping's keys that the section lacks."""
    found = _found(before, key)
    if found is _ABSENT:
        return [key]
    if isinstance(value, dict) and isinstance(found, dict):
        return [new for name, item in value.items() for new in new_keys(before, f"{key}.{name}", item)]
    return []


def check_unread_settings(before: dict[str, Any], added: Iterable[str]) -> None:
    """A `+key` that no code reads would train the plain run under a name that claims the setting: refused, naming
    the nearest real key of the config `before` the additions. Only a Trainer argument may be added (trainer_options
    checks it against the Trainer)."""
    added = list(added)
    for key in added:
        section, _, name = key.rpartition(".")
        if section in OPEN_SECTIONS and name:
            continue
        real = [k for k in dotted_keys(before) if k not in added and k != "hydra" and not k.startswith("hydra.")]
        siblings = [k for k in real if k.rpartition(".")[0] == section] or real
        nearest = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
        if nearest:
            hint = f"the nearest real one is {nearest[0]}"
        elif len(siblings) <= MAX_LISTED:
            hint = f"the real ones here are {', '.join(siblings)}"
        else:
            hint = SPELLING_HINT
        raise ConfigError(f"+{key}: no such setting, and nothing would read it ({hint})")
