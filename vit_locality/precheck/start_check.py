"""Refuse a `ckpt_mode=resume` of another cell's checkpoint before anything is made: its stamped identity against
this config's, read with the tensors memory-mapped (torch is imported only for a resume). The cell compares again
when it loads the file (run/start.py), which covers a file replaced in between."""

from __future__ import annotations

from pathlib import Path

from vit_locality.config.identity import identities_of
from vit_locality.config.settings import RESUME_MODE, RunSettings
from vit_locality.errors import ConfigError
from vit_locality.run.checkpoints import DamagedCheckpoint, stamped_identity
from vit_locality.run.start import refused_resume


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
    try:
        written_by = stamped_identity(path)
    except DamagedCheckpoint as damage:
        raise ConfigError(
            f"ckpt_path={str(path)!r} is not allowed: a readable checkpoint file ({damage.why})"
        ) from None
    if written_by not in identities_of(settings):
        raise ConfigError(refused_resume(settings, path, written_by))
