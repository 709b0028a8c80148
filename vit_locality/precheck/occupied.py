"""A cell whose run directory already holds another config's finished run, found before the first cell starts.

The cell itself refuses such a directory (run/cell.py, `existing_record`), but only when its turn comes: a sweep whose
third cell's directory is taken would train two cells first and then stop. The pre-check reads each named directory's
record once, the same way, and refuses the command in one line with the same way out. An unfinished attempt of
another config is no conflict (the cell sets it aside); an unreadable record neither (the cell runs and rewrites it).
"""

from __future__ import annotations

from pathlib import Path

from vit_locality.run.advice import way_out
from vit_locality.store.record import RecordError, read_record


def occupied_problem(run_dir: Path | None, identity: str | None, multirun: bool, dirs: dict[str, str]) -> str | None:
    """One line when `run_dir` holds a complete run whose identity is not `identity`; None otherwise or when either
    is unknown here. `dirs`: the output directories the command line sets (they decide the advice)."""
    if run_dir is None or identity is None:
        return None
    try:
        record = read_record(run_dir)
    except RecordError:
        return None
    if record is None or not record.complete or record.identity_hash == identity:
        return None
    return (
        f"run directory {run_dir} already holds a complete run with a different config (nothing has run); move that "
        f"directory away or {way_out(run_dir, multirun, 'hydra.sweep.dir' in dirs)}"
    )
