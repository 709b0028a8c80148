"""How a command line becomes a Hydra job: its overrides split into the job's, the output directories and Hydra's
other settings, each swept key with its values, and the output directories its templates name. Used by the
pre-check (preflight.py) before anything runs."""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hydra import compose
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vit_locality.errors import ConfigError
from vit_locality.precheck.composer import Composer
from vit_locality.precheck.names import ABSENT
from vit_locality.precheck.refusals import _group_options, no_such_setting
from vit_locality.upstream import hydra_args_parser

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
        # `hydra/launcher=` composes with the job, and so do the config folders `hydra.searchpath` adds (a user's data)
        composes = override.key_or_group == "hydra.searchpath" or composer.is_group(override)
        if not override.is_hydra_override() or composes:
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


def file_problem(path: Path) -> str | None:
    """Why `path` is not a readable file, or None."""
    if path.is_dir():
        return "a directory"
    if not path.exists():
        return "no such file"
    if not path.is_file():
        return "not a regular file"
    return None if os.access(path, os.R_OK) else "this user cannot read it"


def directory_problem(path: Path) -> str | None:
    """Why this user could not create `path` as a directory or write into it, or None. Asked before anything runs,
    so a typo in an output path costs a second rather than a run that cannot save. `os.access` answers for this
    user (root writes through read-only modes; a read-only file system stops root too)."""
    existing = next(p for p in (path, *path.parents, Path(".")) if p.exists() or p.is_symlink())
    if existing.is_file():
        return f"{existing} is a file"
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"this user cannot write in {existing}"
    return None


def check_directory(key: str, value: Any, path: Path) -> None:
    """ConfigError naming `key` when `path` is no directory this user can create or write into."""
    problem = directory_problem(path)
    if problem is not None:
        raise ConfigError(f"{key}={value!r} is not allowed: a directory this user can create and write ({problem})")


INFO_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc"}


def check_hydra_keys(composer: Composer, keys: list[str], hydra_cfg: DictConfig) -> None:
    """A Hydra setting the chosen launcher or sweeper lacks (`hydra.launcher.n_jobs=2` with the basic launcher):
    one line naming the choice that has it, where Hydra would stop with its own multi-line error."""
    for key in keys:
        path = key.split(".", 1)[1] if "." in key else ""
        if not path or OmegaConf.select(hydra_cfg, path, default=ABSENT) is not ABSENT:
            continue
        group = path.split(".", 1)[0]
        if group not in ("launcher", "sweeper"):
            raise ConfigError(no_such_setting(key))
        current = str(hydra_cfg.runtime.choices.get(f"hydra/{group}"))
        having = [name for name in _group_options(composer.conf_dir, f"hydra/{group}") if _has(name, group, path)]
        fix = f"add hydra/{group}={having[0]}" if having else "no installed one takes it"
        raise ConfigError(f"{key}: no such setting of hydra/{group}={current}; {fix}")


def _has(choice: str, group: str, path: str) -> bool:
    """Whether the Hydra config with `hydra/<group>=<choice>` has the dotted `path` (below `hydra.`)."""
    try:
        cfg = compose(config_name="train", overrides=[f"hydra/{group}={choice}"], return_hydra_config=True)
    except (HydraException, OmegaConfBaseException):
        return False
    return OmegaConf.select(cfg.hydra, path, default=ABSENT) is not ABSENT


def _unprintable_problem(argv: list[str]) -> str | None:
    """A newline or an escape in an argument would forge or recolour log lines wherever it is shown."""
    unprintable = next((arg for arg in argv if not arg.isprintable()), None)
    if unprintable is None:
        return None
    return f"{ascii(unprintable)[1:-1]} is not allowed: control characters (newline, tab, escape) in a value"


def command_args(argv: list[str]) -> tuple[argparse.Namespace | None, str | None]:
    """The command line as Hydra parses it, or None where there are no cells to check (an info flag, another config
    tree such as a DDP child composing a saved cell) or with the problem refusing it."""
    if any(arg.split("=")[0] in INFO_FLAGS for arg in argv):
        return None, None
    if (problem := _unprintable_problem(argv)) is not None:
        return None, problem
    args = hydra_args_parser().parse_args(argv)
    return (None, None) if args.config_path or args.config_dir else (args, None)
