"""`hydra/launcher=slurm`: submitit's SLURM launcher, following its jobs (vit_locality/sweep/slurm_launcher.py)."""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher

from vit_locality.sweep.slurm_launcher import launch_and_follow


class FollowingSlurmLauncher(SlurmLauncher):
    """Says one line per cell as its job is submitted, starts, is requeued (and why) and ends."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        return launch_and_follow(self, job_overrides, initial_job_idx)
