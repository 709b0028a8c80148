"""A packed cell as the pack runner holds it (run/pack.py), and what happens to each cell at the pack's events: its
instruments opened, its epoch's figures, measurements and checkpoint, its stop, failure or completion, each written
where a lone cell's would be."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from vit_locality.config.settings import RunSettings, eval_prefix
from vit_locality.data.on_device import DeviceTrainLoader
from vit_locality.run.cell import CellInterrupted
from vit_locality.run.checkpoints import discard_interrupted, last_checkpoint, previous_checkpoint
from vit_locality.run.interrupts import SigtermGate
from vit_locality.run.pack_state import PACK_ENTRY, evaluate_cells, pack_checkpoint, save_cell
from vit_locality.run.record_sections import result_sections
from vit_locality.store.record import write_record
from vit_locality.tracking.wandb_run import finish_wandb, publish_run_files

log = logging.getLogger("vit_locality")


@dataclass
class Member:
    """One cell of a pack, as the runner holds it: its settings, directory, record and the objects it trains with."""

    settings: RunSettings
    run_dir: Path
    identities: tuple[str, ...]
    record: dict[str, Any]
    datamodule: Any = None
    module: Any = None
    loader: DeviceTrainLoader | None = None
    loggers: list[Any] = field(default_factory=list)
    instruments: list[Any] = field(default_factory=list)
    view: SimpleNamespace = field(default_factory=SimpleNamespace)
    start: dict[str, Any] | None = None  # its pack checkpoint, when it resumes
    sums: torch.Tensor | None = None  # (loss x images, correct) over the epoch so far
    seen: int = 0
    fit_metrics: dict[str, float] = field(default_factory=dict)
    failed: bool = False  # recorded failed (fail)

    @property
    def name(self) -> str:
        return self.settings.run_name

    @property
    def progress(self) -> tuple[int, int]:
        """(epoch, step within it) the cell resumes at; (0, 0) for a fresh one."""
        entry = (self.start or {}).get(PACK_ENTRY) or {}
        return int(entry.get("epoch", 0)), int(entry.get("step", 0))


def fail(member: Member, error: str) -> None:
    log.error("%s failed: %s", member.name, error)
    member.failed = True
    write_record(member.run_dir, {**member.record, "error": error}, status="failed")
    finish_wandb(member.loggers, failed=True)


def open_instruments(member: Member, epochs_done: int) -> None:
    """The instruments' fit start: measure the initial model, or keep their rows up to the checkpoint."""
    if member.start is not None:
        for instrument in member.instruments:
            if hasattr(instrument, "on_load_checkpoint"):
                instrument.on_load_checkpoint(member.view, member.module, {"epoch": epochs_done})
        member.fit_metrics = dict(member.start[PACK_ENTRY].get("fit_metrics", {}))
        sums = member.start[PACK_ENTRY].get("sums")
        member.sums, member.seen = sums, int(member.start[PACK_ENTRY].get("seen", 0))
    for instrument in member.instruments:
        instrument.on_fit_start(member.view, member.module)


def end_epoch(
    members: list[Member], model: Any, optimizer: Any, epoch: int, steps: int, autocast: Any, seconds: float
) -> None:
    """Each cell's epoch figures to its loggers, its instruments' measurements, and its checkpoint."""
    splits = [m.datamodule.device_arrays(m.module.device).evaluation for m in members]
    evaluated = evaluate_cells(model, [m.module.preprocess for m in members], splits,
                               members[0].datamodule.eval_batch_size, autocast)  # fmt: skip
    shown = []
    for index, (member, figures) in enumerate(zip(members, evaluated, strict=True)):
        prefix = eval_prefix(int(member.settings.data.val_size or 0))
        loss_sum, correct = (member.sums / max(1, member.seen)).tolist()
        metrics = {f"{prefix}/{k}": v for k, v in figures.items()}
        metrics |= {"train/loss_epoch": loss_sum, "train/acc1": correct}
        member.fit_metrics = metrics
        member.view.global_step, member.view.current_epoch = (epoch + 1) * steps, epoch
        for logger in member.loggers:
            logger.log_metrics({**metrics, "epoch": float(epoch + 1)}, step=member.view.global_step - 1)
        member.module.model.load_state_dict(model.cell_state_dict(index))
        for instrument in member.instruments:
            if hasattr(instrument, "on_train_epoch_end"):
                instrument.on_train_epoch_end(member.view, member.module)
        for logger in member.loggers:
            logger.save()
        every = int(member.settings.callbacks.checkpoint_every_n_epochs)
        if (epoch + 1) % every == 0 or epoch + 1 == int(member.settings.trainer.max_epochs):
            save_progress(member, model, optimizer, index, (epoch + 1, 0))
        shown.append(f"{index + 1}: {figures['acc1']:.3f}")
    epochs = int(members[0].settings.trainer.max_epochs)
    log.info("pack epoch %d/%d (%.1f s), %s/acc1 by cell: %s", epoch + 1, epochs, seconds, prefix, ", ".join(shown))


