"""The pack runner: cells of one sweep that share data, model shape and budget (sweep/packing.py) trained side by side
as one fused model (model/fused.py) in one process, each still an ordinary cell: its own lock, record (`packed`
among its facts), per-epoch log and W&B run, attention statistics measured by the ordinary instruments on its own
weights, and a checkpoint of its own. A complete cell is skipped; a cell whose loss goes non-finite fails alone;
SIGTERM, SIGUSR2 or Ctrl-C stops the pack after its step, each cell checkpointed, and the same command resumes every
cell where it stopped (docs/packing.md)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from contextlib import ExitStack, nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vit_locality.config.identity import identities_of
from vit_locality.config.settings import RunSettings, uses_cuda
from vit_locality.data.on_device import BatchAugment, DeviceTrainLoader
from vit_locality.model.classifier import warmup_cosine
from vit_locality.model.fused import clip_per_cell, pack_loss
from vit_locality.run.builders import build_datamodule, build_loggers, build_module, resolve_precision
from vit_locality.run.cell import CallbackFactory, CellInterrupted, existing_record, previous_stop
from vit_locality.run.interrupts import SigtermGate, requeue_after_time_limit, sigterm_raises
from vit_locality.run.lock import RunLock
from vit_locality.run.pack_members import Member, end_epoch, fail, finish, interrupt, open_instruments
from vit_locality.run.pack_state import (
    PACK_ENTRY,
    build_pack,
    evaluate_cells,
    load_moments,
    narrowed,
    pack_checkpoint,
    pack_optimizer,
    read_cell,
)
from vit_locality.run.record_sections import identity_sections, setup_sections
from vit_locality.run.threads import apply_thread_count
from vit_locality.seeding import reseed_for_batch
from vit_locality.store.record import write_record
from vit_locality.tracking.wandb_run import RUN_ID_ENTRY, finish_wandb, recorded_run_id

log = logging.getLogger("vit_locality")
PACKED_ENTRY = "packed"  # the record's entry naming the cell's pack and its size


class StopRequest:
    """The SIGTERM handler while a pack trains: the stop is taken after the step in progress."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        self.signum = signum


def pack_device(settings: RunSettings) -> torch.device:
    return torch.device("cuda") if uses_cuda(settings.trainer.accelerator) else torch.device("cpu")


def run_pack(
    entries: list[tuple[RunSettings, Path]], make_callbacks: CallbackFactory, command_id: str, pack_id: str
) -> list[dict[str, Any] | None]:
    """Train the pack's cells into their directories; each one's record (None for a cell that failed)."""
    for settings, _ in entries:
        if not settings.packs:  # its identity would say it trained alone
            why = settings.pack_refusal() or "sweep.packed=false"
            raise ValueError(f"{settings.run_name} cannot train in a pack: {why}")
    apply_thread_count(entries[0][0].threads)
    deterministic = entries[0][0].trainer.deterministic  # as the Trainer applies `trainer.deterministic`
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=deterministic == "warn")
    with sigterm_raises() as gate:
        try:
            return _run_pack(entries, make_callbacks, command_id, pack_id, gate)
        except CellInterrupted:  # every cell recorded and its lock released
            requeue_after_time_limit(gate, f"pack {pack_id}")  # SIGUSR2 under submitit: requeued, or why not
            raise


def _run_pack(
    entries: list[tuple[RunSettings, Path]],
    make_callbacks: CallbackFactory,
    command_id: str,
    pack_id: str,
    gate: SigtermGate,
) -> list[dict[str, Any] | None]:
    with ExitStack() as stack:
        for _, run_dir in entries:
            Path(run_dir).mkdir(parents=True, exist_ok=True)
            stack.enter_context(RunLock(Path(run_dir), command_id))
        members, results = [], {}
        for settings, run_dir in entries:
            identities = identities_of(settings)
            complete, identities = existing_record(Path(run_dir), identities)
            if complete is not None:
                log.info("%s is complete already: skipped (results in %s)", settings.run_name, run_dir)
                results[settings.run_name] = complete.data
                continue
            record = identity_sections(settings, identities[0]) | previous_stop(Path(run_dir), identities)
            record.update(recorded_run_id(settings, Path(run_dir), identities[0]))
            members.append(Member(settings, Path(run_dir), identities, record))
        ready = [member for member in members if prepare(member, make_callbacks, pack_id, len(members))]
        try:
            for group in by_progress(ready):
                results.update(train_group(group, gate))
        except CellInterrupted:  # stopped after a step: every cell recorded and checkpointed
            raise
        except (KeyboardInterrupt, SIGTERMException) as stop:  # a second Ctrl-C, or a signal outside the steps
            sigterm = isinstance(stop, SIGTERMException)
            name = ("SIGUSR2 (time limit)" if gate.time_limit else "SIGTERM") if sigterm else "SIGINT"
            record_unfinished(ready, results, "interrupted", name if sigterm else "interrupted")
            code = (140 if gate.time_limit else 143) if sigterm else 130
            raise CellInterrupted(f"pack {pack_id} interrupted ({name}); run the same command to resume", code,
                                  name) from stop  # fmt: skip
        except Exception as error:
            record_unfinished(ready, results, "failed", f"{type(error).__name__}: {error}")
            raise
    return [results.get(settings.run_name) for settings, _ in entries]


