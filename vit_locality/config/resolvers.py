"""The OmegaConf resolvers `run_name` uses: one cell, one directory name, however its values were typed."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vit_locality.config.identity import (
    Lookup,
    config_lookup,
    fitted_name,
    identity_settings,
    named_settings,
    reference_choices,
    settings_suffix,
)


def _as_01(value: Any) -> int:
    return int(bool(value))


def _compact_number(value: Any) -> str:
    """0 and 0.0 both print as `0`, 0.10 as `0.1`: one cell, one directory name."""
    return f"{float(value):g}"


def _job_overrides() -> list[str] | None:
    """The overrides of the job Hydra is running; None outside a Hydra job (a config composed in a test or a tool)."""
    hydra_config = sys.modules.get("hydra.core.hydra_config")
    if hydra_config is None or not hydra_config.HydraConfig.initialized():
        return None
    return list(hydra_config.HydraConfig.get().overrides.task)


def _cell_name(base: str, *, _root_: DictConfig) -> str:
    """A run directory's name: `base` (data, model, the three flags, seed) and every identity setting that differs
    from the config of the job's data and model choices alone, whatever set it (identity.identity_settings),
    shortened to fit (identity.fitted_name). Outside a Hydra job: `base` alone."""
    overrides = _job_overrides()
    if overrides is None:
        return fitted_name(base, {})
    from hydra.core.hydra_config import HydraConfig

    hydra_job = HydraConfig.get()
    reference = _composed_defaults(hydra_job.job.config_name, reference_choices(hydra_job.runtime.choices))
    if reference is None:  # Hydra cannot compose here: the command line's settings, as far as they go
        return fitted_name(base, named_settings(overrides, config_lookup(_root_), _default_lookup(overrides)))
    return fitted_name(base, identity_settings(_root_, reference))


def _cell_settings(*, _root_: DictConfig) -> str:
    """The settings part alone, unshortened: what `run_name` of configs saved before `cell_name` ends with."""
    overrides = _job_overrides()
    return settings_suffix(overrides, config_lookup(_root_), _default_lookup(overrides)) if overrides else ""


def _default_lookup(overrides: list[str]) -> Lookup | None:
    """Each setting's default for this job: the config its group choices compose to, before any value override."""
    from hydra.core.hydra_config import HydraConfig

    config_name = HydraConfig.get().job.config_name
    defaults = _composed_defaults(config_name, tuple(o for o in overrides if _is_group_choice(o)))
    return config_lookup(defaults) if defaults is not None else None


def _is_group_choice(override: str) -> bool:
    """`protocol=baseline`, `hydra/launcher=joblib`, `data@x=...`: a config file chosen, not a value set."""
    from vit_locality.paths import CONF_DIR

    key = override.split("=", 1)[0].lstrip("+~")
    return "@" in key or "/" in key or (Path(CONF_DIR) / key).is_dir()


@functools.lru_cache(maxsize=64)
def _composed_defaults(config_name: str | None, group_choices: tuple[str, ...]) -> DictConfig | None:
    """The job's config composed from its group choices alone; None where Hydra cannot compose it here."""
    try:
        from hydra import compose

        return compose(config_name=config_name, overrides=list(group_choices))
    except Exception:  # no Hydra context in this process: every overridden setting is named
        return None


def register_resolvers() -> None:
    """`${as_01:...}` (bool -> 0/1), `${compact_number:...}` (0.10 -> 0.1), `${cell_name:<base>}` and
    `${cell_settings:}`, used by `run_name`. Idempotent."""
    resolvers = (
        ("as_01", _as_01),
        ("compact_number", _compact_number),
        ("cell_name", _cell_name),
        ("cell_settings", _cell_settings),
    )
    for name, fn in resolvers:
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
