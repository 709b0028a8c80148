"""Check every cell of a command before anything runs: one line per problem, no traceback. Each cell is composed
(Hydra's compose API, or a sweep's sweeper's loader: plan_sweep), passed through the gate and named as its job will
name it, so a typo costs a second and two cells never write into one directory."""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import initialize_config_dir
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
)

from vit_locality.config.identity import (
    canonical_value,
    covered_by_not_identity,
    identities_of,
    inert_keys,
    outside_training,
)
from vit_locality.config.settings import RESUME_MODE, RunSettings
from vit_locality.errors import ConfigError
from vit_locality.precheck.command_line import (
    INTERPOLATION,
    check_directory,
    check_hydra_keys,
    command_args,
    output_path,
    override_axes,
    refuse_saved_sweep_without_m,
    saved_template,
    split_overrides,
)
from vit_locality.precheck.composer import COMPOSITION_ERRORS, Cell, Compose, Composer
from vit_locality.precheck.gate import settings_from, validate_analysis
from vit_locality.precheck.names import cell_name, occupied_problem
from vit_locality.precheck.refusals import explain
from vit_locality.precheck.resolvers import RUN_NAME, register_resolvers


def _check_train(cfg: DictConfig, remote: bool, ask_servers: bool) -> RunSettings:
    settings = settings_from(cfg, machine=not remote, ask_servers=ask_servers)
    if settings.ckpt_mode == RESUME_MODE:  # the checkpoint's identity (torch loads only for a resume)
        from vit_locality.precheck.gate import check_start

        check_start(settings)
    return settings


# What each entry point's config must satisfy (a cell's RunSettings, or what another entry checks); `remote` (a SLURM
# submission) skips comparing devices with this host, `ask_servers` asks a data set's server whether it answers.
CHECKS: dict[str, Callable[[DictConfig, bool, bool], object]] = {
    "train": _check_train,
    "analyze": lambda cfg, remote, ask_servers: validate_analysis(cfg),
}
# Entry points that never write into Hydra's output directory (analyze writes beside the checkpoint, or to out_dir).
NO_OUTPUT_DIR = {"analyze"}

MANY_CELLS = 50  # a sweep whose pre-check takes long enough (about 0.1-0.25 s a cell) to say what it is doing


