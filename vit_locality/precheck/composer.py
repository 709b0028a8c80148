"""Compose a cell's config as Hydra does, with the refusals Hydra's composition lacks (a `+key` nothing reads, a
group's shared part picked as an option) and the nearest real key named where Hydra refuses an unknown one.

The pre-check (preflight) composes each cell once through this; Hydra's own compose API, no private loader."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hydra import compose
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, open_dict
from omegaconf.errors import OmegaConfBaseException

from vit_locality.errors import ConfigError
from vit_locality.precheck.override_values import check_unread_settings, may_create_keys, new_keys, unresolved_tree
from vit_locality.precheck.refusals import (
    dotted_keys,
    is_shared_part,
    no_such_setting,
    schema_keys,
    shared_part_refusal,
    unknown_key_override,
)

COMPOSITION_ERRORS = (HydraException, OmegaConfBaseException, AssertionError)  # OmegaConf asserts on a null parent
Cell = tuple[str, ...]  # one override string per axis of the sweep


class Composer:
    """Cells' configs as Hydra composes them, with the refusals Hydra's composition lacks."""

    def __init__(self, conf_dir: Path, config_name: str) -> None:
        self.conf_dir = conf_dir
        self.config_name = config_name
        self.parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())  # for glob()
        self._last: tuple[Cell, tuple[DictConfig, DictConfig]] | None = None
        # Each cell composed without a refusal, its job config as plain unresolved data: the sweep's config tree is
        # drawn from them (train.sweep_configs), without composing a cell twice.
        self.composed: dict[Cell, dict[str, Any]] = {}

    def parse(self, text: str) -> Override:
        return self.parser.parse_overrides([text])[0]

    def is_group(self, override: Override) -> bool:
        """Hydra picks a config file for a group (a folder of conf/) and sets a value for any other key."""
        key = override.key_or_group
        return override.package is not None or "/" in key or (self.conf_dir / key).is_dir()

    def _compose(self, overrides: Iterable[str]) -> tuple[DictConfig, DictConfig]:
        """(job config, hydra config) as Hydra composes them for these overrides."""
        cfg = compose(config_name=self.config_name, overrides=list(overrides), return_hydra_config=True)
        with open_dict(cfg):
            hydra_cfg = cfg.pop("hydra")
        return cfg, hydra_cfg

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
