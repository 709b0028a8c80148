"""The verdict of a sweep, read from its cells' records once every cell has run, whatever the launcher.

A cell's outcome is what its run directory records, not what the process that ran it remembers: under joblib
or submitit the cells run in other processes, and a cell can fail before it writes anything. Hydra calls this
callback in the launching process at the end of a multirun: it reads the records of the cells this command ran
(their `.hydra/` files were written after the multirun started), prints one line per cell and keeps the cells
that are not complete for `train.py` to turn into its exit status. Entry-point side: it imports Hydra.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from vit_locality.catalog import cell_name
from vit_locality.run.record import RecordError, read_record

# Cells of the last multirun of this process that did not end complete: (run directory, status).
incomplete_cells: list[tuple[Path, str]] = []


def cell_rows(run_dirs: list[Path]) -> list[dict[str, Any]]:
    """One row per run directory: cell, status, top-1 (%), min MAD, directory."""
    rows = []
    for run_dir in run_dirs:
        row: dict[str, Any] = {"cell": "?", "status": "no record", "top-1 (%)": "-", "min MAD": "-", "run": run_dir}
        try:
            record = read_record(run_dir)
        except RecordError as error:
            row["status"] = str(error)
            record = None
        if record is not None:
            row["status"] = record.status
            if record.complete:
                headline = record.headline()
                row["cell"] = cell_name(*record.flags)
                row["top-1 (%)"] = f"{100 * headline.acc1:.2f}"
                row["min MAD"] = "-" if math.isnan(headline.min_mad) else f"{headline.min_mad:.3f}"
        rows.append(row)
    return rows


def cells_run_since(sweep_dir: Path, started: float) -> list[Path]:
    """The run directories under `sweep_dir` whose job Hydra set up at or after `started` (a POSIX time)."""
    marks = sweep_dir.glob("**/.hydra/overrides.yaml")
    return sorted(mark.parent.parent for mark in marks if mark.stat().st_mtime >= started)


class SweepVerdict(Callback):
    def __init__(self) -> None:
        self.started = time.time()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.started = time.time() - 1.0  # file times may be coarser than the clock

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        rows = cell_rows(cells_run_since(Path(config.hydra.sweep.dir), self.started))
        incomplete_cells[:] = [(row["run"], row["status"]) for row in rows if row["status"] != "complete"]
        if not rows:
            return
        widths = {key: max(len(key), *(len(str(row[key])) for row in rows)) for key in rows[0]}
        print("  ".join(key.ljust(width) for key, width in widths.items()))
        for row in rows:
            print("  ".join(str(row[key]).ljust(width) for key, width in widths.items()))
        sys.stdout.flush()
