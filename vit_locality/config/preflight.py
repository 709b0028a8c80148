"""Check every cell of a command before anything runs: one line per problem, no traceback.

Left to Hydra, an unknown config option or a mistyped key is a multi-line error, and a sweep with a bad value in
its fifth cell would train four cells first. This module expands the command line (and the sweep saved in an
experiment config) into its cells and checks every one of them, and the output directory, so a typo costs a second.
It belongs to the entry points, which are the only code that imports Hydra; the command line is parsed with
Hydra's own parser (`upstream.hydra_args_parser`), so the cells checked are the cells Hydra would run.

Composing a cell with Hydra takes 30-50 ms, too slow for a sweep of hundreds of cells. Cells differ mostly in plain
values (`optim.lr=...`, `seed=...`), so Hydra composes each distinct combination of config-group choices once
(`data=`, `model=`, `experiment=` ...) and each cell applies its values to a copy the way Hydra's config loader does
(`key=value` only onto an existing key, `+key=` only a new one, `++key=` either, `~key` deletes).
"""

from __future__ import annotations

import copy
import itertools
import math
import re
import shlex
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
)

from vit_locality.config.checks import validate, validate_analysis
from vit_locality.config.file_access import check_directory
from vit_locality.config.identity import (
    ABSENT,
    canonical_value,
    covered_by_not_identity,
    fitted_name,
    identity_hash,
    identity_settings,
    reference_choices,
)
from vit_locality.config.override_values import apply_value, check_unread_settings, new_keys
from vit_locality.config.refusals import _group_options, explain, no_such_setting
from vit_locality.config.resolvers import register_resolvers
from vit_locality.config.schema import register_schemas
from vit_locality.errors import ConfigError
from vit_locality.upstream import hydra_args_parser

INFO_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc"}
# What each entry point's config must satisfy; `remote` (a SLURM submission) skips comparing devices with this host.
CHECKS: dict[str, Callable[[DictConfig, bool], None]] = {
    "train": lambda cfg, remote: validate(cfg, check_devices=not remote),
    "analyze": lambda cfg, remote: validate_analysis(cfg),
}
# Entry points that never write into Hydra's output directory (analyze writes beside the checkpoint, or to out_dir).
NO_OUTPUT_DIR = {"analyze"}
INTERPOLATION = re.compile(r"\$\{([\w.]+)\}")

Cell = tuple[str, ...]  # one override string per axis of the sweep


