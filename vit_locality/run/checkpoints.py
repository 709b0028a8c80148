"""What Lightning's checkpoints lack: the identity stamp and the refusal to resume another config's, an atomic
commit (the replaced file kept as `<name>.prev.ckpt`), the choice of the furthest readable checkpoint, and reads that
never unpickle code and name a damaged file in one line (docs/design.md)."""

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
    """A checkpoint written under another config (or one that records none)."""

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
    """Local checkpoints written whole or not at all (Lightning's copy across file systems can tear one)."""

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
    """Lightning's own, `last.ckpt` rewritten every `every_n_epochs` epochs (`save_last` needs a top-k file)."""
    return ModelCheckpoint(
        dirpath=Path(run_dir) / CHECKPOINT_DIR,
        filename=Path(LAST_CHECKPOINT).stem,
        save_top_k=1,
        every_n_epochs=every_n_epochs,
        enable_version_counter=False,
    )


class InterruptCheckpoint(Callback):
    """`interrupted.ckpt` when a signal stops the fit after a whole batch, so it resumes bit-exactly. Not Lightning's
    OnExceptionCheckpoint: that one saves on any error, a mid-step state included."""

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
    """Single-number figures as floats, read in one copy per device and dtype (each read on a GPU waits for it)."""
    single = {name: value.detach().reshape(()) for name, value in metrics.items() if value.numel() == 1}
    groups: dict[tuple[torch.device, torch.dtype], list[str]] = {}
    for name, value in single.items():
        groups.setdefault((value.device, value.dtype), []).append(name)
    numbers: dict[str, float] = {}
    for names in groups.values():
        numbers.update(zip(names, map(float, torch.stack([single[name] for name in names]).tolist()), strict=True))
    return {name: numbers[name] for name in single}


class IdentityStamp(Callback):
    """Every checkpoint gets the cell's identity hash, so a re-run resumes only its own, and the figures logged so
    far, which a fit resumed at its end records."""

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
    """The identity hash stamped into a checkpoint; None for one that carries none."""
    entry = checkpoint.get(IDENTITY_ENTRY)
    return entry.get("identity_hash") if isinstance(entry, dict) else None


def completed_epochs(checkpoint: Mapping[str, Any]) -> int:
    """Epochs finished when the checkpoint was written (Lightning's `processed` count)."""
    try:
        return checkpoint_epochs_processed(dict(checkpoint))
    except UpstreamChanged:  # a checkpoint without Lightning's loop state
        return int(checkpoint.get("epoch", 0))


def read_checkpoint_bytes(path: Path) -> bytes:
    """A checkpoint file's bytes, a regular file only; DamagedCheckpoint, in one line, otherwise."""
    try:
        return read_regular_file(Path(path), CHECKPOINT_SIZE_LIMIT)
    except IsADirectoryError:
        raise DamagedCheckpoint(path, "a directory, not a regular file") from None
    except UnreadableFile as error:
        raise DamagedCheckpoint(path, error.why) from None


def load_checkpoint_bytes(data: bytes, path: Path, needs: Iterable[str] = ()) -> dict[str, Any]:
    """The checkpoint in `data`, never unpickling code; DamagedCheckpoint unless it holds every entry of `needs`."""
    if not data:
        raise DamagedCheckpoint(path, "empty file")
    try:
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # truncated, overwritten, holding code, or not a torch file at all
        raise _damaged(path, error, str(error).strip().split(". ")[0]) from None
    missing = tuple(key for key in needs if not isinstance(checkpoint, dict) or key not in checkpoint)
    if not isinstance(checkpoint, dict) or missing:
        raise DamagedCheckpoint(path, f"not a Lightning checkpoint (no {' or '.join(missing) or 'entries'})", missing)
    return checkpoint


def read_checkpoint_file(path: Path, needs: Iterable[str] = ()) -> dict[str, Any]:
    return load_checkpoint_bytes(read_checkpoint_bytes(path), path, needs)


def stamped_identity(path: Path) -> str | None:
    """The identity hash stamped into the checkpoint at `path`, its tensors memory-mapped and never read."""
    try:
        open_regular_file(path, CHECKPOINT_SIZE_LIMIT).close()  # a regular file within the size limit
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except (UnreadableFile, OSError) as error:
        raise DamagedCheckpoint(path, str(error)) from None
    except Exception as error:  # truncated, not a torch file, holding code, or an old format mmap cannot map
        raise _damaged(path, error, str(error).strip()) from None
    return checkpoint_identity(checkpoint) if isinstance(checkpoint, dict) else None


def _damaged(path: Path, error: Exception, text: str) -> DamagedCheckpoint:
    first = text.splitlines()[0] if text else "no further detail"
    return DamagedCheckpoint(path, f"{type(error).__name__}: {first[:160]}")


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
    """The furthest readable of `last.ckpt`, `interrupted.ckpt` and their predecessors, None for a fresh start; a
    damaged one is skipped with a warning, one of none of `identities` (today's first) refused, a non-file too."""
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
