"""Compose a cell's config as Hydra does, with the refusals Hydra's composition lacks (a `+key` nothing reads, a
group's shared part picked as an option) and the nearest real key named where Hydra refuses an unknown one.

The pre-check (preflight) composes each cell once through this; Hydra's own compose API, no private loader."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from hydra import compose
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vit_locality.config.schema import CallbacksConfig, LoggerConfig
from vit_locality.errors import ConfigError
from vit_locality.precheck.refusals import (
    SPELLING_HINT,
    dotted_keys,
    is_shared_part,
    no_such_setting,
    schema_keys,
    shared_part_refusal,
    unknown_key_override,
)

COMPOSITION_ERRORS = (HydraException, OmegaConfBaseException, AssertionError)  # OmegaConf asserts on a null parent
Cell = tuple[str, ...]  # one override string per axis of the sweep
Compose = Callable[[list[str]], DictConfig]  # a cell's overrides -> its config, Hydra's section included


class Composer:
    """Cells' configs as Hydra composes them, with the refusals Hydra's composition lacks."""

    def __init__(self, conf_dir: Path, config_name: str, compose_cell: Compose | None = None) -> None:
        """`compose_cell`: how a cell is composed (a sweeper passes its launcher's loader); Hydra's compose API if
        None."""
        self.conf_dir = conf_dir
        self.config_name = config_name
        self.compose_cell = compose_cell or self._compose_api
        self.parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())  # for glob()
        self._last: tuple[Cell, tuple[DictConfig, DictConfig]] | None = None
        # Each cell composed without a refusal, its job config as plain unresolved data: the sweep's config tree is
        # drawn from them (sweeper.print_sweep_tree), without composing a cell twice.
        self.composed: dict[Cell, dict[str, Any]] = {}

    def parse(self, text: str) -> Override:
        return self.parser.parse_overrides([text])[0]

    def is_group(self, override: Override) -> bool:
        """Hydra picks a config file for a group (a folder of conf/) and sets a value for any other key."""
        key = override.key_or_group
        return override.package is not None or "/" in key or (self.conf_dir / key).is_dir()

    def _compose_api(self, overrides: list[str]) -> DictConfig:
        return compose(config_name=self.config_name, overrides=overrides, return_hydra_config=True)

    def _compose(self, overrides: Iterable[str]) -> tuple[DictConfig, DictConfig]:
        """(config, its Hydra section) as Hydra composes them for these overrides."""
        cfg = self.compose_cell(list(overrides))
        return cfg, cfg.hydra

    def cell(self, cell: Iterable[str]) -> tuple[DictConfig, DictConfig]:
        """The cell's job config and hydra config; ConfigError for a `+key` nothing reads, a flag given a value
        other than true or false, a group's shared part (`data=_shared`) or an unknown key (naming the nearest real
        one), Hydra's own error for anything else its composition refuses. The last cell's are kept (a single run's
        cell is asked for twice)."""
        cell = tuple(cell)
        if self._last is not None and self._last[0] == cell:
            return self._last[1]
        parsed = [(text, self.parse(text)) for text in cell]
        self._refuse_shared_parts(parsed)
        values = [(text, override) for text, override in parsed if not self.is_group(override)]
        try:
            composed = self._compose(cell)
        except COMPOSITION_ERRORS as error:
            self._refuse_unread(cell, values)  # a key below a null section cannot be set: nothing would read it
            self._refuse_unknown(parsed, error)
            raise
        self._refuse_unread(cell, values)
        self._last = (cell, composed)
        self.composed[cell] = unresolved_tree(composed[0])
        return composed

    def _refuse_shared_parts(self, parsed: list[tuple[str, Override]]) -> None:
        """A group's file starting with `_` (conf/data/_shared.yaml) is a part its options share, which Hydra
        composes like any option: refused, naming the options, before it fails later for a key it lacks."""
        for _, override in parsed:
            value = override.value()
            group = override.key_or_group
            if self.is_group(override) and isinstance(value, str) and is_shared_part(self.conf_dir, group, value):
                raise ConfigError(shared_part_refusal(self.conf_dir, group, value))

    def _refuse_unknown(self, parsed: list[tuple[str, Override]], error: Exception) -> None:
        """ConfigError naming the nearest real key where Hydra refused a key the config lacks (`stats.unit=grid`):
        the keys of the cell composed without that override, and the schema's; nothing where that fails too."""
        unknown = unknown_key_override(error, (override for _, override in parsed))
        if unknown is None:
            return
        try:
            cfg, _ = self._compose(text for text, override in parsed if override is not unknown)
        except COMPOSITION_ERRORS:
            return
        known = [*dotted_keys(unresolved_tree(cfg)), *schema_keys()]
        raise ConfigError(no_such_setting(unknown.key_or_group, known)) from None

    def _refuse_unread(self, cell: Cell, values: list[tuple[str, Override]]) -> None:
        """ConfigError for a `+`/`++` key the config lacks without it (which no code would read), found by composing
        the cell without its additions; nothing to compose where it adds none (or only Trainer arguments)."""
        adding = [(text, override) for text, override in values if may_create_keys(override)]
        if not adding:
            return
        added_texts = {text for text, _ in adding}
        try:
            before = unresolved_tree(self._compose(text for text in cell if text not in added_texts)[0])
        except COMPOSITION_ERRORS:  # the cell fails without its additions too: that error is the one to tell
            return
        created = [key for _, o in adding for key in new_keys(before, o.key_or_group, o.value())]
        if created:
            check_unread_settings(before, created)


# The one section whose new keys something reads: any Trainer argument (checked against the installed Trainer).
OPEN_SECTIONS = ("trainer",)
# Sections whose new entries something reads: a user callback or logger, `+<section>.<name>._target_=<class>` and its
# arguments, for any name the section does not declare (the schema and the gate check them: config/extensions.py).
ENTRY_SECTIONS = {"callbacks": CallbacksConfig, "logger": LoggerConfig}
MAX_LISTED = 24  # keys of a section a refusal lists when none is close to the one typed
_ABSENT = object()


def unresolved_tree(cfg: DictConfig) -> dict[str, Any]:
    """The config as nested dicts, unresolved: every key but Hydra's section, null sections and `???` included."""
    return {key: value for key, value in OmegaConf.to_container(cfg, resolve=False).items() if key != "hydra"}


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