class Composer:
    """Cells' configs, each group combination composed by Hydra once; parsed overrides cached by their text."""

    def __init__(self, conf_dir: Path, config_name: str) -> None:
        self.conf_dir = conf_dir
        self.config_name = config_name
        self.parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())  # for glob()
        self._parsed: dict[str, Override] = {}
        self._composed: dict[Cell, tuple[DictConfig, DictConfig] | Exception] = {}
        self._references: dict[Cell, DictConfig] = {}
        self.added: list[str] = []  # the keys the current cell's `+`/`++` overrides created

    def parse(self, text: str) -> Override:
        if text not in self._parsed:
            self._parsed[text] = self.parser.parse_overrides([text])[0]
        return self._parsed[text]

    def is_group(self, override: Override) -> bool:
        """Hydra picks a config file for a group (a folder of conf/) and sets a value for any other key."""
        key = override.key_or_group
        return override.package is not None or "/" in key or (self.conf_dir / key).is_dir()

    def composed(self, groups: Cell) -> tuple[DictConfig, DictConfig]:
        """(job config, hydra config) for these group choices; a composition error is raised again for each cell."""
        if groups not in self._composed:
            try:
                cfg = compose(config_name=self.config_name, overrides=list(groups), return_hydra_config=True)
                with open_dict(cfg):
                    hydra_cfg = cfg.pop("hydra")
                self._composed[groups] = (cfg, hydra_cfg)
            except (HydraException, OmegaConfBaseException) as error:
                self._composed[groups] = error
        found = self._composed[groups]
        if isinstance(found, Exception):
            raise found
        return found

    def reference(self, hydra_cfg: DictConfig) -> DictConfig:
        """The config of a cell's data and model choices alone, which its run directory's name is told apart from
        (identity.identity_settings); a copy of its own, never one a cell's values are applied to."""
        choices = reference_choices(hydra_cfg.runtime.choices)
        if choices not in self._references:
            self._references[choices] = compose(config_name=self.config_name, overrides=list(choices))
        return self._references[choices]

    @contextmanager
    def config(self, cell: Iterable[str]) -> Iterator[tuple[DictConfig, DictConfig]]:
        """The cell's job config and its hydra config, for reading inside the `with` block only: the values are set
        on the group combination's shared config and the sections they touched put back afterwards (copying a whole
        config per cell would cost more than checking it)."""
        overrides = [self.parse(text) for text in cell]
        groups = tuple(o.input_line for o in overrides if self.is_group(o))
        values = [o for o in overrides if o.input_line not in groups]
        cfg, hydra_cfg = self.composed(groups)
        tops = {o.key_or_group.split(".")[0] for o in values}
        saved = {top: copy.deepcopy(cfg._get_node(top)) for top in tops if top in cfg}  # typed nodes stay typed
        self.added = []
        try:
            for override in values:
                self._apply(cfg, override)
            yield cfg, hydra_cfg
        finally:
            with open_dict(cfg):
                for top in tops:
                    if top in saved:
                        cfg[top] = saved[top]  # the node itself: interpolations and its schema stay
                    else:
                        cfg.pop(top, None)

    def _apply(self, cfg: DictConfig, override: Override) -> None:
        """Apply one value, noting the keys a `+`/`++` creates; one below a null section (`+logger.wandb.x=1`
        without logger=wandb) cannot be set at all, and is refused as a setting nothing reads."""
        if not (override.is_add() or override.is_force_add()):
            apply_value(cfg, override)
            return
        created = new_keys(cfg, override.key_or_group, override.value())
        self.added.extend(created)
        try:
            apply_value(cfg, override)
        except (AssertionError, OmegaConfBaseException):
            if not created:
                raise
            check_unread_settings(cfg, created)
            raise


def _axes(overrides: Iterable[Override], search: bool = False) -> dict[str, list[str]]:
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


def _split(composer: Composer, texts: list[str], multirun: bool) -> tuple[list[Override], dict[str, str], list[str]]:
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


def _check_hydra_keys(composer: Composer, keys: list[str], hydra_cfg: DictConfig) -> None:
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


def _refuse_saved_sweep_without_m(texts: list[str], hydra_cfg: DictConfig) -> None:
    """A saved sweep (`experiment=demo`) or search (`hparams_search=...`) run without `-m` would train its first
    cell alone, without a word: refused, with the command that runs it."""
    params = hydra_cfg.sweeper.get("params")
    if not params:
        return
    choices = hydra_cfg.runtime.choices
    chosen = next((f"{g}={choices[g]}" for g in ("experiment", "hparams_search") if choices.get(g)), "this config")
    kind = "a search" if choices.get("hparams_search") else f"a sweep over {', '.join(map(str, params))}"
    raise ConfigError(f"{chosen} is {kind}: run it with -m (python train.py -m {shlex.join(texts)})")


def _has(choice: str, group: str, path: str) -> bool:
    """Whether the Hydra config with `hydra/<group>=<choice>` has the dotted `path` (below `hydra.`)."""
    try:
        cfg = compose(config_name="train", overrides=[f"hydra/{group}={choice}"], return_hydra_config=True)
    except (HydraException, OmegaConfBaseException):
        return False
    return OmegaConf.select(cfg.hydra, path, default=ABSENT) is not ABSENT


