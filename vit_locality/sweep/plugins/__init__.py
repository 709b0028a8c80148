"""This project's Hydra plugins, installed as `hydra_plugins.vit_locality` (pyproject's package-dir): Hydra takes a
launcher or sweeper only from the hydra_plugins namespace, so each one here extends an upstream plugin instead of
patching its class."""

from __future__ import annotations

import importlib

from hydra.core.plugins import Plugins
from omegaconf import DictConfig, OmegaConf

PACKAGE = __name__  # hydra_plugins.vit_locality once installed


def register_chosen(config: DictConfig) -> None:
    """Make the launcher or sweeper `config` chooses from this package known to Hydra before Hydra instantiates it:
    Hydra's scan of the hydra_plugins folders misses a package that an editable install maps there."""
    for key in ("hydra.launcher._target_", "hydra.sweeper._target_"):
        target = str(OmegaConf.select(config, key, default="") or "")
        if target.startswith(f"{PACKAGE}."):
            module, _, name = target.rpartition(".")
            Plugins.instance().register(getattr(importlib.import_module(module), name))