class Plan:
    """A command's cells and where they write, ready to check."""

    def __init__(
        self,
        composer: Composer,
        texts: list[str],
        multirun: bool,
        remote: bool,
        ask_servers: bool = False,
        command: DictConfig | None = None,
        cells: list[Cell] | None = None,
    ) -> None:
        """`command`: the command's own config as Hydra composed it (else composed here); `cells`: the cells as the
        sweeper lists them (else the product of the command's axes)."""
        self.composer, self.multirun, self.remote, self.ask_servers = composer, multirun, remote, ask_servers
        job, self.dirs, hydra_values = split_overrides(composer, texts, multirun)
        fixed = [o for o in job if not o.is_sweep_override()]
        self.sweep_problem: str | None = None
        search, saved = False, {}
        # The command's own config: the whole cell of a single run; a sweep's fixed overrides (Hydra leaves the swept
        # ones to the cells).
        cfg, hydra_cfg = (command, command.hydra) if command is not None else composer.cell(o.input_line for o in fixed)
        check_hydra_keys(composer, hydra_values, hydra_cfg)
        if not multirun:
            refuse_saved_sweep_without_m(texts, hydra_cfg)
        else:
            self.sweep_problem = self._output_problem("hydra.sweep.dir", cfg, hydra_cfg)
            params = hydra_cfg.sweeper.get("params")  # a sweep saved in an experiment config adds its axes
            saved = OmegaConf.to_container(params) if params else {}
            search = "BasicSweeper" not in str(hydra_cfg.sweeper.get("_target_", "BasicSweeper"))
        axes = override_axes(job, search)
        saved_axes = override_axes((composer.parse(f"{k}={v}") for k, v in saved.items() if k not in axes), search)
        axes = {**saved_axes, **axes}
        # A single run is the command line as typed (Hydra runs it so); a sweep's cells as Hydra's sweeper lists them.
        single: Iterable[Cell] = [tuple(o.input_line for o in job)]
        self.cells: Iterable[Cell] = itertools.product(*axes.values()) if multirun else single
        self.cells = [tuple(cell) for cell in cells] if cells is not None else self.cells
        # How many cells the command runs (a search sweeper decides its own count): the sweep's "cell k of N".
        self.cell_count = math.prod(len(values) for values in axes.values()) if multirun and not search else None
        self.checked: dict[Cell, tuple[DictConfig, RunSettings]] = {}  # each cell's config and settings, named
        self.directories: dict[str, str] = {}  # run directory name -> the first cell that writes there
        self.run_dirs: dict[Cell, Path] = {}  # each cell's run directory, where it resolves here
        self.identities: dict[str, str | None] = {}  # run directory name -> the identity of that first cell
        self.inert: dict[str, tuple[str, ...]] = {}  # run directory name -> settings that cannot act there
        self.one_computation: dict[str, list[str]] = {}  # run directory name -> the cells that share it, trained once

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
        template = self.dirs.get(key) or saved_template(hydra_cfg, key)
        try:
            check_directory(key, template, output_path(template, cfg))
        except ConfigError as error:
            return str(error)
        return None

    def _cell_problem(self, cell: Cell) -> str | None:
        check = CHECKS.get(self.composer.config_name)
        try:
            cfg, hydra_cfg = self.composer.cell(cell)
            settings = check(cfg, self.remote, self.ask_servers) if check else None
            named = self._name(tuple(cell), settings, cfg, hydra_cfg) if isinstance(settings, RunSettings) else None
            if named is not None:
                self.checked[tuple(cell)] = (cfg, settings.named(named[0]))
            run_dir = None if cfg.get("ckpt_path") else self.run_dirs.get(tuple(cell))  # a start's: the cell checks
            if taken := occupied_problem(run_dir, named and named[1], self.multirun, self.dirs):
                return taken
            if self.multirun:
                return self._shared_directory(cell, named[0], named[1][0]) if named is not None else None
            return self._output_problem("hydra.run.dir", cfg, hydra_cfg)
        except ConfigError as error:
            return str(error)
        except (ConfigAttributeError, ConfigKeyError) as error:  # the values are in: a setting the run reads is gone
            return f"{error.full_key}: missing, and the run needs it (deleted with ~{error.full_key}?)"
        except COMPOSITION_ERRORS as error:
            return explain(error, self.composer.conf_dir, [self.composer.parse(text) for text in cell])

    def _name(
        self, cell: Cell, settings: RunSettings, cfg: DictConfig, hydra_cfg: DictConfig
    ) -> tuple[str, tuple[str, ...]] | None:
        """The cell's run directory name, as the job's `${cell_name:...}` gives it (names.cell_name, from the cell's
        settings and overrides), and its identity hashes (identities_of); noted with its directory for the entry point
        (`run_dirs`). Outside a Hydra job the run name resolves to its base."""
        parent = self._parent(cfg, hydra_cfg)
        try:
            name = cell_name(str(settings.run_name), cell, settings, parent)
            identities = identities_of(settings)
        except OSError:  # a start checkpoint that cannot be read: the gate said so already
            return None
        if parent is not None:
            self.run_dirs[cell] = parent / name
        self.inert[name] = tuple(inert_keys(settings))
        return name, identities

    def _parent(self, cfg: DictConfig, hydra_cfg: DictConfig) -> Path | None:
        """The directory the cell's run directory lives in, when the templates name it `<parent>/${run_name}` and the
        parent resolves here (resolvers.parent_directory is the job's side of the same rule)."""
        if self.multirun:
            if saved_template(hydra_cfg, "hydra.sweep.subdir") != RUN_NAME:
                return None
            template = self.dirs.get("hydra.sweep.dir") or saved_template(hydra_cfg, "hydra.sweep.dir")
        else:
            template = self.dirs.get("hydra.run.dir") or saved_template(hydra_cfg, "hydra.run.dir")
            if not template.endswith(RUN_NAME):
                return None
            template = template[: -len(RUN_NAME)].rstrip("/") or "."
        substituted = INTERPOLATION.sub(lambda m: str(OmegaConf.select(cfg, m.group(1), default="${}")), template)
        return None if "${" in substituted else Path(substituted)

    def _differ_outside_identity(self, first: str, second: str) -> bool:
        """Whether two cells' settings differ, after canonical spelling, only in keys that cannot change a result
        (workers, paths): then they are two commands for one directory, not one value spelled twice."""

        differing = self._differing(first, second)
        return bool(differing) and all(covered_by_not_identity(key) for key in differing)

    def _differing(self, first: str, second: str) -> set[str]:
        """The keys two cells' overrides set to different values, after canonical spelling."""

        def settings(shown: str) -> dict[str, Any]:
            parsed = (self.composer.parse(text) for text in shown.split())
            return {
                o.get_key_element().lstrip("+~"): canonical_value(o.value()) for o in parsed if o.value() is not None
            }

        a, b = settings(first), settings(second)
        return {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)}

    def _one_computation(self, first: str, second: str, inert: tuple[str, ...]) -> bool:
        """Whether two cells of one identity differ in settings that cannot act under their other values or that only
        say how the cell is measured (`aug.cutmix_alpha` with `aug.cutmix=false`, `stats.probe_size`): one
        computation, trained once; the second measures the first's weights if it asks another measurement."""
        differing = self._differing(first, second)
        return bool(differing) and all(
            outside_training(key, inert) and not covered_by_not_identity(key) for key in differing
        )

    def shared_lines(self) -> list[str]:
        """One line per run directory that several cells of the sweep share as one computation."""
        lines = []
        for name, cells in self.one_computation.items():
            common = set.intersection(*(set(cell.split()) for cell in cells))
            shown = (" ".join(part for part in cell.split() if part not in common) for cell in cells)
            lines.append(
                f"{' and '.join(map(repr, shown))} are one computation (settings that cannot act or only measure): "
                f"trained once, into {name}"
            )
        return lines

    def _shared_directory(self, cell: Cell, name: str, identity: str | None) -> str | None:
        """Two cells of one sweep must never write into one run directory (`name`, the cell's: Plan._name). Where the
        two are one cell (values spelled apart, or equal to their defaults), Hydra would still run it twice, side by
        side under a parallel launcher: refused too."""
        shown, seen = " ".join(cell), name in self.directories
        first = self.directories.setdefault(name, shown)
        first_identity = self.identities.setdefault(name, identity)
        if not seen:
            return None
        same = first == shown or (first_identity is not None and first_identity == identity)
        if same and self._one_computation(first, shown, self.inert.get(name, ())):
            self.one_computation.setdefault(name, [first]).append(shown)
            return None
        if same and not self._differ_outside_identity(first, shown):
            return (
                f"{first!r} and {shown!r} are one cell (equal values, spelled apart or equal to the default), which "
                f"would run twice into {name}: give each value once"
            )
        return (
            f"two cells of this sweep would write into one run directory {name}: {first!r} and {shown!r} differ only "
            "in settings that cannot change a result; sweep over one of them only, or set sweep_name per command"
        )


