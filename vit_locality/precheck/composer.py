"""Compose a cell's config as Hydra does, with the refusals Hydra's composition lacks (a `+key` nothing reads).

The pre-check (preflight) composes each cell once through this; Hydra's own compose API, no private loader."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hydra import compose
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, open_dict
from omegaconf.errors import OmegaConfBaseException

from vit_locality.precheck.override_values import check_unread_settings, may_create_keys, new_keys, unresolved_tree

COMPOSITION_ERRORS = (HydraException, OmegaConfBaseException, AssertionError)  # OmegaConf asserts on a null parent
Cell = tuple[str, ...]  # one override string per axis of the sweep


class Composer:
    """Cells' configs as Hydra composes them, with the refusals Hydra's composition lacks."""

    def __init__(self, conf_dir: Path, config_name: str) -> None:
        self.conf_dir = conf_dir
        self.config_name = config_name
        self.parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())  # for glob()
        self._last: tuple[Cell, tuple[DictConfig, DictConfig]] | None = None

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
        """The cell's job config and hydra config; ConfigError for a `+key` nothing reads or a flag given a value
        other than true or false, Hydra's own error for anything its composition refuses. The last cell's are kept
        (a single run's cell is asked for twice)."""
        cell = tuple(cell)
        if self._last is not None and self._last[0] == cell:
            return self._last[1]
        parsed = ((text, self.parse(text)) for text in cell)
        values = [(text, override) for text, override in parsed if not self.is_group(override)]
        try:
            composed = self._compose(cell)
        except COMPOSITION_ERRORS:
            self._refuse_unread(cell, values)  # a key below a null section cannot be set: nothing would read it
            raise
        self._refuse_unread(cell, values)
        self._last = (cell, composed)
        return composed

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
