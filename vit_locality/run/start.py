"""Where a cell starts: from scratch, from its own checkpoint, or from a user's `ckpt_path` (`ckpt_mode=weights`: a
new cell from its weights, its content hash in the identity; `resume`: only the cell that wrote it continues). The
file is read once, so the identity, the record's `start.ckpt_sha256` and the weights loaded always agree."""

from __future__ import annotations

import csv
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vit_locality.attention.stats_log import CSV_FIELDS, REQUIRED_CSV_FIELDS, write_csv
from vit_locality.config.identity import (
    HASH_CHARS,
    START_NAME,
    bytes_content_hash,
    canonical_text,
    holds_cell,
    processes,
    run_identity,
    start_checkpoint,
)
from vit_locality.config.settings import RESUME_MODE, RunSettings
from vit_locality.errors import ConfigError, VitLocalityError
from vit_locality.run.checkpoints import (
    CheckpointInfo,
    ForeignCheckpoint,
    adopt_checkpoint,
    checkpoint_identity,
    checkpoint_info,
    furthest_checkpoint,
    load_checkpoint_bytes,
    read_checkpoint_bytes,
)
from vit_locality.store.file_read import read_csv_rows
from vit_locality.store.record import ATTENTION_CSV, CHECKPOINT_DIR, RecordError, read_record

log = logging.getLogger("vit_locality")
MAX_LISTED = 4  # differing settings a refusal names; the rest are counted


class StartChanged(VitLocalityError):
    """`ckpt_path` holds other content than the cell's directory was named for."""

    exit_code = 2


@dataclass
class StartFile:
    """`ckpt_path`, read once: its content hash, and its bytes until they are loaded (`take`)."""

    path: Path
    sha256: str
    data: bytes | None = field(default=None, repr=False)

    def take(self) -> bytes:
        data, self.data = self.data, None
        if data is None:
            raise RuntimeError(f"the bytes of {self.path} were loaded already")
        return data


@dataclass
class StartPoint:
    """How the cell begins: `resume` a checkpoint (None: a fresh fit) after `epochs` epochs, or load `weights` first;
    `section` is the record's word on a user's checkpoint, `fit_metrics` the resumed checkpoint's last figures."""

    resume: Path | None = None
    epochs: int = 0
    weights: dict[str, Any] | None = None
    section: dict[str, Any] = field(default_factory=dict)
    fit_metrics: dict[str, float] = field(default_factory=dict)


def read_start_file(settings: RunSettings, run_dir: Path) -> StartFile | None:
    """`ckpt_path`'s bytes and content hash; StartChanged when the run directory was named for other content."""
    given = settings.ckpt_path
    if given in (None, ""):
        return None
    path = Path(str(given)).expanduser()
    allowed = f"ckpt_path={str(given)!r} is not allowed: a checkpoint file this user can read"
    if not path.is_file():  # the gate checked it; the file may have gone since
        raise ConfigError(allowed)
    try:
        data = read_checkpoint_bytes(path)
    except OSError as error:
        raise ConfigError(f"{allowed} ({error.strerror or error})") from None
    start = StartFile(path, bytes_content_hash(data), data)
    named = re.search(rf"_{re.escape(START_NAME)}-([0-9a-f]{{{HASH_CHARS}}})(?=_|$)", Path(run_dir).name)
    if settings.ckpt_mode != RESUME_MODE and named and named.group(1) != start.sha256[:HASH_CHARS]:
        raise StartChanged(
            f"ckpt_path={str(given)!r} changed after the cell was named: {Path(run_dir).name} is named for content "
            f"{named.group(1)}, the file now holds {start.sha256[:HASH_CHARS]}; nothing was trained or recorded: run "
            "the command again once the file is settled"
        )
    return start


def start_point(
    settings: RunSettings, run_dir: Path, identities: tuple[str, ...], start: StartFile | None = None
) -> StartPoint:
    """The cell's start, decided before anything is recorded; the run directory's own checkpoints come first."""
    own = furthest_checkpoint(run_dir, identities)
    start = start if start is not None else read_start_file(settings, run_dir)
    if start is None:
        return StartPoint() if own is None else StartPoint(own.path, own.epochs, fit_metrics=own.fit_metrics)
    path = start.path
    section = {"ckpt_path": str(path.resolve()), "ckpt_mode": RESUME_MODE, "ckpt_sha256": start.sha256}
    if settings.ckpt_mode == RESUME_MODE:
        return _resume_from(settings, start, identities, run_dir, own, section)
    checkpoint = load_checkpoint_bytes(start.take(), path, needs=("state_dict",))
    section.update(ckpt_mode="weights", ckpt_identity=checkpoint_identity(checkpoint))
    if own is not None:
        started = f"it started from the weights of {path}"
        log.info("%s: resuming its own checkpoint %s (%s)", settings.run_name, own.path, started)
        return StartPoint(own.path, own.epochs, None, section, own.fit_metrics)
    log.info("%s: a new cell from the weights of %s (ckpt_mode=weights)", settings.run_name, path)
    return StartPoint(None, 0, checkpoint["state_dict"], section)