def output_path(template: str, cfg: DictConfig) -> Path:
    """The directory a Hydra path template names for this config. Where it interpolates what only Hydra knows at
    run time (`${now:...}`, `${hydra:...}`), the part before: the directories that must be creatable regardless."""

    def value(match: re.Match[str]) -> str:
        found = OmegaConf.select(cfg, match.group(1), default=None, throw_on_resolution_failure=False)
        return match.group(0) if found is None else str(found)

    parts = Path(INTERPOLATION.sub(value, template)).parts
    return Path(*itertools.takewhile(lambda part: "${" not in part, parts))


def _saved_template(hydra_cfg: DictConfig, key: str) -> str:
    """The raw (unresolved) value of `hydra.run.dir` or `hydra.sweep.dir` in the composed Hydra config."""
    section, name = key.split(".")[1:]
    return str(OmegaConf.to_container(hydra_cfg[section], resolve=False)[name])


class Plan:
    """A command's cells and where they write, ready to check."""

    def __init__(self, composer: Composer, texts: list[str], multirun: bool, remote: bool) -> None:
        self.composer, self.multirun, self.remote = composer, multirun, remote
        job, self.dirs, hydra_values = _split(composer, texts, multirun)
        fixed = [o for o in job if not o.is_sweep_override()]
        self.sweep_problem: str | None = None
        search, saved = False, {}
        groups = [o.input_line for o in fixed if composer.is_group(o)]
        if hydra_values or not multirun:
            with composer.config(groups) as (_, hydra_cfg):
                _check_hydra_keys(composer, hydra_values, hydra_cfg)
                if not multirun:
                    _refuse_saved_sweep_without_m(texts, hydra_cfg)
        if multirun:  # the sweep's own config: the fixed overrides (Hydra leaves the swept ones to the cells)
            with composer.config([o.input_line for o in fixed]) as (cfg, hydra_cfg):
                self.sweep_problem = self._output_problem("hydra.sweep.dir", cfg, hydra_cfg)
                params = hydra_cfg.sweeper.get("params")  # a sweep saved in an experiment config adds its axes
                saved = OmegaConf.to_container(params) if params else {}
                search = "BasicSweeper" not in str(hydra_cfg.sweeper.get("_target_", "BasicSweeper"))
        axes = _axes(job, search)
        saved_axes = _axes((composer.parse(f"{k}={v}") for k, v in saved.items() if k not in axes), search)
        axes = {**saved_axes, **axes}
        self.cells: Iterable[Cell] = itertools.product(*axes.values())
        # How many cells the command runs (a search sweeper decides its own count): the sweep's "cell k of N".
        self.cell_count = math.prod(len(values) for values in axes.values()) if multirun and not search else None
        self.directories: dict[str, str] = {}  # run directory name -> the first cell that writes there
        self.identities: dict[str, str | None] = {}  # run directory name -> the identity of that first cell

    def problems(self) -> list[str]:
        """Every distinct problem, in the order the cells show them."""
        found: list[str] = []
        self._note(found, self.sweep_problem)
        for cell in self.cells:
            self._note(found, self._cell_problem(cell))
        return found

    @staticmethod
    def _note(found: list[str], problem: str | None) -> None:
        if problem and problem not in found:
            found.append(problem)

    def _output_problem(self, key: str, cfg: DictConfig, hydra_cfg: DictConfig) -> str | None:
        if self.composer.config_name in NO_OUTPUT_DIR:
            return None
        template = self.dirs.get(key) or _saved_template(hydra_cfg, key)
        try:
            check_directory(key, template, output_path(template, cfg))
        except ConfigError as error:
            return str(error)
        return None

    def _cell_problem(self, cell: Cell) -> str | None:
        check = CHECKS.get(self.composer.config_name)
        try:
            with self.composer.config(cell) as (cfg, hydra_cfg):
                check_unread_settings(cfg, self.composer.added)
                if check:
                    check(cfg, self.remote)
                if self.multirun:
                    return self._shared_directory(cell, cfg, self.composer.reference(hydra_cfg))
                return self._output_problem("hydra.run.dir", cfg, hydra_cfg)
        except ConfigError as error:
            return str(error)
        except (ConfigAttributeError, ConfigKeyError) as error:  # the values are in: a setting the run reads is gone
            return f"{error.full_key}: missing, and the run needs it (deleted with ~{error.full_key}?)"
        except (HydraException, OmegaConfBaseException) as error:
            return explain(error, self.composer.conf_dir)

    def _differ_outside_identity(self, first: str, second: str) -> bool:
        """Whether two cells' settings differ, after canonical spelling, only in keys that cannot change a result
        (workers, paths): then they are two commands for one directory, not one value spelled twice."""

        def settings(shown: str) -> dict[str, Any]:
            parsed = (self.composer.parse(text) for text in shown.split())
            return {
                o.get_key_element().lstrip("+~"): canonical_value(o.value()) for o in parsed if o.value() is not None
            }

        a, b = settings(first), settings(second)
        differing = {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)}
        return bool(differing) and all(covered_by_not_identity(key) for key in differing)

    def _shared_directory(self, cell: Cell, cfg: DictConfig, reference: DictConfig) -> str | None:
        """Two cells of one sweep must never write into one run directory (the name the job's `${cell_name:...}`
        gives: identity.identity_settings and fitted_name). Where the two are one cell (values spelled apart, or equal
        to their defaults), Hydra would still run it twice, side by side under a parallel launcher: refused too."""
        if "run_name" not in cfg:
            return None
        try:
            name = fitted_name(str(cfg.run_name), identity_settings(cfg, reference))
        except Exception:  # a value only the job resolves (an environment variable): the job's name is its own
            return None
        shown, seen = " ".join(cell), name in self.directories
        first = self.directories.setdefault(name, shown)
        identity = self.identities.setdefault(name, _identity_or_none(cfg))
        if not seen:
            return None
        same = first == shown or (identity is not None and identity == _identity_or_none(cfg))
        if same and not self._differ_outside_identity(first, shown):
            return (
                f"{first!r} and {shown!r} are one cell (equal values, spelled apart or equal to the default), which "
                f"would run twice into {name}: give each value once"
            )
        return (
            f"two cells of this sweep would write into one run directory {name}: {first!r} and {shown!r} differ only "
            "in settings that cannot change a result; sweep over one of them only, or set sweep_name per command"
        )


