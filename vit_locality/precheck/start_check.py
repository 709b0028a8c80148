"""Refuse a `ckpt_mode=resume` of another cell's checkpoint before anything is made.

`ckpt_mode=resume` continues the cell that wrote the checkpoint, and only that cell: the checkpoint carries the
identity hash of the config that wrote it (store/checkpoints.py). Compared here, in the pre-check, a mismatch is one
line naming the settings that differ (from the record beside the checkpoint, run/advice.py) before Hydra makes a
run directory or prints the config. Only the checkpoint's plain entries are read: its tensors are memory-mapped,
not loaded, so a large checkpoint costs little here; torch is imported only then (the pre-check of every other
command stays light). The cell compares again when it loads the file (run/start.py), which covers a file replaced
in between.
"""

from __future__ import annotations

from pathlib import Path

from vit_locality.config.identity import identity_hash
from vit_locality.config.settings import RESUME_MODE, RunSettings
from vit_locality.errors import ConfigError
from vit_locality.run.advice import refused_resume
from vit_locality.store.file_read import CHECKPOINT_SIZE_LIMIT, UnreadableFile, open_regular_file


def check_start(settings: RunSettings) -> None:
    """ConfigError, in one line, when `ckpt_mode=resume` names a checkpoint this config did not write (or one that
    cannot be read as a checkpoint). Nothing to check without `ckpt_path`, with `ckpt_mode=weights`, or for a path
    that is not a file (the value checks name that)."""
    given = settings.ckpt_path
    if settings.ckpt_mode != RESUME_MODE or given in (None, ""):
        return
    path = Path(str(given)).expanduser()
    if not path.is_file():
        return
    written_by = stamped_identity(path)
    if written_by != identity_hash(settings):
        raise ConfigError(refused_resume(settings, path, written_by))


def stamped_identity(path: Path) -> str | None:
    """The identity hash stamped into the checkpoint at `path` (None: it carries none), its tensors memory-mapped and
    never read; ConfigError naming `ckpt_path` for a file that is not a readable checkpoint."""
    import torch

    from vit_locality.store.checkpoints import checkpoint_identity

    allowed = f"ckpt_path={str(path)!r} is not allowed: a readable checkpoint file"
    try:
        open_regular_file(path, CHECKPOINT_SIZE_LIMIT).close()  # a regular file within the size limit
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except (UnreadableFile, OSError) as error:
        raise ConfigError(f"{allowed} ({error})") from None
    except Exception as error:  # truncated, not a torch file, holding code, or an old format mmap cannot map
        first = str(error).strip().splitlines()[0][:160] if str(error).strip() else "no further detail"
        raise ConfigError(f"{allowed} ({type(error).__name__}: {first})") from None
    return checkpoint_identity(checkpoint) if isinstance(checkpoint, dict) else None
