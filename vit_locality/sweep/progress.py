"""How far a sweep is: "cell k of N" when a cell starts, with the time the sweep has left.

The command counts its cells once (`count_cells`, the product of the swept values, as Hydra's basic sweeper and the
joblib launcher run them) and hands the count to every cell through the environment, which joblib's workers
inherit. The time left is the mean duration of the sweep's finished cells (their records' `timings.total_s`)
times the cells still to run; with parallel cells it is an upper bound.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from vit_locality.sweep.durations import duration_text

SWEEP_CELLS_ENV = "VIT_LOCALITY_SWEEP_CELLS"
MULTIRUN_FLAGS = ("-m", "--multirun")
SEARCH_SWEEPERS = ("hparams_search=", "hydra/sweeper=")  # a search decides its own trial count


def count_cells(argv: Iterable[str]) -> int | None:
    """The number of cells a `-m` command runs, or None (one run, a search sweeper, or overrides Hydra rejects)."""
    args = list(argv)
    if not any(arg in MULTIRUN_FLAGS for arg in args) or any(arg.startswith(SEARCH_SWEEPERS) for arg in args):
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [arg for arg in args if not arg.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        sizes = [len(list(o.sweep_iterator())) for o in parsed if o.is_sweep_override()]
    except Exception:  # the command's own check reports a bad override; a count is only a convenience
        return None
    return math.prod(sizes)


def announce_sweep_size(argv: Iterable[str], environ: dict[str, str] | None = None) -> None:
    """Put the command's cell count where every cell (and every joblib worker) can read it."""
    target = os.environ if environ is None else environ
    count = count_cells(argv)
    if count:
        target[SWEEP_CELLS_ENV] = str(count)


def finished_durations(sweep_dir: Path) -> list[float]:
    """Seconds each complete cell under `sweep_dir` took (its record's timings.total_s)."""
    durations = []
    for path in Path(sweep_dir).glob("*/results.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        seconds = (record.get("timings") or {}).get("total_s") if isinstance(record, Mapping) else None
        if record.get("status") == "complete" and isinstance(seconds, int | float) and seconds > 0:
            durations.append(float(seconds))
    return durations


def cell_start_line(number: int, total: int | None, durations: list[float]) -> str:
    """`cell 3 of 8, about 12 min 05 s left for the sweep (from 2 finished cells)`; `cell 3` without a count."""
    if not total:
        return f"cell {number}"
    line = f"cell {number} of {total}"
    if durations:
        left = (total - number + 1) * sum(durations) / len(durations)
        finished = f"{len(durations)} finished cell{'s' if len(durations) > 1 else ''}"
        line += f", about {duration_text(left)} left for the sweep (from {finished})"
    return line


def sweep_cells() -> int | None:
    """The count `announce_sweep_size` left for this cell, or None."""
    text = os.environ.get(SWEEP_CELLS_ENV, "")
    return int(text) if text.isdigit() else None