def _parsed(composer: Composer, texts: list[str]) -> list[Override]:
    try:
        return [composer.parse(text) for text in texts]
    except COMPOSITION_ERRORS:
        return []


@dataclass(frozen=True)
class CheckedCommand:
    """What the pre-check found in a command: its problems, one line each (none when every cell is fine), and the
    checked plan (each cell's run directory, the cell count) for the entry point; no plan where it checked no cells
    (an info flag, another config tree, a command refused before its cells)."""

    problems: list[str]
    plan: Plan | None = None


def plan_command(
    argv: list[str], conf_dir: Path, config_name: str = "train", ask_servers: bool = False
) -> CheckedCommand:
    """Check every cell of the command; with `ask_servers`, a data set to download needs its server to answer."""
    args, problem = command_args(argv)
    if args is None:
        return CheckedCommand([problem] if problem else [])
    config_name = args.config_name or config_name
    remote = any(o.startswith("hydra/launcher=") and "slurm" in o for o in args.overrides)
    register_resolvers()
    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        composer = Composer(Path(conf_dir), config_name)
        return _checked(
            composer, args.overrides, lambda: Plan(composer, args.overrides, args.multirun, remote, ask_servers)
        )


def plan_sweep(config: DictConfig, conf_dir: Path, compose_cell: Compose, cells: list[Cell] | None) -> CheckedCommand:
    """Check every cell of a multirun on Hydra's own compositions (its sweeper's): `config` is the command's, each
    cell composed by `compose_cell`; `cells` as the sweeper lists them (None: a search's bounds)."""
    hydra = config.hydra
    dirs = [o for o in hydra.overrides.hydra if o.split("=")[0] in ("hydra.run.dir", "hydra.sweep.dir")]
    overrides = [*hydra.overrides.task, *dirs]
    remote = "slurm" in str(hydra.runtime.choices.get("hydra/launcher"))
    composer = Composer(conf_dir, str(hydra.job.config_name), compose_cell)
    return _checked(composer, overrides, lambda: Plan(composer, overrides, True, remote, True, config, cells))


def _checked(composer: Composer, overrides: list[str], plan_of: Callable[[], Plan]) -> CheckedCommand:
    """The plan's problems, or the one that stops it being made."""
    try:
        plan = plan_of()
    except ConfigError as error:
        return CheckedCommand([str(error)])
    except (*COMPOSITION_ERRORS, ValueError) as error:
        return CheckedCommand([explain(error, composer.conf_dir, _parsed(composer, overrides))])
    if (plan.cell_count or 0) >= MANY_CELLS:  # Hydra composes each cell: say why the first one waits
        print(f"checking the {plan.cell_count} cells of this sweep before the first starts", file=sys.stderr)
    problems = plan.problems()
    for line in [] if problems else plan.shared_lines():
        print(line, file=sys.stderr)
    return CheckedCommand(problems, plan)


def check_command(argv: list[str], conf_dir: Path, config_name: str = "train", ask_servers: bool = False) -> list[str]:
    """Problems found in the command's cells, as one-line messages (empty when every cell is fine): `plan_command`'s
    problems, for the callers that need no plan."""
    return plan_command(argv, conf_dir, config_name, ask_servers).problems
