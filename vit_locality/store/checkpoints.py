"""Where a cell's checkpoints live, which one a re-run resumes from, and which config wrote them.

`last.ckpt` is rewritten at every epoch boundary and `interrupted.ckpt` is written when SIGTERM or SIGINT stops
a cell mid-epoch (both by callbacks in callbacks/checkpointing.py). Each replacement keeps the checkpoint it
replaces as `<name>.prev.ckpt` (checkpoint_io.AtomicCheckpointIO), so one found damaged has a predecessor. A re-run
resumes from the furthest readable one, and only if its own config wrote it: every checkpoint carries the cell's
identity hash, and a checkpoint of another config (or of no known config) is refused rather than trained on.
Every reader of a checkpoint file (resume, `analyze`, the report's instruments) goes through
`read_checkpoint_file` (or `load_checkpoint_bytes`, for bytes read once and hashed: a user's `ckpt_path`), which
never unpickles code (`weights_only=True`) and turns any file that is not one into a one-line DamagedCheckpoint.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vit_locality.errors import VitLocalityError
from vit_locality.store.file_read import CHECKPOINT_SIZE_LIMIT, UnreadableFile, read_regular_file
from vit_locality.upstream import UpstreamChanged, checkpoint_epochs_processed

log = logging.getLogger("vit_locality")

CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
INTERRUPTED_CHECKPOINT = "interrupted.ckpt"
IDENTITY_ENTRY = "vit_locality"  # the checkpoint's entry naming the config that wrote it


class ForeignCheckpoint(VitLocalityError):
    """The run directory holds a checkpoint written under another config (or one that records no config): resuming
    it would train one config's weights under another's settings and record the result as the latter's."""

    exit_code = 2


class DamagedCheckpoint(VitLocalityError):
    """A checkpoint file that cannot be read as one (empty, truncated, not a torch file, one holding code, or lacking
    what a Lightning checkpoint holds). `why` is the reason alone; `missing` the entries it lacks, if that is why."""

    exit_code = 2

    def __init__(self, path: Path, why: str, missing: tuple[str, ...] = ()) -> None:
        super().__init__(f"checkpoint {path} is damaged ({why})")
        self.path, self.why, self.missing = Path(path), why, missing


class NotACheckpointFile(VitLocalityError):
    """A directory (or FIFO, device, ...) where a checkpoint file belongs: saving the next checkpoint there fails
    only after an epoch of training, so the run is refused before it starts."""

    exit_code = 2


@dataclass(frozen=True)
class CheckpointInfo:
    """What choosing a resume point needs from a checkpoint, without keeping its tensors."""

    path: Path
    global_step: int
    epochs: int
    identity: str | None
    fit_metrics: dict[str, float] = field(default_factory=dict)


