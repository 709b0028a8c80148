"""Where a cell's checkpoints live and which one a re-run resumes from.

`last.ckpt` is rewritten at every epoch boundary and `interrupted.ckpt` is written when SIGTERM or SIGINT stops
a cell mid-epoch (both by callbacks in callbacks/checkpointing.py); a re-run resumes from whichever has gone
further. Reading a checkpoint here never unpickles code (`weights_only=True`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
INTERRUPTED_CHECKPOINT = "interrupted.ckpt"


def last_checkpoint(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / LAST_CHECKPOINT


def interrupted_checkpoint(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / INTERRUPTED_CHECKPOINT


def completed_epochs(checkpoint: dict[str, Any]) -> int:
    """Epochs finished when the checkpoint was written. Lightning's `processed` counter: an end-of-epoch checkpoint
    is written after validation, before the epoch counts as `completed` (and `epoch` is still the finished one's
    index)."""
    try:
        return int(checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except (KeyError, TypeError):
        return int(checkpoint.get("epoch", 0))


def checkpoint_progress(path: Path) -> tuple[int, int]:
    """(global step, completed epochs) of a checkpoint; (-1, -1) when it cannot be read."""
    try:
        meta = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # a truncated or foreign file is not a checkpoint to resume from
        return -1, -1
    return int(meta.get("global_step", -1)), completed_epochs(meta)


def resume_point(run_dir: Path) -> tuple[Path | None, int]:
    """The furthest of `last.ckpt` (an epoch boundary) and `interrupted.ckpt` (mid-epoch, after a signal), with
    its completed epochs; (None, 0) for a fresh start."""
    candidates = [last_checkpoint(run_dir), interrupted_checkpoint(run_dir)]
    progress = {path: checkpoint_progress(path) for path in candidates if path.exists()}
    usable = {path: p for path, p in progress.items() if p[0] >= 0}
    if not usable:
        return None, 0
    best = max(usable, key=lambda path: usable[path][0])
    return best, usable[best][1]