def _resume_from(
    settings: RunSettings,
    start: StartFile,
    identities: tuple[str, ...],
    run_dir: Path,
    own: CheckpointInfo | None,
    section: dict,
) -> StartPoint:
    """`ckpt_mode=resume`: the furthest of the file (this cell's only) and the run directory's own checkpoints; the
    file's bytes become the run directory's last.ckpt, its earlier statistics coming along."""
    data = start.take()
    info = checkpoint_info(load_checkpoint_bytes(data, start.path, needs=("global_step",)), start.path)
    if info.identity not in identities:
        raise ForeignCheckpoint(refused_resume(settings, start.path, info.identity))
    if own is not None and own.global_step >= info.global_step:
        return StartPoint(own.path, own.epochs, None, section, own.fit_metrics)
    section["history_from"] = carry_history(run_dir, info, identities)
    copy = adopt_checkpoint(run_dir, data)
    return StartPoint(copy, info.epochs, None, section, info.fit_metrics)


def load_start_weights(module: torch.nn.Module, weights: dict[str, Any], path: str) -> None:
    """Load a checkpoint's model weights; another architecture's is a one-line ConfigError naming `ckpt_path`."""
    try:
        module.load_state_dict(weights, strict=True)
    except RuntimeError as error:
        detail = str(error).strip().splitlines()
        why = " ".join(line.strip() for line in detail[1:3]) or (detail[0] if detail else "mismatch")
        raise ConfigError(
            f"ckpt_path={path!r} is not allowed: its weights do not fit this config's model ({why[:200]})"
        ) from None


def carry_history(run_dir: Path, info: CheckpointInfo, identities: tuple[str, ...]) -> str | None:
    """Start the run directory's attention_stats.csv with the rows, up to `info.epochs`, of the run directory the
    resumed checkpoint lies in; that directory, or None (with a warning) when it holds no such history."""
    source_dir = Path(info.path).resolve().parent.parent
    why = _why_not_history(source_dir, info, identities)
    if why is None:
        try:
            rows = read_csv_rows(source_dir / ATTENTION_CSV)
            for row in rows:
                if not set(REQUIRED_CSV_FIELDS) <= set(row) <= set(CSV_FIELDS):
                    raise ValueError(f"its columns are not among {', '.join(CSV_FIELDS)}")
                int(row["epoch"])  # ValueError for a row that names no epoch
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


def _why_not_history(source_dir: Path, info: CheckpointInfo, identities: tuple[str, ...]) -> str | None:
    if Path(info.path).resolve().parent.name != CHECKPOINT_DIR:
        return f"the checkpoint is not in a run directory's {CHECKPOINT_DIR}/"
    try:
        record = read_record(source_dir)
    except RecordError as error:
        return f"the record of {source_dir} is unusable ({error})"
    if record is None or not holds_cell(record.data, identities):
        return f"{source_dir} holds no record of this cell"
    if not (source_dir / ATTENTION_CSV).exists():
        return f"{source_dir} holds no {ATTENTION_CSV}"
    return None


def settings_that_differ(settings: RunSettings, checkpoint: Path) -> str:
    """`; the settings that differ: optim.lr 0.002 there, 0.001 here, ...` from the record beside `checkpoint`."""
    try:
        record = read_record(Path(checkpoint).resolve().parent.parent)
    except RecordError:
        return ""
    recorded = (record.data.get("config") if record is not None else None) or {}
    if not isinstance(recorded, dict) or not recorded:
        return ""
    theirs, mine = run_identity(recorded), run_identity(settings)
    differ = [
        f"{key} {canonical_text(theirs.get(key))} there, {canonical_text(mine.get(key))} here"
        for key in sorted(theirs.keys() | mine.keys())
        if canonical_text(theirs.get(key)) != canonical_text(mine.get(key))
    ]
    if processes(recorded) != processes(settings):
        differ.append(f"processes {processes(recorded)} there, {processes(settings)} here")
    started, starts = start_checkpoint(recorded), start_checkpoint(settings)
    if started != starts:
        there, here = (f"weights of {path}" if path else "scratch" for path in (started, starts))
        differ.append(f"start {there} there, {here} here")  # a start from weights is part of the identity
    if not differ:
        return "; the settings are the same: the checkpoint comes from older code"
    more = f" and {len(differ) - MAX_LISTED} more" if len(differ) > MAX_LISTED else ""
    return f"; the settings that differ: {', '.join(differ[:MAX_LISTED])}{more}"


def refused_resume(settings: RunSettings, checkpoint: Path, written_by: str | None) -> str:
    """The one line refusing `ckpt_mode=resume` of another config's checkpoint: the settings that differ."""
    head = f"ckpt_path={str(checkpoint)!r} with ckpt_mode=resume:"
    way_out = "resume only continues the cell that wrote it (ckpt_mode=weights starts a new cell from its weights)"
    if written_by is None:
        return f"{head} the checkpoint records no config (a cell of this project did not write it); {way_out}"
    differ = settings_that_differ(settings, checkpoint)
    if not differ:
        record = Path(checkpoint).resolve().parent.parent / "results.json"
        differ = f" (no record of it at {record} to name the settings that differ)"
    return f"{head} the checkpoint is another cell's{differ}; {way_out}"
