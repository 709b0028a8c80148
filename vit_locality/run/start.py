"""Where a cell starts: from scratch, from its own checkpoint (a re-run resuming), or from a user's `ckpt_path`.

`ckpt_path=FILE` (with the default `ckpt_mode=weights`) starts a NEW cell from the file's model weights: optimizer,
schedule and epoch start afresh, and the file's content hash is part of the cell's identity and directory name
(config/identity.py), so it never shares a record with a cell trained from scratch. `ckpt_mode=resume` continues
the cell that wrote the file (optimizer, epoch and all), and only when the checkpoint's stored identity is this
run's. Either way the file is read through the checked reader (weights only, never code), and the record says
which file the cell started from.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from vit_locality.config.identity import RESUME_MODE, file_content_hash
from vit_locality.errors import ConfigError
from vit_locality.run.checkpoints import (
    ForeignCheckpoint,
    checkpoint_identity,
    read_checkpoint_file,
    read_checkpoint_info,
    resume_point,
)

log = logging.getLogger("vit_locality")


@dataclass
class StartPoint:
    """How the cell begins: `resume` a checkpoint to continue (None: a fresh fit) after `epochs` epochs; `weights`
    a model state dict to load before a fresh fit; `section` what the record says about a user's checkpoint."""

    resume: Path | None = None
    epochs: int = 0
    weights: dict[str, Any] | None = None
    section: dict[str, Any] = field(default_factory=dict)


def start_point(cfg: DictConfig, run_dir: Path, identity: str) -> StartPoint:
    """The cell's start, decided before anything is recorded. The run directory's own checkpoints (resume_point)
    come first: a cell started from weights and then preempted resumes its own progress, not the weights again.
    A damaged `ckpt_path` raises DamagedCheckpoint, one of another cell with `ckpt_mode=resume` ForeignCheckpoint
    (each one line, exit status 2)."""
    own, own_epochs = resume_point(run_dir, identity)
    given = cfg.get("ckpt_path")
    if given in (None, ""):
        return StartPoint(own, own_epochs)
    path = Path(str(given)).expanduser()
    if not path.is_file():  # checked before the run too (checks.py); the file may have gone since
        raise ConfigError(f"ckpt_path={str(given)!r} is not allowed: a checkpoint file this user can read")
    section = {"ckpt_path": str(path.resolve()), "ckpt_mode": RESUME_MODE, "ckpt_sha256": file_content_hash(str(path))}
    if str(cfg.get("ckpt_mode")) == RESUME_MODE:
        return _resume_from(path, identity, own, own_epochs, section)
    checkpoint = read_checkpoint_file(path, needs=("state_dict",))
    section.update(ckpt_mode="weights", ckpt_identity=checkpoint_identity(checkpoint))
    if own is not None:
        log.info("%s: resuming its own checkpoint %s (it started from the weights of %s)", cfg.run_name, own, path)
        return StartPoint(own, own_epochs, None, section)
    log.info("%s: a new cell from the weights of %s (ckpt_mode=weights)", cfg.run_name, path)
    return StartPoint(None, 0, checkpoint["state_dict"], section)


def _resume_from(path: Path, identity: str, own: Path | None, own_epochs: int, section: dict) -> StartPoint:
    """`ckpt_mode=resume`: the file continues this cell only if this cell wrote it; the furthest of it and the run
    directory's own checkpoints wins, so running the same command again after a preemption loses nothing."""
    info = read_checkpoint_info(path)
    if info.identity != identity:
        written_by = f"config {info.identity}" if info.identity else "an unknown config (it records no identity)"
        raise ForeignCheckpoint(
            f"ckpt_path={str(path)!r} with ckpt_mode=resume: the checkpoint was written by {written_by}, this run is "
            f"config {identity}; resume only continues the cell that wrote it (ckpt_mode=weights starts a new cell "
            "from its weights)"
        )
    if own is not None and read_checkpoint_info(own).global_step >= info.global_step:
        return StartPoint(own, own_epochs, None, section)
    return StartPoint(path, info.epochs, None, section)


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
