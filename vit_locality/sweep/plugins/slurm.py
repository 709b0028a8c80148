"""`hydra/launcher=slurm`: submitit's SLURM launcher, following its jobs (vit_locality/sweep/slurm_launcher.py);
`hydra/launcher=packed_slurm`: the same, one job per pack of cells (plugins/packed.py plans the packs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher

from vit_locality.sweep.packing import checked_pack_size, pack_id, plan_packs
from vit_locality.sweep.slurm_launcher import launch_and_follow, submit_packs


class FollowingSlurmLauncher(SlurmLauncher):
    """Says one line per cell as its job is submitted, starts, is requeued (and why) and ends."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        return launch_and_follow(self, job_overrides, initial_job_idx)


class PackedSlurmLauncher(FollowingSlurmLauncher):
    """One SLURM job per pack of cells that share a program (at most `cells_per_pack`); the cells that fit no pack
    after them, one job each, as `hydra/launcher=slurm` runs them."""

    def __init__(self, cells_per_pack: int = 8, **params: Any) -> None:
        super().__init__(**params)
        self.cells_per_pack = checked_pack_size(cells_per_pack)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        plan = plan_packs(self, job_overrides, initial_job_idx, self.cells_per_pack, train_alone=None)
        packs = [(plan.entries(pack), plan.cfgs(pack), pack_id(plan.entries(pack))) for pack in plan.packs]
        if packs:
            for pack, values in zip(plan.packs, submit_packs(self, plan.jobs, packs), strict=True):
                plan.returned(pack, values)
        if plan.alone:
            numbers = sorted(plan.alone)
            alone = launch_and_follow(self, [plan.alone[number] for number in numbers], initial_job_idx)
            plan.returns.update(zip(numbers, alone, strict=True))
        return plan.in_order()