def last_checkpoint(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / LAST_CHECKPOINT


def interrupted_checkpoint(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / INTERRUPTED_CHECKPOINT


def previous_checkpoint(path: Path) -> Path:
    """Where the checkpoint that `path` replaced is kept: `last.ckpt` -> `last.prev.ckpt`."""
    path = Path(path)
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def discard_interrupted(run_dir: Path) -> None:
    """Remove `interrupted.ckpt` and its predecessor once a finished run has superseded them."""
    for path in (interrupted_checkpoint(run_dir), previous_checkpoint(interrupted_checkpoint(run_dir))):
        path.unlink(missing_ok=True)


def stamp_identity(checkpoint: dict[str, Any], identity: str, fit_metrics: Mapping[str, float] | None = None) -> None:
    """Record in a checkpoint being saved which config (its identity hash) wrote it and the figures the fit had
    logged by then (`fit_metrics`: the last finished epoch's training and evaluation figures), so a fit resumed
    from it that trains nothing more still records them."""
    checkpoint[IDENTITY_ENTRY] = {"identity_hash": identity, "fit_metrics": dict(fit_metrics or {})}


def checkpoint_identity(checkpoint: dict[str, Any]) -> str | None:
    """The identity hash stamped into a checkpoint; None for one that carries none (not written by a cell)."""
    entry = checkpoint.get(IDENTITY_ENTRY)
    return entry.get("identity_hash") if isinstance(entry, dict) else None


def completed_epochs(checkpoint: dict[str, Any]) -> int:
    """Epochs finished when the checkpoint was written. Lightning's `processed` counter: an end-of-epoch checkpoint
    is written after validation, before the epoch counts as `completed` (and `epoch` is still the finished one's
    index)."""
    try:
        return checkpoint_epochs_processed(checkpoint)
    except UpstreamChanged:  # a checkpoint without Lightning's loop state
        return int(checkpoint.get("epoch", 0))


def read_checkpoint_bytes(path: Path) -> bytes:
    """A checkpoint file's bytes, read once through the bounded reader of run files (a regular file only: a FIFO or
    device put in its place would block the reader or never end); DamagedCheckpoint, in one line, otherwise."""
    try:
        return read_regular_file(Path(path), CHECKPOINT_SIZE_LIMIT)
    except IsADirectoryError:
        raise DamagedCheckpoint(path, "a directory, not a regular file") from None
    except UnreadableFile as error:
        raise DamagedCheckpoint(path, error.why) from None


def load_checkpoint_bytes(data: bytes, path: Path, needs: Iterable[str] = ()) -> dict[str, Any]:
    """The checkpoint held in `data` (read from `path`, which only names it in errors): tensors and plain data, never
    code; DamagedCheckpoint, saying why in one line, for bytes that are not a checkpoint holding every entry of
    `needs`."""
    path = Path(path)
    if not data:
        raise DamagedCheckpoint(path, "empty file")
    try:
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # truncated, overwritten, holding code, or not a torch file at all
        # Its first sentence: enough to tell a truncated file from a foreign one, on one line.
        first = str(error).strip().splitlines()[0].split(". ")[0] if str(error).strip() else "no further detail"
        raise DamagedCheckpoint(path, f"{type(error).__name__}: {first[:160]}") from None
    missing = tuple(key for key in needs if not isinstance(checkpoint, dict) or key not in checkpoint)
    if not isinstance(checkpoint, dict) or missing:
        raise DamagedCheckpoint(path, f"not a Lightning checkpoint (no {' or '.join(missing) or 'entries'})", missing)
    return checkpoint


def read_checkpoint_file(path: Path, needs: Iterable[str] = ()) -> dict[str, Any]:
    """load_checkpoint_bytes of the file at `path`, read through read_checkpoint_bytes."""
    return load_checkpoint_bytes(read_checkpoint_bytes(path), path, needs)


def checkpoint_info(checkpoint: dict[str, Any], path: Path) -> CheckpointInfo:
    """Progress, identity and last epoch's figures (stamp_identity; {} for a checkpoint without) of a checkpoint read
    already."""
    entry = checkpoint.get(IDENTITY_ENTRY)
    metrics = entry.get("fit_metrics") if isinstance(entry, dict) else None
    fit_metrics = {
        str(k): float(v)
        for k, v in (metrics if isinstance(metrics, dict) else {}).items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    return CheckpointInfo(
        Path(path),
        int(checkpoint["global_step"]),
        completed_epochs(checkpoint),
        checkpoint_identity(checkpoint),
        fit_metrics,
    )


def resume_point(run_dir: Path, identity: str) -> tuple[Path | None, int]:
    """furthest_checkpoint's path and completed epochs; (None, 0) for a fresh start."""
    best = furthest_checkpoint(run_dir, identity)
    return (None, 0) if best is None else (best.path, best.epochs)


def furthest_checkpoint(run_dir: Path, identity: str) -> CheckpointInfo | None:
    """The furthest readable checkpoint of `last.ckpt` (an epoch boundary), `interrupted.ckpt` (mid-epoch, after a
    signal) and their predecessors; None for a fresh start.

    A damaged checkpoint is skipped with a warning naming it and why. Any readable checkpoint whose identity is not
    `identity` raises ForeignCheckpoint: the directory belongs to another config; NotACheckpointFile when one of
    those paths is a directory or another non-file, which the run could neither resume from nor save over."""
    current = [last_checkpoint(run_dir), interrupted_checkpoint(run_dir)]
    candidates = [*current, *(previous_checkpoint(path) for path in current)]  # preferred first, when equally far
    for path in candidates:
        if path.exists() and not path.is_file():
            kind = "a directory" if path.is_dir() else "not a regular file"
            raise NotACheckpointFile(f"{path} is {kind}, where a checkpoint file belongs: move it away and run again")
    readable: list[CheckpointInfo] = []
    for path in filter(Path.exists, candidates):
        try:
            info = checkpoint_info(read_checkpoint_file(path, needs=("global_step",)), path)
        except DamagedCheckpoint as damage:
            log.warning("%s: not resuming from it", damage)
            continue
        if info.identity != identity:
            written_by = f"config {info.identity}" if info.identity else "an unknown config (it records no identity)"
            raise ForeignCheckpoint(
                f"checkpoint {info.path} was written by {written_by}, not by this one ({identity}); refusing to "
                f"resume it: move {Path(run_dir)} away or choose another sweep_name"
            )
        readable.append(info)
    if not readable:
        return None
    return max(readable, key=lambda info: info.global_step)  # the first of equals: the preferred candidate
