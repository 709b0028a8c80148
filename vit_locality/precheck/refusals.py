"""Hydra's composition errors as the pre-check's one line: the setting and what is allowed, read from the exception
Hydra raises (its options, the key OmegaConf names) and the override that caused it, not from its message's words."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.types import Override
from hydra.errors import MissingConfigException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

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


def explain(error: Exception, conf_dir: Path, overrides: Iterable[Override] = ()) -> str:
    """One line for a composition error of a command with these overrides."""
    if isinstance(error, MissingConfigException) and error.missing_cfg_file:
        group, _, value = error.missing_cfg_file.rpartition("/")
        if (group, value) in PLUGIN_EXTRAS:
            plugin, extra = PLUGIN_EXTRAS[group, value]
            return f"{group}={value} needs {plugin}, which is not installed: pip install 'vit-locality[{extra}]'"
        return f"{group}={value} is not allowed: one of {', '.join(_group_options(conf_dir, group))}"
    text = str(error)
    cause = error.__cause__
    for override in overrides:
        key = override.key_or_group
        if f"'{key}'" not in text and f" {override.input_line}" not in text:
            continue  # Hydra names the override it could not apply
        if isinstance(cause, ConfigKeyError | ConfigAttributeError):  # a key the config does not have
            return no_such_setting(key)
        if override.is_add():
            return f"+{key}: {key} is set already; drop the + to change it, or use ++{key}= either way"
        if override.is_delete():
            if override.value() is None:
                return f"~{key}: nothing to delete ({key} is null or absent)"
            return f"~{key}={override.value()}: nothing to delete ({key} has another value)"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    full_key = getattr(error, "full_key", None)
    return f"{full_key}: {first}" if full_key and full_key not in first else first
