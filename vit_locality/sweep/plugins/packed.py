"""`hydra/launcher=packed`: the sweep's cells that can share a program trained as packs of at most
`cells_per_pack`, one process each, one fused model a pack (vit_locality/run/pack.py); a cell that fits no pack
trains as it would alone, after saying why. Every cell still goes through Hydra's job first: its directory, saved
config and log, as under the basic launcher (docs/packing.md). `hydra/launcher=packed_slurm` (plugins/slurm.py)
submits each pack as one SLURM job, from the same plan."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from hydra.core.utils import JobReturn

from vit_locality.sweep.packing import checked_pack_size, hydra_job, pack_id, plan_packs
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
