"""A cell's checkpoints on Lightning's lifecycle, and the pieces Lightning cannot give.

Lightning saves and resumes: its `ModelCheckpoint` writes `last.ckpt` every `callbacks.checkpoint_every_n_epochs`
epochs, `trainer.save_checkpoint` writes `interrupted.ckpt` when a signal stops the fit mid-epoch, and
`Trainer.fit(ckpt_path=...)` resumes (the datamodule's state, data/base.py, holds the sampler's place for an exact
mid-epoch resume). What is kept here is what Lightning cannot give: the identity stamp in every checkpoint and the
refusal to resume one of another config, an atomic commit (the replaced file kept as `<name>.prev.ckpt`), the choice
of the furthest readable checkpoint, and reads that never unpickle code and name a damaged file in one line.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vit_locality.errors import VitLocalityError
from vit_locality.store.atomic import remove_leftovers, replace_atomically
from vit_locality.store.file_read import CHECKPOINT_SIZE_LIMIT, UnreadableFile, open_regular_file, read_regular_file
from vit_locality.store.record import CHECKPOINT_DIR, INTERRUPTED_CHECKPOINT, LAST_CHECKPOINT
from vit_locality.upstream import UpstreamChanged, checkpoint_epochs_processed

log = logging.getLogger("vit_locality")
IDENTITY_ENTRY = "vit_locality"  # the checkpoint's entry naming the config that wrote it


class ForeignCheckpoint(VitLocalityError):
    """A checkpoint written under another config (or one that records none): resuming it would train one config's
    weights under another's settings and record the result as the latter's."""

    exit_code = 2


class DamagedCheckpoint(VitLocalityError):
    """A file that cannot be read as a checkpoint; `why` is the reason alone, `missing` the entries it lacks."""

    exit_code = 2

    def __init__(self, path: Path, why: str, missing: tuple[str, ...] = ()) -> None:
        super().__init__(f"checkpoint {path} is damaged ({why})")
        self.path, self.why, self.missing = Path(path), why, missing


class NotACheckpointFile(VitLocalityError):
    """A directory (or FIFO, device) where a checkpoint file belongs: saving there would fail after an epoch."""

    exit_code = 2


def last_checkpoint(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / LAST_CHECKPOINT


def interrupted_checkpoint(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / INTERRUPTED_CHECKPOINT


def previous_checkpoint(path: Path) -> Path:
    """Where the checkpoint that `path` replaced is kept: `last.ckpt` -> `last.prev.ckpt`."""
    path = Path(path)
    return path.with_name(f"{path.stem}.prev{path.suffix}")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's writer stages a checkpoint elsewhere and copies it in place across file systems, so a kill or a
    full disk leaves a truncated file: here it is written beside, fsynced and renamed over, the one it replaces kept
    as `<name>.prev.ckpt`. Remote paths (`s3://...`) keep Lightning's own handling."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        remove_leftovers(target)  # one process writes a run directory's checkpoints (run.lock.RunLock)
        replace_atomically(target, lambda stream: torch.save(checkpoint, stream), previous_checkpoint(target))

    def remove_checkpoint(self, path: Any) -> None:
        """Remove a checkpoint and the predecessor kept beside it."""
        super().remove_checkpoint(path)
        if "://" not in str(path):
            previous_checkpoint(Path(path)).unlink(missing_ok=True)


def adopt_checkpoint(run_dir: Path, data: bytes) -> Path:
    """Write a checkpoint's bytes as the run directory's `last.ckpt`, whole or not at all; the path written."""
    target = last_checkpoint(run_dir)
    remove_leftovers(target)  # under the run directory's lock
    replace_atomically(target, lambda stream: stream.write(data), previous_checkpoint(target))
    return target


def last_checkpoint_callback(run_dir: Path, every_n_epochs: int) -> ModelCheckpoint:
    """Lightning's own: `last.ckpt` rewritten every `every_n_epochs` epochs (its `save_last` writes only beside a
    top-k file, so the file name is set directly)."""
    return ModelCheckpoint(
        dirpath=Path(run_dir) / CHECKPOINT_DIR,
        filename=Path(LAST_CHECKPOINT).stem,
        save_top_k=1,
        every_n_epochs=every_n_epochs,
        enable_version_counter=False,
    )


class InterruptCheckpoint(Callback):
    """`interrupted.ckpt` when a signal stops the fit: SIGTERM (or a first Ctrl-C, turned into it by run/interrupts.py)
    stops after a whole batch, so the file resumes bit-exactly. Not Lightning's OnExceptionCheckpoint: that one saves
    on any error (a second Ctrl-C mid-step, a non-finite loss) and makes every later `fit(ckpt_path=None)` resume the
    newest file by time, past the identity check."""

    def __init__(self, run_dir: Path) -> None:
        self.ckpt_path = interrupted_checkpoint(run_dir)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt):
            log.warning(
                "interrupted at once (second Ctrl-C) in epoch %d: the state may be mid-step, so no %s is saved; "
                "the next run resumes from the last saved checkpoint and trains this epoch again",
                trainer.current_epoch + 1,
                INTERRUPTED_CHECKPOINT,
            )
            return
        if not isinstance(exception, SIGTERMException):
            return
        # On a GPU the loss is checked only every few steps: weights may have gone bad before the signal came.
        if not all(torch.isfinite(p).all() for p in pl_module.parameters()):
            log.warning("interrupted at step %d with non-finite weights: nothing saved", trainer.global_step)
            return
        trainer.save_checkpoint(self.ckpt_path)
        log.warning("interrupted at step %d: saved %s", trainer.global_step, self.ckpt_path)


def host_numbers(metrics: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """Single-number figures as floats, read in one copy per device and dtype (on a GPU each read waits for the
    device); each value as `float(tensor)` gives it, with no cast on the device (MPS has no float64)."""
    single = {name: value.detach().reshape(()) for name, value in metrics.items() if value.numel() == 1}
    groups: dict[tuple[torch.device, torch.dtype], list[str]] = {}
    for name, value in single.items():
        groups.setdefault((value.device, value.dtype), []).append(name)
    numbers: dict[str, float] = {}
    for names in groups.values():
        numbers.update(zip(names, map(float, torch.stack([single[name] for name in names]).tolist()), strict=True))
    return {name: numbers[name] for name in single}


class IdentityStamp(Callback):
    """Lightning records no config in a checkpoint: every checkpoint saved gets the cell's identity hash, so a re-run
    resumes only its own, and the figures logged so far, so a fit resumed at its end, training nothing more, still
    records them."""

    def __init__(self, identity: str) -> None:
        self.identity = identity

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        figures = host_numbers({k: v for k, v in trainer.callback_metrics.items() if k != "epoch"})
        checkpoint[IDENTITY_ENTRY] = {"identity_hash": self.identity, "fit_metrics": figures}


@dataclass(frozen=True)
class CheckpointInfo:
    """What choosing a resume point needs from a checkpoint, without keeping its tensors."""

    path: Path
    global_step: int
    epochs: int
    identity: str | None
    fit_metrics: dict[str, float] = field(default_factory=dict)


def checkpoint_identity(checkpoint: Mapping[str, Any]) -> str | None:
    """The identity hash stamped into a checkpoint; None for one that carries none (not written by a cell)."""
    entry = checkpoint.get(IDENTITY_ENTRY)
    return entry.get("identity_hash") if isinstance(entry, dict) else None


def completed_epochs(checkpoint: Mapping[str, Any]) -> int:
    """Epochs finished when the checkpoint was written: Lightning's `processed` count (an end-of-epoch checkpoint is
    written after validation, before the epoch counts as `completed`)."""
    try:
        return checkpoint_epochs_processed(dict(checkpoint))
    except UpstreamChanged:  # a checkpoint without Lightning's loop state
        return int(checkpoint.get("epoch", 0))


def read_checkpoint_bytes(path: Path) -> bytes:
    """A checkpoint file's bytes through the bounded reader of run files (a regular file only: a FIFO or a device in
    its place would block or never end); DamagedCheckpoint, in one line, otherwise."""
    try:
        return read_regular_file(Path(path), CHECKPOINT_SIZE_LIMIT)
    except IsADirectoryError:
        raise DamagedCheckpoint(path, "a directory, not a regular file") from None
    except UnreadableFile as error:
        raise DamagedCheckpoint(path, error.why) from None


def load_checkpoint_bytes(data: bytes, path: Path, needs: Iterable[str] = ()) -> dict[str, Any]:
    """The checkpoint in `data` (read from `path`, which names it in errors): tensors and plain data, never code;
    DamagedCheckpoint for bytes that are not a checkpoint holding every entry of `needs`."""
    if not data:
        raise DamagedCheckpoint(path, "empty file")
    try:
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # truncated, overwritten, holding code, or not a torch file at all
        first = str(error).strip().splitlines()[0].split(". ")[0] if str(error).strip() else "no further detail"
        raise DamagedCheckpoint(path, f"{type(error).__name__}: {first[:160]}") from None
    missing = tuple(key for key in needs if not isinstance(checkpoint, dict) or key not in checkpoint)
    if not isinstance(checkpoint, dict) or missing:
        raise DamagedCheckpoint(path, f"not a Lightning checkpoint (no {' or '.join(missing) or 'entries'})", missing)
    return checkpoint


def read_checkpoint_file(path: Path, needs: Iterable[str] = ()) -> dict[str, Any]:
    return load_checkpoint_bytes(read_checkpoint_bytes(path), path, needs)


def stamped_identity(path: Path) -> str | None:
    """The identity hash stamped into the checkpoint at `path` (None: it carries none), its tensors memory-mapped and
    never read (the pre-check's look at a large file); DamagedCheckpoint for a file that is no readable checkpoint."""
    try:
        open_regular_file(path, CHECKPOINT_SIZE_LIMIT).close()  # a regular file within the size limit
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except (UnreadableFile, OSError) as error:
        raise DamagedCheckpoint(path, str(error)) from None
    except Exception as error:  # truncated, not a torch file, holding code, or an old format mmap cannot map
        first = str(error).strip().splitlines()[0][:160] if str(error).strip() else "no further detail"
        raise DamagedCheckpoint(path, f"{type(error).__name__}: {first}") from None
    return checkpoint_identity(checkpoint) if isinstance(checkpoint, dict) else None


def checkpoint_info(checkpoint: Mapping[str, Any], path: Path) -> CheckpointInfo:
    """Progress, identity and last epoch's figures of a checkpoint read already."""
    entry = checkpoint.get(IDENTITY_ENTRY)
    metrics = entry.get("fit_metrics") if isinstance(entry, dict) else None
    fit_metrics = {
        str(k): float(v)
        for k, v in (metrics if isinstance(metrics, dict) else {}).items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    step, epochs = int(checkpoint["global_step"]), completed_epochs(checkpoint)
    return CheckpointInfo(Path(path), step, epochs, checkpoint_identity(checkpoint), fit_metrics)


def furthest_checkpoint(run_dir: Path, identities: str | tuple[str, ...]) -> CheckpointInfo | None:
    """Lightning resumes the file it is given: this picks it. The furthest readable of `last.ckpt` (an epoch
    boundary), `interrupted.ckpt` (mid-epoch) and their predecessors, None for a fresh start; a damaged one is skipped
    with a warning, one of another identity refused (ForeignCheckpoint), a non-file in their place too. `identities`:
    the cell's hashes, today's first (identity.identities_of)."""
    identities = (identities,) if isinstance(identities, str) else identities
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
        if info.identity not in identities:
            written_by = f"config {info.identity}" if info.identity else "an unknown config (it records no identity)"
            raise ForeignCheckpoint(
                f"checkpoint {info.path} was written by {written_by}, not by this one ({identities[0]}); refusing to "
                f"resume it: move {Path(run_dir)} away or choose another sweep_name"
            )
        readable.append(info)
    return max(readable, key=lambda info: info.global_step) if readable else None


def discard_interrupted(run_dir: Path) -> None:
    """Remove `interrupted.ckpt` and its predecessor once a finished run has superseded them."""
    for path in (interrupted_checkpoint(run_dir), previous_checkpoint(interrupted_checkpoint(run_dir))):
        path.unlink(missing_ok=True)
