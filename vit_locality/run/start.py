"""Where a cell starts: from scratch, from its own checkpoint (a re-run resuming), or from a user's `ckpt_path`.

`ckpt_path=FILE` (with the default `ckpt_mode=weights`) starts a NEW cell from the file's model weights: optimizer,
schedule and epoch start afresh, and the file's content hash is part of the cell's identity and directory name
(config/identity.py), so it never shares a record with a cell trained from scratch. `ckpt_mode=resume` continues
the cell that wrote the file (optimizer, epoch and all), and only when the checkpoint's stored identity is this
run's; into another directory, the checkpoint and the statistics before it come along (resume_elsewhere.py).

The file is read once (`read_start_file`), before the identity is built: its content hash is pinned for the
cell's run (identity.pinned_content_hash), and the weights are loaded from those same bytes, so the identity, the
record's `start.ckpt_sha256` and the weights always agree, whatever happens to the file later (StartChanged).
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vit_locality.config.identity import HASH_CHARS, START_NAME, bytes_content_hash, pinned_content_hash
from vit_locality.config.settings import RESUME_MODE, RunSettings
from vit_locality.errors import ConfigError, VitLocalityError
from vit_locality.run.advice import refused_resume
from vit_locality.run.resume_elsewhere import adopt_checkpoint, carry_history
from vit_locality.store.checkpoints import (
    CheckpointInfo,
    ForeignCheckpoint,
    checkpoint_identity,
    checkpoint_info,
    furthest_checkpoint,
    load_checkpoint_bytes,
    read_checkpoint_bytes,
)

log = logging.getLogger("vit_locality")


class StartChanged(VitLocalityError):
    """`ckpt_path` holds other content than the cell's directory was named for: the file was replaced after the cell
    was named. Training would record one checkpoint's weights under another's name."""

    exit_code = 2


@dataclass
class StartFile:
    """`ckpt_path`, read once: where it is, the content hash of the bytes read, and the bytes until they are loaded
    (`take`: a checkpoint can be large, and the cell runs on after loading it)."""

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
    """How the cell begins: `resume` a checkpoint to continue (None: a fresh fit) after `epochs` epochs; `weights`
    a model state dict to load before a fresh fit; `section` what the record says about a user's checkpoint;
    `fit_metrics` the figures of the resumed checkpoint's last finished epoch (the record's, should the fit train no
    further epoch)."""

    resume: Path | None = None
    epochs: int = 0
    weights: dict[str, Any] | None = None
    section: dict[str, Any] = field(default_factory=dict)
    fit_metrics: dict[str, float] = field(default_factory=dict)


def read_start_file(settings: RunSettings, run_dir: Path) -> StartFile | None:
    """`ckpt_path`'s bytes and their content hash (None without one); StartChanged, in one line, when the run
    directory's name (`..._ckpt-<hash>`) was given for other content than the file holds now."""
    given = settings.ckpt_path
    if given in (None, ""):
        return None
    path = Path(str(given)).expanduser()
    allowed = f"ckpt_path={str(given)!r} is not allowed: a checkpoint file this user can read"
    if not path.is_file():  # checked before the run too (checks.py); the file may have gone since
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


def pinned_start(start: StartFile | None) -> contextlib.AbstractContextManager[None]:
    """While the cell runs, every hash of `ckpt_path` (identity, run name, checkpoint stamps) is that of the bytes
    read once (StartFile.sha256)."""
    return contextlib.nullcontext() if start is None else pinned_content_hash(str(start.path), start.sha256)


def start_point(settings: RunSettings, run_dir: Path, identity: str, start: StartFile | None = None) -> StartPoint:
    """The cell's start, decided before anything is recorded. The run directory's own checkpoints
    (furthest_checkpoint) come first: a cell started from weights and then preempted resumes its own progress, not
    the weights again. A damaged `ckpt_path` raises DamagedCheckpoint, one of another cell with `ckpt_mode=resume`
    ForeignCheckpoint (each one line, exit status 2). `start` is `ckpt_path` as read_start_file read it."""
    own = furthest_checkpoint(run_dir, identity)
    if start is None:
        start = read_start_file(settings, run_dir)
    if start is None:
        return StartPoint() if own is None else StartPoint(own.path, own.epochs, fit_metrics=own.fit_metrics)
    path = start.path
    section = {"ckpt_path": str(path.resolve()), "ckpt_mode": RESUME_MODE, "ckpt_sha256": start.sha256}
    if settings.ckpt_mode == RESUME_MODE:
        return _resume_from(settings, start, identity, run_dir, own, section)
    checkpoint = load_checkpoint_bytes(start.take(), path, needs=("state_dict",))
    section.update(ckpt_mode="weights", ckpt_identity=checkpoint_identity(checkpoint))
    if own is not None:
        log.info(
            "%s: resuming its own checkpoint %s (it started from the weights of %s)", settings.run_name, own.path, path
        )
        return StartPoint(own.path, own.epochs, None, section, own.fit_metrics)
    log.info("%s: a new cell from the weights of %s (ckpt_mode=weights)", settings.run_name, path)
    return StartPoint(None, 0, checkpoint["state_dict"], section)


def _resume_from(
    settings: RunSettings, start: StartFile, identity: str, run_dir: Path, own: CheckpointInfo | None, section: dict
) -> StartPoint:
    """`ckpt_mode=resume`: the file continues this cell only if this cell wrote it; the furthest of it and the run
    directory's own checkpoints wins, so running the same command again after a preemption loses nothing. The file's
    bytes become the run directory's last.ckpt, and its earlier statistics come along (resume_elsewhere.py).
    Another cell's checkpoint is refused before the command starts (precheck/start_check.py); refused here too, for
    a file replaced since (ForeignCheckpoint, the same line)."""
    data = start.take()
    info = checkpoint_info(load_checkpoint_bytes(data, start.path, needs=("global_step",)), start.path)
    if info.identity != identity:
        raise ForeignCheckpoint(refused_resume(settings, start.path, info.identity))
    if own is not None and own.global_step >= info.global_step:
        return StartPoint(own.path, own.epochs, None, section, own.fit_metrics)
    section["history_from"] = carry_history(run_dir, info, identity)
    copy = adopt_checkpoint(run_dir, data)
    return StartPoint(copy, info.epochs, None, section, info.fit_metrics)


def load_start_weights(module: torch.nn.Module, weights: dict[str, Any], path: str) -> None:
    """Load a checkpoint's model weights into a freshly built module; a checkpoint of another architecture is a
    one-line ConfigError naming `ckpt_path`, before anything trains."""
    try:
        module.load_state_dict(weights, strict=True)
    except RuntimeError as error:
        detail = str(error).strip().splitlines()
        why = " ".join(line.strip() for line in detail[1:3]) or (detail[0] if detail else "mismatch")
        raise ConfigError(
            f"ckpt_path={path!r} is not allowed: its weights do not fit this config's model ({why[:200]})"
        ) from None
