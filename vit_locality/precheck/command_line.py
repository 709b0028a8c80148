"""How a command line becomes a Hydra job: its overrides split into the job's, the output directories and Hydra's
other settings, each swept key with its values, and the output directories its templates name. Used by the
pre-check (preflight.py) before anything runs."""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Iterable
from pathlib import Path

from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf

from vit_locality.errors import ConfigError
from vit_locality.precheck.composer import Composer

INTERPOLATION = re.compile(r"\$\{([\w.]+)\}")


def override_axes(overrides: Iterable[Override], search: bool = False) -> dict[str, list[str]]:
    """Each overridden key with its values (one value, or every value of a sweep), as the basic sweeper lists them;
    with a search sweeper (`search`, e.g. Optuna) an interval(a, b) is checked at both ends."""
    axes: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                bounds = override.value()
                if not search or not hasattr(bounds, "start"):
                    allowed = "a list a,b,c, range(...) or, with a search sweeper, interval(a, b)"
                    raise ConfigError(f"{override.input_line} is not allowed: {allowed}")
                axes[key] = [f"{key}={bounds.start}", f"{key}={bounds.end}"]
                continue
            axes[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            axes[key] = [f"{key}={override.get_value_element_as_str()}"]
    return axes


def split_overrides(
    composer: Composer, texts: list[str], multirun: bool
) -> tuple[list[Override], dict[str, str], list[str]]:
    """The job's overrides, the output directories the command line sets, and the keys of the other Hydra settings
    it sets (checked against the chosen launcher and sweeper)."""
    job, dirs, hydra_values = [], {}, []
    for override in (composer.parse(text) for text in texts):
        if override.is_sweep_override() and not multirun:
            raise ConfigError(f"{override.input_line} is not allowed without -m: one value (quote 'a,b' for a string)")
        if override.is_sweep_override() and override.is_hydra_override():
            raise ConfigError(f"{override.input_line} is not allowed: one value (Hydra's settings are not swept)")
        if not override.is_hydra_override() or composer.is_group(override):  # `hydra/launcher=` composes with the job
            job.append(override)
        elif override.key_or_group in ("hydra.run.dir", "hydra.sweep.dir"):
            dirs[override.key_or_group] = override.get_value_element_as_str()
        elif not (override.is_add() or override.is_force_add() or override.is_delete()):
            hydra_values.append(override.key_or_group)
    return job, dirs, hydra_values


def refuse_saved_sweep_without_m(texts: list[str], hydra_cfg: DictConfig) -> None:
    """A saved sweep (`experiment=demo`) or search (`hparams_search=...`) run without `-m` would train its first
    cell alone, without a word: refused, with the command that runs it."""
    params = hydra_cfg.sweeper.get("params")
    if not params:
        return
    choices = hydra_cfg.runtime.choices
    chosen = next((f"{g}={choices[g]}" for g in ("experiment", "hparams_search") if choices.get(g)), "this config")
    kind = "a search" if choices.get("hparams_search") else f"a sweep over {', '.join(map(str, params))}"
    raise ConfigError(f"{chosen} is {kind}: run it with -m (python train.py -m {shlex.join(texts)})")


def output_path(template: str, cfg: DictConfig) -> Path:
    """The directory a Hydra path template names for this config. Where it interpolates what only Hydra knows at
    run time (`${now:...}`, `${hydra:...}`), the part before: the directories that must be creatable regardless."""

    def value(match: re.Match[str]) -> str:
        found = OmegaConf.select(cfg, match.group(1), default=None, throw_on_resolution_failure=False)
        return match.group(0) if found is None else str(found)

    parts = Path(INTERPOLATION.sub(value, template)).parts
    return Path(*itertools.takewhile(lambda part: "${" not in part, parts))


def saved_template(hydra_cfg: DictConfig, key: str) -> str:
    """The raw (unresolved) value of `hydra.run.dir` or `hydra.sweep.dir` in the composed Hydra config."""
    section, name = key.split(".")[1:]
    return str(OmegaConf.to_container(hydra_cfg[section], resolve=False)[name])