def save_progress(member: Member, model: Any, optimizer: Any, index: int, at: tuple[int, int]) -> None:
    """The cell's pack checkpoint at (epoch, step): where its next attempt starts."""
    member.module.model.load_state_dict(model.cell_state_dict(index))
    steps = len(member.loader)
    progress = {
        "epoch": at[0], "step": at[1], "global_step": at[0] * steps + at[1], "identity": member.identities[0],
        "fit_metrics": member.fit_metrics, "sums": member.sums if at[1] else None, "seen": member.seen if at[1] else 0,
    }  # fmt: skip
    save_cell(pack_checkpoint(member.run_dir), model, optimizer, index, member.module.state_dict(), progress)


def interrupt(
    members: list[Member], model: Any, optimizer: Any, where: tuple[int, int, int], gate: SigtermGate
) -> None:
    """Checkpoint every cell at the step it reached, record it interrupted, and stop as a lone cell stops."""
    epoch, step, _ = where
    sigint = gate.sigint_received and not gate.time_limit
    signal_name = "SIGINT" if sigint else "SIGUSR2 (time limit)" if gate.time_limit else "SIGTERM"
    code = 130 if sigint else 140 if gate.time_limit else 143
    for index, member in enumerate(members):
        save_progress(member, model, optimizer, index, (epoch, step))
        error = "interrupted" if sigint else signal_name
        write_record(member.run_dir, {**member.record, "error": error}, status="interrupted")
        finish_wandb(member.loggers, failed=True)
    names = ", ".join(m.name for m in members)
    raise CellInterrupted(f"pack of {names} interrupted ({signal_name}); run the same command to resume", code,
                          signal_name)  # fmt: skip


def finish(
    member: Member, model: Any, optimizer: Any, index: int, figures: dict[str, float], timings: dict[str, float]
) -> dict[str, Any]:
    """Log the cell's test figures, close its instruments, write its final weights where a lone cell's are
    (last.ckpt) and its complete record."""
    test_metrics = {f"test/{k}": v for k, v in figures.items()}
    for logger in member.loggers:
        logger.log_metrics(test_metrics, step=member.view.global_step)
    member.module.model.load_state_dict(model.cell_state_dict(index))
    member.view.current_epoch = int(member.settings.trainer.max_epochs)
    for instrument in member.instruments:
        if hasattr(instrument, "on_fit_end"):
            instrument.on_fit_end(member.view, member.module)
    timings = {**timings, "total_s": timings["fit_s"] + timings["test_s"]}
    sections = result_sections(member.settings, member.view, member.datamodule, member.fit_metrics, test_metrics,
                               timings)  # fmt: skip
    record = member.record | sections
    for instrument in member.instruments:
        for key, section in instrument.record_section().items():
            merged = isinstance(section, dict) and isinstance(record.get(key), dict)
            record[key] = {**record[key], **section} if merged else section
    save_progress(member, model, optimizer, index, (int(member.settings.trainer.max_epochs), 0))
    pack_checkpoint(member.run_dir).replace(last_checkpoint(member.run_dir))
    previous_checkpoint(pack_checkpoint(member.run_dir)).unlink(missing_ok=True)
    write_record(member.run_dir, record, status="complete")
    discard_interrupted(member.run_dir)
    log.info("%s: test acc1 %.4f -> %s (packed)", member.name, test_metrics["test/acc1"], member.run_dir)
    wandb = member.settings.logger.wandb
    publish_run_files(member.loggers, member.run_dir, bool(wandb and wandb.log_model))
    finish_wandb(member.loggers, failed=False)
    return {**record, "status": "complete"}
