"""How far a sweep is: "cell k of N" as a cell starts, with the time left (the finished cells' mean duration times
the cells still to run, an upper bound with parallel cells); a cell complete already says only that it is skipped."""

from __future__ import annotations

from pathlib import Path

from vit_locality.config.identity import holds_cell
from vit_locality.store.record import RESULTS_FILE, RecordError, read_record


def duration_text(seconds: float) -> str:
    """12 s, 4 min 05 s, 2 h 03 min: as precise as a glance at a log needs."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def complete_already(run_dir: Path, identities: tuple[str, ...]) -> bool:
    """Whether `run_dir` holds the complete record of the cell whose hashes are `identities` (identities_of): the
    cell runner then skips it, saying so in one line, and the cell's start lines are left out."""
    try:  # the checked reader: a FIFO named results.json cannot hang it
        record = read_record(run_dir)
    except RecordError:
        return False
    return record is not None and record.complete and holds_cell(record.data, identities)


def finished_durations(sweep_dir: Path) -> list[float]:
    """Seconds each complete cell under `sweep_dir` took (its record's timings.total_s)."""
    durations = []
    for run_dir in sorted(path.parent for path in Path(sweep_dir).glob(f"*/{RESULTS_FILE}")):
        try:  # the checked reader: a FIFO named results.json cannot hang it
            record = read_record(run_dir)
        except RecordError:
            continue
        seconds = (record.data.get("timings") or {}).get("total_s") if record is not None else None
        if record is not None and record.complete and isinstance(seconds, int | float) and seconds > 0:
            durations.append(float(seconds))
    return durations


def cell_start_line(number: int, total: int | None, durations: list[float]) -> str:
    """`cell 3 of 8, about 12 min 05 s left for the sweep (from 2 finished cells)`; `cell 3` without a count."""
    if not total:
        return f"cell {number}"
    line = f"cell {number} of {total}"
    to_run = min(total - number + 1, total - len(durations))  # a re-run skips the complete cells
    if durations and to_run > 0:
        left = to_run * sum(durations) / len(durations)
        finished = f"{len(durations)} finished cell{'s' if len(durations) > 1 else ''}"
        line += f", about {duration_text(left)} left for the sweep (from {finished})"
    return line
