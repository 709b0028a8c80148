"""A cell whose run directory already holds another config's finished run, refused before the first cell starts
(the cell refuses it too, run/cell.py, but only when its turn comes). An unfinished attempt or an unreadable record
is no conflict: the cell sets it aside or rewrites it."""

from __future__ import annotations

from pathlib import Path

from vit_locality.config.identity import holds_cell
from vit_locality.run.advice import way_out
from vit_locality.store.record import RecordError, read_record


def occupied_problem(
    run_dir: Path | None, identities: tuple[str, ...] | None, multirun: bool, dirs: dict[str, str]
) -> str | None:
    """One line when `run_dir` holds a complete run of another cell than the one of `identities` (identities_of);
    None otherwise or when either is unknown here. `dirs`: the output directories the command line sets (they
    decide the advice)."""
    if run_dir is None or not identities:
        return None
    try:
        record = read_record(run_dir)
    except RecordError:
        return None
    if record is None or not record.complete or holds_cell(record.data, identities):
        return None
    return (
        f"run directory {run_dir} already holds a complete run with a different config (nothing has run); move that "
        f"directory away or {way_out(run_dir, multirun, 'hydra.sweep.dir' in dirs)}"
    )
