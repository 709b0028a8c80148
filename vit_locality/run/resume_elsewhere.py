"""A cell resumed (`ckpt_mode=resume`) from a checkpoint in another directory becomes a whole cell in its own.

The checkpoint's bytes (the ones read once, hashed and checked: run/start.py) become the new directory's
`checkpoints/last.ckpt`, and the fit resumes from that copy, so the directory holds its own checkpoint even when
nothing is left to train, and no later write to the source can change what was resumed. The attention statistics
of the epochs before the resume are read from the directory the checkpoint sits in (`<dir>/checkpoints/<file>`
with `<dir>/attention_stats.csv` and a record of the same identity): its rows up to the checkpoint's epochs start
the new directory's `attention_stats.csv`, and the record's `start.history_from` says where they came from (null,
with a warning, when there were none to take).
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path

from vit_locality.attention.stats_log import CSV_FIELDS, write_csv
from vit_locality.store.atomic import remove_leftovers, replace_atomically
from vit_locality.store.checkpoints import CHECKPOINT_DIR, CheckpointInfo, last_checkpoint, previous_checkpoint
from vit_locality.store.file_read import read_csv_rows
from vit_locality.store.record import ATTENTION_CSV, RecordError, read_record

log = logging.getLogger("vit_locality")


def adopt_checkpoint(run_dir: Path, data: bytes) -> Path:
    """Write `data` (a checkpoint's bytes) as the run directory's `last.ckpt`, whole or not at all, keeping the one
    it replaces as `last.prev.ckpt`; the path written."""
    target = last_checkpoint(run_dir)
    remove_leftovers(target)  # under the run directory's lock
    replace_atomically(target, lambda stream: stream.write(data), previous_checkpoint(target))
    return target


def carry_history(run_dir: Path, info: CheckpointInfo, identity: str) -> str | None:
    """Start the run directory's attention_stats.csv with the rows, up to `info.epochs`, of the directory that
    `info.path` belongs to; that directory (for the record), or None when it has no such history of this cell."""
    source_dir = Path(info.path).resolve().parent.parent
    why = _why_not_history(source_dir, info, identity)
    if why is None:
        try:
            rows = _read_rows(source_dir / ATTENTION_CSV)
        except (OSError, UnicodeDecodeError, ValueError, TypeError, csv.Error) as error:
            why = f"its {ATTENTION_CSV} is unreadable ({type(error).__name__}: {error})"
    if why is not None:
        log.warning(
            "resumed from %s: %s, so %s holds the statistics of the epochs after epoch %d only",
            info.path,
            why,
            ATTENTION_CSV,
            info.epochs,
        )
        return None
    kept = [row for row in rows if int(row["epoch"]) <= info.epochs]
    write_csv(Path(run_dir) / ATTENTION_CSV, kept)
    epochs = sorted({int(row["epoch"]) for row in kept})
    log.info("attention statistics of epochs %s carried over from %s", epochs, source_dir / ATTENTION_CSV)
    return str(source_dir)


def _why_not_history(source_dir: Path, info: CheckpointInfo, identity: str) -> str | None:
    """Why `source_dir` is no source of this cell's earlier statistics, or None when it is one."""
    if Path(info.path).resolve().parent.name != CHECKPOINT_DIR:
        return f"the checkpoint is not in a run directory's {CHECKPOINT_DIR}/"
    try:
        record = read_record(source_dir)
    except RecordError as error:
        return f"the record of {source_dir} is unusable ({error})"
    if record is None or record.identity_hash != identity:
        return f"{source_dir} holds no record of this cell"
    if not (source_dir / ATTENTION_CSV).exists():
        return f"{source_dir} holds no {ATTENTION_CSV}"
    return None


def _read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of an attention statistics file (the bounded reader of run files), each with exactly the known
    columns and an epoch."""
    rows = read_csv_rows(path)
    for row in rows:
        if not set(CSV_FIELDS[:9]) <= set(row) <= set(CSV_FIELDS):
            raise ValueError(f"its columns are not among {', '.join(CSV_FIELDS)}")
        int(row["epoch"])  # ValueError for a row that names no epoch
    return rows