def _identity_or_none(cfg: DictConfig) -> str | None:
    try:
        return identity_hash(cfg)
    except Exception:  # a value only the job resolves (an environment variable): no identity to compare here
        return None


def check_command(
    argv: list[str], conf_dir: Path, config_name: str = "train", counted: list[int] | None = None
) -> list[str]:
    """Problems found in the command's cells, as one-line messages (empty when every cell is fine). `counted`, when
    given, receives the number of cells a `-m` command runs (nothing for a single run or a search)."""
    if any(arg.split("=")[0] in INFO_FLAGS for arg in argv):
        return []
    unprintable = next((arg for arg in argv if not arg.isprintable()), None)
    if unprintable is not None:  # a newline or an escape would forge or recolour log lines wherever it is shown
        return [f"{ascii(unprintable)[1:-1]} is not allowed: control characters (newline, tab, escape) in a value"]
    args = hydra_args_parser().parse_args(argv)
    if args.config_path or args.config_dir:  # another config tree (e.g. a DDP child composing a saved cell)
        return []
    config_name = args.config_name or config_name
    remote = any(o.startswith("hydra/launcher=") and "slurm" in o for o in args.overrides)
    register_resolvers()
    register_schemas()
    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        composer = Composer(Path(conf_dir), config_name)
        try:
            plan = Plan(composer, args.overrides, args.multirun, remote)
        except ConfigError as error:
            return [str(error)]
        except (HydraException, OmegaConfBaseException, ValueError) as error:
            return [explain(error, conf_dir)]
        problems = plan.problems()
        if counted is not None and plan.cell_count:
            counted.append(plan.cell_count)
        return problems
