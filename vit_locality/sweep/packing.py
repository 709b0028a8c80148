"""Which cells of a sweep can share one program (hydra/launcher=packed): the same data, model shape, batch, epochs,
optimizer, schedule and Trainer; any protocol flags, smoothing, mixer and eraser settings and seed. A cell that fits
no pack says why in one line and trains as it would alone. The plan both packed launchers share (plugins/packed.py,
plugins/slurm.py) lives here: Hydra loads its plugins' files without importing them as modules."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from omegaconf import DictConfig, open_dict

from vit_locality.config.settings import RunSettings
from vit_locality.sweep.command import cell_key

log = logging.getLogger("vit_locality")
Cell = TypeVar("Cell")
PER_CELL = ("seed", "aug", "loss", "run_name", "tags", "optimized_metric")  # what the cells of a pack may differ in


def unpackable(settings: RunSettings | None) -> str | None:
    """Why the cell trains alone (one line), or None when it can join a pack."""
    if settings is None:
        return "its settings were not checked in this process"
    return settings.pack_refusal() or (None if settings.sweep.packed else "sweep.packed=false")


def pack_key(settings: RunSettings) -> str:
    """What the cells of one pack share: every setting but those a cell of a pack may have its own of."""
    record = settings.as_record()
    shared = {key: value for key, value in record.items() if key not in PER_CELL}
    return json.dumps(shared, sort_keys=True, default=str)


def group_packs(cells: Sequence[tuple[Cell, RunSettings]], cells_per_pack: int) -> list[list[Cell]]:
    """Packs of at most `cells_per_pack` cells that share a key, in the sweep's order (the first cell of each key
    opens its packs)."""
    by_key: dict[str, list[Any]] = {}
    for cell, settings in cells:
        by_key.setdefault(pack_key(settings), []).append(cell)
    packs = []
    for members in by_key.values():
        packs += [members[start : start + cells_per_pack] for start in range(0, len(members), cells_per_pack)]
    return packs


def checked_pack_size(cells_per_pack: Any) -> int:
    if isinstance(cells_per_pack, bool) or not isinstance(cells_per_pack, int) or cells_per_pack < 1:
        raise ValueError(f"hydra.launcher.cells_per_pack={cells_per_pack!r} is not allowed: an integer >= 1")
    return cells_per_pack


@dataclass
class PackPlan:
    """A sweep's cells as packs: each packed cell's settings, directory and config (its Hydra job has made the
    directory), the packs in the sweep's order, the overrides of the cells that train alone, and each cell's return."""

    numbers: list[int]
    jobs: Any  # the command's task (vit_locality.train.CellJobs): `run_pack` trains a pack
    registered: dict[int, tuple[RunSettings, Path, DictConfig]] = field(default_factory=dict)
    packs: list[list[int]] = field(default_factory=list)
    alone: dict[int, list[str]] = field(default_factory=dict)
    returns: dict[int, JobReturn] = field(default_factory=dict)

    def entries(self, pack: list[int]) -> list[tuple[RunSettings, Path]]:
        return [self.registered[number][:2] for number in pack]

    def cfgs(self, pack: list[int]) -> list[DictConfig]:
        return [self.registered[number][2] for number in pack]

    def returned(self, pack: list[int], values: Sequence[Any]) -> None:
        """Each packed cell's return (a search's objective), as its own job would have returned it."""
        for number, value in zip(pack, values, strict=True):
            self.returns[number].return_value = value

    def in_order(self) -> list[JobReturn]:
        return [self.returns[number] for number in self.numbers]


def plan_packs(
    launcher: Any,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    cells_per_pack: int,
    train_alone: Callable[[int, list[str]], JobReturn] | None,
) -> PackPlan:
    """Group the cells into packs and run each packed cell's Hydra job here (its directory, saved config, log); a cell
    that fits no pack says why and is trained by `train_alone` now (None: left in `alone` for the caller)."""
    task = launcher.task_function
    checked = getattr(task, "settings", {})  # the checking sweeper's CheckedTask: each cell's validated settings
    jobs = getattr(task, "task", None)
    cells = [(initial_job_idx + i, list(o), checked.get(cell_key(list(o)))) for i, o in enumerate(job_overrides)]
    plan = PackPlan([number for number, _, _ in cells], jobs)
    setup_globals()
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    for number, overrides, settings in cells:
        why = unpackable(settings) if hasattr(jobs, "run_pack") else "this command's task trains one cell at a time"
        if why is None:
            registering = Registering(settings, plan.registered, number)
            plan.returns[number] = hydra_job(launcher, number, overrides, registering)
            continue
        log.info("%s: trains alone (%s)", " ".join(filter_overrides(overrides)) or "cell", why)
        if train_alone is None:
            plan.alone[number] = overrides
        else:
            plan.returns[number] = train_alone(number, overrides)
    registered = [(number, plan.registered[number][0]) for number in sorted(plan.registered)]
    plan.packs = group_packs(registered, cells_per_pack)
    HydraConfig.instance().set_config(launcher.config)  # the command's, as the packs run outside any one cell's job
    return plan


def hydra_job(launcher: Any, number: int, overrides: list[str], task: Any) -> JobReturn:
    """One cell through Hydra's job on this machine, as the basic launcher runs it."""
    config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, overrides)
    with open_dict(config):
        config.hydra.job.id = number
        config.hydra.job.num = number
    returned = run_job(
        hydra_context=launcher.hydra_context,
        task_function=task,
        config=config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    return returned


def pack_id(entries: list[tuple[RunSettings, Path]]) -> str:
    """The pack's name in its cells' records: a hash of their directories, the same when the command runs again."""
    names = "\n".join(sorted(str(run_dir.resolve()) for _, run_dir in entries))
    return hashlib.sha256(names.encode()).hexdigest()[:12]


class Registering:
    """A packed cell's Hydra job: its directory and saved config are made; it is trained later, in its pack."""

    def __init__(
        self, settings: RunSettings, registered: dict[int, tuple[RunSettings, Path, DictConfig]], number: int
    ) -> None:
        self.settings, self.registered, self.number = settings, registered, number

    def __call__(self, cfg: DictConfig) -> None:
        self.registered[self.number] = (self.settings, Path(HydraConfig.get().runtime.output_dir), cfg)
