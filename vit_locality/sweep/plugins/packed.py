"""`hydra/launcher=packed`: the sweep's cells that can share a program trained as packs of at most
`cells_per_pack`, one process each, one fused model a pack (vit_locality/run/pack.py); a cell that fits no pack
trains as it would alone, after saying why. Every cell still goes through Hydra's job first: its directory, saved
config and log, as under the basic launcher (docs/packing.md). `hydra/launcher=packed_slurm` (plugins/slurm.py)
submits each pack as one SLURM job, from the same plan."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from omegaconf import DictConfig, open_dict

from vit_locality.config.settings import RunSettings
from vit_locality.sweep.command import cell_key
from vit_locality.sweep.packing import group_packs, unpackable
from vit_locality.upstream import hydra_basic_launcher_class

log = logging.getLogger("vit_locality")


class PackedLauncher(hydra_basic_launcher_class()):  # type: ignore[misc]  # Hydra's BasicLauncher
    """Hydra's basic launcher, training the cells that share a program as packs (see the module docstring)."""

    def __init__(self, cells_per_pack: int = 8) -> None:
        super().__init__()
        self.cells_per_pack = checked_pack_size(cells_per_pack)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        task = self.task_function

        def train_alone(number: int, overrides: list[str]) -> JobReturn:
            return hydra_job(self, number, overrides, task)

        plan = plan_packs(self, job_overrides, initial_job_idx, self.cells_per_pack, train_alone)
        for index, pack in enumerate(plan.packs):
            log.info("pack %d of %d: %d cells", index + 1, len(plan.packs), len(pack))
            plan.returned(pack, plan.jobs.run_pack(plan.entries(pack), plan.cfgs(pack), pack_id(plan.entries(pack))))
        return plan.in_order()


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
