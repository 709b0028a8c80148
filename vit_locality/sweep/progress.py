"""How far a sweep is: "cell k of N" when a cell starts, with the time the sweep has left.

The pre-check counts the command's cells once (the product of the swept values, a saved sweep's included) and the
entry point hands the count to every cell through the environment, which joblib's workers inherit. The time left
is the mean duration of the sweep's finished cells (their records' `timings.total_s`) times the cells still to
run (not yet complete: a re-run that skips every cell has no time left to announce); with parallel cells it is an
upper bound.
"""

from __future__ import annotations

import os
from pathlib import Path

from vit_locality.store.record import RESULTS_FILE, RecordError, read_record
from vit_locality.sweep.durations import duration_text

SWEEP_CELLS_ENV = "VIT_LOCALITY_SWEEP_CELLS"


def announce_sweep_size(count: int | None, environ: dict[str, str] | None = None) -> None:
    """Put the command's cell count (the pre-check's, saved sweeps included) where every cell, and every joblib
    worker, can read it."""
    target = os.environ if environ is None else environ
    if count:
        target[SWEEP_CELLS_ENV] = str(count)


def finished_durations(sweep_dir: Path) -> list[float]:
    """Seconds each complete cell under `sweep_dir` took (its record's timings.total_s)."""
    durations = []
    for run_dir in sorted(path.parent for path in Path(sweep_dir).glob(f"*/{RESULTS_FILE}")):
        try:  # the one checked reader: regular files only, size-capped (a FIFO named results.json cannot hang it)
            record = read_record(run_dir)
        except RecordError:
            continue
        seconds = (record.data.get("timings") or {}).get("total_s") if record is not None else None
        if record is not None and record.complete and isinstance(seconds, int | float) and seconds > 0:
            durations.append(float(seconds))
    return durations


def cell_start_line(number: int, total: int | None, durations: list[float]) -> str:
    """`cell 3 of 8, about 12 min 05 s left for the sweep (from 2 finished cells)`; `cell 3` without a count. The
    cells still to run are those of the sweep not yet complete (a re-run skips the others): none, no estimate."""
    if not total:
        return f"cell {number}"
    line = f"cell {number} of {total}"
    to_run = min(total - number + 1, total - len(durations))
    if durations and to_run > 0:
        left = to_run * sum(durations) / len(durations)
        finished = f"{len(durations)} finished cell{'s' if len(durations) > 1 else ''}"
        line += f", about {duration_text(left)} left for the sweep (from {finished})"
    return line


def sweep_cells() -> int | None:
    """The count `announce_sweep_size` left for this cell, or None."""
    text = os.environ.get(SWEEP_CELLS_ENV, "")
    return int(text) if text.isdigit() else None