def record_unfinished(members: list[Member], results: dict[str, Any], status: str, error: str) -> None:
    """What stopped the pack, in the record of each of its cells neither complete nor failed already."""
    for member in members:
        if member.name not in results and not member.failed:
            write_record(member.run_dir, {**member.record, "error": error}, status=status)
            finish_wandb(member.loggers, failed=True)


def prepare(member: Member, make_callbacks: CallbackFactory, pack_id: str, cells: int) -> bool:
    """Build the cell as it would be built alone (same seed, same order: the same initial weights); False when it
    failed (recorded as such)."""
    settings = member.settings
    try:
        L.seed_everything(settings.seed, workers=True, verbose=False)
        datamodule = build_datamodule(settings)
        datamodule.prepare_data()
        datamodule.setup("fit")
        # AutoAugment without host reads where a read would cost (CUDA); grouped on the CPU: the same pixels
        grouping = "select" if pack_device(settings).type == "cuda" else None
        datamodule.step_augment = BatchAugment(datamodule.image_size, settings.protocol, grouping=grouping)
        datamodule.batch_augment = None
        module = build_module(settings, datamodule).to(pack_device(settings))
        member.start = read_cell(pack_checkpoint(member.run_dir), member.identities)
        if member.start is not None:
            module.load_state_dict(member.start["state_dict"])
        module.on_fit_start()  # the step's augmentation tables on the device
        member.datamodule, member.module = datamodule, module
        member.record.update(setup_sections(settings, datamodule, module.model))
        member.record[PACKED_ENTRY] = {"pack_id": pack_id, "cells": cells}
        batch = datamodule.batch_size
        member.record["batch"] = {"global": batch, "per_device": batch, "world_size": 1}
        train = datamodule.device_arrays(module.device).train
        member.loader = DeviceTrainLoader(*train, batch, settings.seed, None)
        member.loggers = build_loggers(settings, member.run_dir, member.record.get(RUN_ID_ENTRY))
        member.instruments = [c for c in make_callbacks(settings, member.run_dir) if hasattr(c, "record_section")]
        member.view = SimpleNamespace(
            datamodule=datamodule, loggers=member.loggers, callbacks=member.instruments, is_global_zero=True,
            global_step=0, current_epoch=0, precision=resolve_precision(settings.trainer.precision,
                                                                        settings.trainer.accelerator),
        )  # fmt: skip
        write_record(member.run_dir, member.record, status="running")
        return True
    except Exception as error:
        fail(member, f"{type(error).__name__}: {error}")
        return False


def by_progress(members: list[Member]) -> list[list[Member]]:
    """Cells at the same point (epoch, step) train together; a cell that resumes elsewhere trains in its own pack."""
    groups: dict[tuple[int, int], list[Member]] = {}
    for member in members:
        groups.setdefault(member.progress, []).append(member)
    return list(groups.values())


