"""Silence what libraries print on every run that is not the user's concern. Called by the entry points (never at
import time), so importing the library changes no global logging or warning state."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import MutableMapping


def quiet_library_noise() -> None:
    quiet_wandb()
    # Lightning 2.6 with torch 2.14 warns about its own use of a torch pytree API at every fit.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # The per-epoch figures are logged whatever the interval; a short epoch (the demo's 31 batches, a quick check's 4)
    # under log_every_n_steps=50 only loses the per-step points, which is not worth a warning per cell.
    warnings.filterwarnings(
        "ignore", message=r"The number of training batches \(\d+\) is smaller than the logging interval"
    )
    # `epoch` is logged per epoch without reducing it over ranks: every rank has the same number (classifier.py).
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('epoch', \.\.\., sync_dist=True\)`")
    # Outside a SLURM job, Lightning's hint to start the run with `srun` (given wherever an `srun` is installed) is
    # noise on every cell; inside one, where forgetting srun matters, it stays.
    if "SLURM_JOB_ID" not in os.environ:
        warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")
    # Lightning advertises a cloud logger at every Trainer construction; one per cell of a sweep is noise.
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(lambda r: "Tip:" not in r.getMessage())


def quiet_wandb(environ: MutableMapping[str, str] | None = None) -> None:
    """W&B prints some 35 lines per run (banner, history sparklines, sync hints) to stderr, most of a cell's output:
    `WANDB_SILENT=true` unless the user set it (`WANDB_SILENT=false` brings them back). The cell runner says itself
    where an offline run went (wandb_run.finish_wandb)."""
    (os.environ if environ is None else environ).setdefault("WANDB_SILENT", "true")
