"""The OmegaConf resolvers `run_name` uses: one cell, one directory name, however its values were typed."""

from __future__ import annotations

import sys
from typing import Any

from omegaconf import OmegaConf

from vit_locality.config.identity import settings_suffix


def _as_01(value: Any) -> int:
    return int(bool(value))


def _compact_number(value: Any) -> str:
    """0 and 0.0 both print as `0`, 0.10 as `0.1`: one cell, one directory name."""
    return f"{float(value):g}"


def _cell_settings() -> str:
    """The part of a run directory's name for the settings this job's command line changes (identity.py). Read from
    Hydra's job config when Hydra is running the job; nothing otherwise (a config composed in a test or a tool)."""
    hydra_config = sys.modules.get("hydra.core.hydra_config")
    if hydra_config is None or not hydra_config.HydraConfig.initialized():
        return ""
    return settings_suffix(hydra_config.HydraConfig.get().overrides.task)


def register_resolvers() -> None:
    """`${as_01:...}` (bool -> 0/1), `${compact_number:...}` (0.10 -> 0.1) and `${cell_settings:}`, used by
    `run_name`. Idempotent."""
    for name, fn in (("as_01", _as_01), ("compact_number", _compact_number), ("cell_settings", _cell_settings)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
