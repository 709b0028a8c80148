"""Check every cell of a command before anything runs: one line per problem, no traceback.

Left to Hydra, an unknown config option or a mistyped key is a multi-line error, and a sweep with a bad value in
its fifth cell would train four cells first. This module expands the command line (and the sweep saved in an
experiment config) into its cells, composes each one and runs `config.validate` on it, so a typo costs a second.
It belongs to the entry points, which are the only code that imports Hydra; the command line is parsed with
Hydra's own parser (`upstream.hydra_args_parser`), so the cells checked are the cells Hydra would run.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .config import ConfigError, register_resolvers, validate
from .upstream import hydra_args_parser

MAX_CELLS_CHECKED = 512  # beyond this, the first 512 cells are checked (composition takes ~30 ms a cell)
INFO_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc"}


def _group_options(conf_dir: Path, group: str) -> list[str]:
    """The values a user may pick for a config group; files starting with `_` are bases the options build on."""
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml") if not p.name.startswith("_"))


def explain(error: Exception, conf_dir: Path) -> str:
    """One line for a composition error: the key, the value and what is allowed."""
    text = str(error)
    missing = re.search(r"Could not find '([\w/]+)/(\w+)'", text)
    if missing:
        group, value = missing.groups()
        return f"{group}={value} is not allowed: one of {', '.join(_group_options(conf_dir, group))}"
    unknown = re.search(r"Could not override '([\w.]+)'", text) or re.search(r"Key '(\w+)' is not in struct", text)
    if unknown:
        key = unknown.group(1)
        return f"{key}: no such setting (check the spelling; `python train.py --cfg job` lists every key)"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    return first


def _axes(overrides: list[str]) -> dict[str, list[str]]:
    """Each overridden key with its values (one value, or every value of a sweep); Hydra's own keys left out."""
    axes: dict[str, list[str]] = {}
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.get_key_element()
        if key.startswith("hydra") or key.lstrip("+~").startswith("hydra"):
            continue
        if override.is_sweep_override():
            axes[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            axes[key] = [f"{key}={override.get_value_element_as_str()}"]
    return axes


def check_command(argv: list[str], conf_dir: Path, config_name: str = "train") -> list[str]:
    """Problems found in the command's cells, as one-line messages (empty when every cell is fine)."""
    if any(arg.split("=")[0] in INFO_FLAGS for arg in argv):
        return []
    args = hydra_args_parser().parse_args(argv)
    if args.config_path or args.config_dir:  # another config tree (e.g. a DDP child composing a saved cell)
        return []
    config_name = args.config_name or config_name
    remote = any(o.startswith("hydra/launcher=") and "slurm" in o for o in args.overrides)
    register_resolvers()
    problems: list[str] = []
    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        try:
            axes = _axes(args.overrides)
            if args.multirun:  # a sweep saved in an experiment config adds its own axes
                first = [values[0] for values in axes.values()]
                base = compose(config_name=config_name, overrides=first, return_hydra_config=True)
                params = base.hydra.sweeper.get("params")
                saved = OmegaConf.to_container(params) if params else {}
                extra = _axes([f"{k}={v}" for k, v in saved.items() if k not in axes])
                axes.update(extra)
            cells = list(itertools.islice(itertools.product(*axes.values()), MAX_CELLS_CHECKED))
        except (HydraException, OmegaConfBaseException, ValueError) as error:
            return [explain(error, conf_dir)]
        for cell in cells:
            try:
                validate(compose(config_name=config_name, overrides=list(cell)), check_devices=not remote)
            except ConfigError as error:
                message = str(error)
            except (HydraException, OmegaConfBaseException) as error:
                message = explain(error, conf_dir)
            else:
                continue
            if message not in problems:
                problems.append(message)
    return problems
