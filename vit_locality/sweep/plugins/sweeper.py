"""`hydra/sweeper=_checked`, the default (conf/hydra/sweeping): Hydra's basic sweeper, which composes every cell as
its launcher would and checks them all (vit_locality/precheck) before the first starts, then hands its launcher
those configs and their validated settings, so each cell is composed once and validated once (docs/runs.md)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from vit_locality.config.settings import RunSettings
from vit_locality.paths import CONF_DIR
from vit_locality.precheck.preflight import Plan, plan_sweep
from vit_locality.sweep.command import cell_key, current_command, publish_command, run_dirs_of
from vit_locality.sweep.progress import complete_already
from vit_locality.upstream import hydra_basic_sweeper_class

# A launcher's context is pickled into every job of joblib and submitit: the cells' configs ride along up to this
# many cells (a larger sweep's jobs compose their own, as Hydra's do).
CARRIED_CELLS = 64


class Precomposed:
    """The launcher's config loader: a checked cell's config is the one its check composed (taken once, its job
    changes it), any other is Hydra's loader's."""

    def __init__(self, loader: Any, configs: dict[tuple[str, ...], DictConfig]) -> None:
        self.loader, self.configs = loader, configs

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        found = self.configs.pop(cell_key(sweep_overrides), None)
        return found if found is not None else self.loader.load_sweep_config(master_config, sweep_overrides)

    def __getattr__(self, name: str) -> Any:  # the rest of Hydra's ConfigLoader (glob() asks for group options)
        if name.startswith("__") or name in ("loader", "configs"):
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __getstate__(self) -> dict[str, Any]:
        return {"loader": self.loader, "configs": self.configs if len(self.configs) <= CARRIED_CELLS else {}}


@dataclass(frozen=True)
class CheckedTask:
    """The task function, given each cell's settings as its check validated them (None: the job validates)."""

    task: TaskFunction
    settings: dict[tuple[str, ...], RunSettings]

    def __call__(self, cfg: DictConfig) -> Any:
        task_overrides = OmegaConf.to_container(HydraConfig.get().overrides.task)
        return self.task(cfg, self.settings.get(cell_key(task_overrides)))


def check_sweep(config: DictConfig, loader: Any, cells: list[tuple[str, ...]] | None) -> Plan:
    """Every cell composed by `loader` and checked; the sweep refused (exit status 2) on any problem, one line each.
    Its cells' count and run directories are then handed to its jobs (sweep/command.py) and its tree shown."""
    checked = plan_sweep(config, CONF_DIR, lambda overrides: loader.load_sweep_config(config, overrides), cells)
    for problem in checked.problems:
        print(f"error: {problem}", file=sys.stderr)
    if checked.problems or checked.plan is None:
        sys.exit(2)
    plan = checked.plan
    context = replace(current_command(), cell_count=plan.cell_count, run_dirs=run_dirs_of(plan.run_dirs))
    publish_command(context)
    print_sweep_tree(plan)
    return plan


class CheckingBasicSweeper(hydra_basic_sweeper_class()):  # type: ignore[misc]  # Hydra's BasicSweeper
    """Hydra's basic sweeper, checking every cell before the first starts (`check_sweep`) and launching each with
    the config and settings of its check (`Precomposed`, `CheckedTask`)."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.task_function = task_function

    def sweep(self, arguments: list[str]) -> Any:
        assert self.hydra_context is not None and self.config is not None
        loader = self.hydra_context.config_loader
        overrides = OverridesParser.create(config_loader=loader).parse_overrides([*self._parse_config(), *arguments])
        cells = [tuple(cell) for batch in self.split_arguments(overrides, self.max_batch_size) for cell in batch]
        plan = check_sweep(self.config, loader, cells)
        for cfg, settings in plan.checked.values():
            cfg.run_name = settings.run_name  # its directory as checked: neither Hydra nor the job names it again
        configs = {cell_key(cell): cfg for cell, (cfg, _) in plan.checked.items()}
        task = CheckedTask(self.task_function, {cell_key(cell): s for cell, (_, s) in plan.checked.items()})
        self.hydra_context = HydraContext(
            config_loader=Precomposed(loader, configs), callbacks=self.hydra_context.callbacks
        )
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=self.hydra_context, task_function=task, config=self.config
        )
        return super().sweep(arguments)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Nothing left to do: `sweep` composed and checked every cell before the first batch."""


def sweep_configs(plan: Plan) -> list[dict[str, Any]]:
    """The resolved config of each run directory of a sweep (its first cell's), as its check composed it."""
    composed = {" ".join(cell): tree for cell, tree in plan.composer.composed.items()}
    trees = [composed[shown] for shown in plan.directories.values() if shown in composed]
    return [OmegaConf.to_container(OmegaConf.create(tree), resolve=True) for tree in trees]


def every_cell_complete(plan: Plan) -> bool:
    """Whether every cell of a grid sweep is complete already (each then skipped in one line); a search's cells are
    the bounds it draws from, never complete."""
    if plan.cell_count is None or not plan.run_dirs:
        return False
    identities = (plan.identities.get(run_dir.name) for run_dir in plan.run_dirs.values())
    pairs = zip(plan.run_dirs.values(), identities, strict=True)
    return all(identity is not None and complete_already(run_dir, (identity,)) for run_dir, identity in pairs)


def print_sweep_tree(plan: Plan) -> None:
    """A sweep's config tree, once, before its first cell (`startup.print_config` of its first cell): what its
    cells share, and each setting they sweep with its values; none where every cell is complete already."""
    from vit_locality.precheck.tree import sweep_tree_text

    configs = sweep_configs(plan)
    if not configs or not (configs[0].get("startup") or {}).get("print_config") or every_cell_complete(plan):
        return
    if plan.cell_count is None:
        title = "config of the search (a swept setting lists the bounds or choices its trials are drawn from)"
    else:
        title = f"config of the {plan.cell_count} cells of this sweep (a swept setting lists its values)"
    print(sweep_tree_text(configs, title), flush=True)