def train_group(members: list[Member], gate: SigtermGate) -> dict[str, dict[str, Any]]:
    """Train cells that stand at one point together to their last epoch, test each and record it complete."""
    first = members[0].settings
    device = pack_device(first)
    shape = {"num_classes": members[0].datamodule.num_classes, "image_size": members[0].datamodule.image_size}
    shape["arch"] = first.model.architecture()
    optim = first.optim.model_dump()
    model = build_pack([m.module.model.state_dict() for m in members], **shape, device=device)
    optimizer = pack_optimizer(model, optim)
    load_moments(model, optimizer, [m.start[PACK_ENTRY] for m in members if m.start is not None])
    epochs, (start_epoch, start_step) = int(first.trainer.max_epochs), members[0].progress
    steps = len(members[0].loader)
    total = steps * epochs
    warmup = min(total, max(1, round(float(optim["warmup_epochs"]) * steps)))
    precision = members[0].view.precision
    autocast = torch.autocast(device.type, torch.bfloat16) if "bf16" in str(precision) else nullcontext()
    for member in members:
        open_instruments(member, start_epoch)
    where = f"epoch {start_epoch + 1}/{epochs}" + (f", step {start_step + 1}/{steps}" if start_step else "")
    log.info("pack of %d cells on %s, from %s:", len(members), device, where)
    for number, member in enumerate(members, 1):
        log.info("  cell %d: %s", number, member.name)
    stop = StopRequest()
    fit_began = time.perf_counter()
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if in_main else None
    try:
        with gate.deferring():
            for epoch in range(start_epoch, epochs):
                began = time.perf_counter()
                skip = start_step if epoch == start_epoch else 0
                batches = []
                for member in members:
                    member.loader.set_epoch(epoch)
                    member.loader.resume_from(epoch, skip)
                    batches.append(iter(member.loader))
                    if not skip:
                        member.sums, member.seen = None, 0
                for step in range(skip, steps):
                    if stop.signum is not None:
                        interrupt(members, model, optimizer, (epoch, step, steps), gate)
                    drawn = [next(batch) for batch in batches]
                    model, optimizer, members, batches = train_step(
                        model, optimizer, members, batches, drawn, (epoch, step, steps, total, warmup), autocast,
                        shape, optim,
                    )  # fmt: skip
                    if not members:
                        return {}
                end_epoch(members, model, optimizer, epoch, steps, autocast, time.perf_counter() - began)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    fit_s = time.perf_counter() - fit_began
    tested = time.perf_counter()
    splits = [m.datamodule.device_arrays(m.module.device).test for m in members]
    preprocess = [m.module.preprocess for m in members]
    figures = evaluate_cells(model, preprocess, splits, members[0].datamodule.eval_batch_size, autocast)
    timings = {"fit_s": fit_s, "test_s": time.perf_counter() - tested}  # the pack's, shared by its cells
    done = zip(members, figures, strict=True)
    return {m.name: finish(m, model, optimizer, index, f, timings) for index, (m, f) in enumerate(done)}


def train_step(
    model: Any,
    optimizer: Any,
    members: list[Member],
    batches: list[Any],
    drawn: list[Any],
    where: tuple[int, int, int, int, int],
    autocast: Any,
    shape: dict[str, Any],
    optim: dict[str, Any],
) -> tuple[Any, Any, list[Member], list[Any]]:
    """One optimizer step of every cell; a cell whose loss is not finite leaves the pack (failed) before the step."""
    epoch, step, steps, total, warmup = where
    device = next(model.parameters()).device
    images = torch.stack([images for images, _ in drawn])
    labels = torch.stack([labels for _, labels in drawn])
    global_step = epoch * steps + step
    factor = warmup_cosine(global_step, warmup, total, float(optim["min_lr_ratio"]))
    for group in optimizer.param_groups:
        group["lr"] = float(optim["lr"]) * factor  # as the lone cell's LambdaLR sets it
    smoothing = torch.tensor([m.settings.protocol.ls for m in members], device=device)
    seeds = [m.settings.seed for m in members]

    def reseed(index: int) -> None:
        reseed_for_batch(seeds[index], epoch, step, device)

    with autocast:
        losses, logits, references = pack_loss(model, [m.module for m in members], images, labels, smoothing, reseed)
    finite = torch.isfinite(losses.detach()).tolist()
    if not all(finite):
        keep = [index for index, ok in enumerate(finite) if ok]
        for index, ok in enumerate(finite):
            if not ok:
                fail(members[index], f"NonFiniteLossError: the training loss became non-finite at step {global_step}"
                                     " (its pack's other cells go on)")  # fmt: skip
        if not keep:
            return model, optimizer, [], []
        model, optimizer = narrowed(model, optimizer, keep, shape, optim)
        members, batches = [members[i] for i in keep], [batches[i] for i in keep]
        kept = [drawn[i] for i in keep]
        return train_step(model, optimizer, members, batches, kept, where, autocast, shape, optim)
    optimizer.zero_grad(set_to_none=True)
    losses.float().sum().backward()
    clip = members[0].settings.trainer.gradient_clip_val
    if clip is not None:
        clip_per_cell(list(model.parameters()), float(clip))
    optimizer.step()
    with torch.no_grad():
        count = references.shape[1]
        correct = (logits.argmax(-1) == references).sum(-1).float()
        sums = torch.stack([losses.detach().float() * count, correct], dim=1).cpu()
    for index, member in enumerate(members):
        member.sums = sums[index] if member.sums is None else member.sums + sums[index]
        member.seen += count
    return model, optimizer, members, batches
