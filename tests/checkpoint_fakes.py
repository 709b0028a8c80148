"""Checkpoints in Lightning's layout, stamped with an identity, and where the project resumes from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vit_locality.run.checkpoints import (
    furthest_checkpoint,
    interrupted_checkpoint,
    last_checkpoint,
    previous_checkpoint,
)


def resume_point(run_dir: Path, identity: str) -> tuple[Path | None, int]:
    """The furthest checkpoint's path and completed epochs; (None, 0) for a fresh start."""
    best = furthest_checkpoint(run_dir, identity)
    return (None, 0) if best is None else (best.path, best.epochs)


IDENTITY = "0123456789abcdef"


def lightning_checkpoint(step: int, epochs: int, identity: str | None = IDENTITY) -> dict[str, Any]:
    """The parts of a Lightning checkpoint that resuming reads, with the identity stamp callbacks add."""
    checkpoint: dict[str, Any] = {
        "global_step": step,
        "epoch": max(epochs - 1, 0),
        "loops": {"fit_loop": {"epoch_progress": {"current": {"processed": epochs}}}},
        "state_dict": {"weight": torch.full((64, 64), float(step))},
    }
    if identity is not None:
        checkpoint["vit_locality"] = {"identity_hash": identity}
    return checkpoint


def saved_step(path: Path) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=True)["global_step"])


def write_checkpoints(run_dir: Path, **steps: int) -> None:
    """`last=8, interrupted=10, last_prev=4`: checkpoints of this identity at those steps (4 steps an epoch)."""
    paths = {"last": last_checkpoint(run_dir), "interrupted": interrupted_checkpoint(run_dir)}
    paths |= {f"{name}_prev": previous_checkpoint(path) for name, path in paths.items()}
    for name, step in steps.items():
        paths[name].parent.mkdir(parents=True, exist_ok=True)
        torch.save(lightning_checkpoint(step, step // 4), paths[name])
