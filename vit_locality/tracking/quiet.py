"""Silence what libraries print on every run that is not the user's concern. Called by the entry points, never at
import time, so importing the library changes no global state."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import MutableMapping


def quiet_library_noise() -> None:
    quiet_wandb()
    # Lightning 2.6 with torch 2.14 warns about its own use of a torch pytree API at every fit.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # A short epoch under log_every_n_steps only loses per-step points; the per-epoch figures are logged anyway.
    warnings.filterwarnings(
        "ignore", message=r"The number of training batches \(\d+\) is smaller than the logging interval"
    )
    # `epoch` is logged per epoch without reducing it over ranks: every rank has the same number (classifier.py).
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('epoch', \.\.\., sync_dist=True\)`")
    # Lightning's hint to use `srun` matters only inside a SLURM job.
    if "SLURM_JOB_ID" not in os.environ:
        warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")
    # Lightning advertises a cloud logger at every Trainer construction; one per cell of a sweep is noise.
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(lambda r: "Tip:" not in r.getMessage())


def quiet_wandb(environ: MutableMapping[str, str] | None = None) -> None:
    """`WANDB_SILENT=true` unless the user set it: W&B's ~35 lines per run would be most of a cell's output."""
    (os.environ if environ is None else environ).setdefault("WANDB_SILENT", "true")
