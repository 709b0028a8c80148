"""The cell runner: one protocol cell, end to end, into its run directory: skip a complete cell of the same identity
and data, refuse a directory holding another config's complete run, set aside another config's unfinished attempt,
start, record `running`, fit, test, record `complete`; whatever stops it is recorded before it propagates."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from vit_locality.config.identity import (
    APPLIES_WHEN,
    holds_cell,
    identities_of,
    identity_hash,
    inert_keys,
)
from vit_locality.config.protocol import AugConfig
from vit_locality.config.settings import RunSettings, uses_cuda
from vit_locality.data import ImageDataModule
from vit_locality.errors import ConfigError, VitLocalityError
from vit_locality.model.classifier import compile_choice
from vit_locality.run.builders import (
    build_datamodule,
    build_loggers,
    build_module,
    build_trainer,
    split_global_batch,
    trainer_world_size,
)
from vit_locality.run.checkpoints import discard_interrupted
from vit_locality.run.interrupts import SigtermGate, requeue_after_time_limit, sigterm_raises
from vit_locality.run.lock import RunLock, another_directory
from vit_locality.run.record_sections import data_change, identity_sections, result_sections, setup_sections
from vit_locality.run.remeasure import add_labels, remeasure_if_asked
from vit_locality.run.start import StartFile, StartPoint, load_start_weights, read_start_file, start_point
from vit_locality.run.threads import apply_thread_count
from vit_locality.store.record import (
    PREVIOUS_STOP,
    RESULTS_FILE,
    RecordError,
    RecordSection,
    RunRecord,
    read_record,
    write_record,
)
from vit_locality.tracking.wandb_run import RUN_ID_ENTRY, finish_wandb, publish_run_files, recorded_run_id

log = logging.getLogger("vit_locality")
CallbackFactory = Callable[[RunSettings, Path], list[Callback]]
PREVIOUS_ATTEMPTS = "previous_attempts"
# What a run leaves in its directory besides Hydra's files: moved together when an attempt is set aside.
RUN_OUTPUTS = (RESULTS_FILE, "checkpoints", "csv", "wandb", "attention_stats.csv", "*.png")


class CellInterrupted(VitLocalityError):
    """SIGTERM (e.g. SLURM preemption), SIGUSR2 (SLURM's time-limit warning) or SIGINT stopped the cell; a resumable
    checkpoint was saved when it could be. Its exit status is the shell's for the signal: 143 SIGTERM, 140 SIGUSR2,
    130 SIGINT."""

    def __init__(self, message: str, exit_code: int, signal_name: str = "") -> None:
        super().__init__(message)
        self.exit_code, self.signal_name = exit_code, signal_name


def existing_record(run_dir: Path, identities: tuple[str, ...]) -> tuple[RunRecord | None, tuple[str, ...]]:
    """The directory's complete record of this cell (to skip), or None to run it, and the hashes its record and
    checkpoints may carry. Another identity's complete record is refused; its unfinished attempt is set aside."""
    try:
        record = read_record(run_dir)
    except RecordError as error:
        log.warning("%s: %s; running the cell again", run_dir, error)
        return None, identities
    if record is None:
        return None, identities
    if holds_cell(record.data, identities):
        known = tuple(dict.fromkeys([*identities, str(record.identity_hash)]))
        return (record if record.complete else None), known
    if record.complete:
        raise ConfigError(
            f"run directory {run_dir} already holds a complete run with a different config; "
            f"{another_directory(run_dir)}"
        )
    aside = run_dir / PREVIOUS_ATTEMPTS / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    aside.mkdir(parents=True)
    for pattern in RUN_OUTPUTS:  # what the attempt left (record, checkpoints, logs, pictures): moved, never deleted
        for path in run_dir.glob(pattern):
            shutil.move(str(path), str(aside / path.name))
    log.warning("%s held an unfinished run of another config (status %r): moved to %s", run_dir, record.status, aside)
    return None, identities


def previous_stop(run_dir: Path, identities: tuple[str, ...]) -> dict[str, str]:
    """Why this cell's last attempt stopped (`previous_stop`), kept in the new attempt's record: a launcher that
    polls after the next attempt has started still reads why the job went back to the queue."""
    try:
        record = read_record(run_dir)
    except RecordError:
        return {}
    if record is None or record.identity_hash not in identities or record.complete or not record.data.get("error"):
        return {}
    return {PREVIOUS_STOP: str(record.data["error"])}


def is_rank_zero() -> bool:
    return rank_zero_only.rank == 0


def run_cell(
    settings: RunSettings, run_dir: Path, make_callbacks: CallbackFactory, command_id: str = ""
) -> dict[str, Any]:
    """Train and test one cell into `run_dir`; return its record (an existing one if complete). `make_callbacks`
    gives everything the Trainer gets besides loggers; `command_id` (sweep/command.py) shares its lock's waits."""
    apply_thread_count(settings.threads)  # before anything is built: the count sets the float sums' order
    run_dir = Path(run_dir)
    # `ckpt_path` is read once: the identity, the name and the weights all come from these bytes (start.py).
    start_file = read_start_file(settings, run_dir)
    settings = settings.reading_start(start_file.sha256) if start_file is not None else settings
    identities = tuple(dict.fromkeys((identity_hash(settings), *identities_of(settings))))  # today's first
    say_inert_settings(settings)
    # One process per run directory: DDP ranks > 0 (and other nodes) share rank 0's directory, and its lock.
    holds_lock = is_rank_zero() and os.environ.get("NODE_RANK", "0") == "0"
    try:
        lock = RunLock(run_dir, command_id) if holds_lock else nullcontext()
        with lock, sigterm_raises() as gate:
            try:
                return _run_locked(settings, run_dir, make_callbacks, identities, gate, start_file)
            except (KeyboardInterrupt, SIGTERMException) as stop:  # before the cell recorded anything
                raise _interruption(settings, gate, stop) from stop
    except CellInterrupted:
        requeue_after_time_limit(gate, settings.run_name)  # SIGUSR2 under submitit: requeued, or a line saying why not
        raise


def _run_locked(
    settings: RunSettings,
    run_dir: Path,
    make_callbacks: CallbackFactory,
    identities: tuple[str, ...],
    gate: SigtermGate,
    start_file: StartFile | None = None,
) -> dict[str, Any]:
    candidate, identities = existing_record(run_dir, identities)
    identity = identities[0]
    record = identity_sections(settings, identity) | previous_stop(run_dir, identities)
    record.update(recorded_run_id(settings, run_dir, identity))  # the W&B run id, kept from the cell's first start on
    L.seed_everything(settings.seed, workers=True, verbose=False)
    datamodule = build_datamodule(settings)
    if candidate is not None:
        return _skip_or_refuse(settings, run_dir, candidate, datamodule)
    # Before anything is recorded: a checkpoint of another config is refused without writing over its directory,
    # and so is a ckpt_path that is damaged or (ckpt_mode=resume) another cell's.
    start = start_point(settings, run_dir, identities, start_file)
    if start.section:
        record["start"] = start.section
    try:
        return _train_and_test(settings, run_dir, make_callbacks, record, datamodule, gate, start)
    except (KeyboardInterrupt, SIGTERMException, SystemExit) as stop:
        interruption = _interruption(settings, gate, stop)
        if is_rank_zero():
            error = interruption.signal_name if interruption.exit_code != 130 else "interrupted"
            write_record(run_dir, {**record, "error": error}, status="interrupted")
        raise interruption from stop
    except BaseException as error:
        if is_rank_zero():
            write_record(run_dir, {**record, "error": f"{type(error).__name__}: {error}"}, status="failed")
        raise


def _interruption(settings: RunSettings, gate: SigtermGate, stop: BaseException) -> CellInterrupted:
    """What stopped the cell, as the exception that ends it: SIGTERM, SIGUSR2 (the time limit) or SIGINT."""
    sigterm = isinstance(stop, SIGTERMException) and not gate.sigint_received  # a first Ctrl-C stops this way
    signal_name = "SIGUSR2 (time limit)" if sigterm and gate.time_limit else "SIGTERM" if sigterm else "SIGINT"
    code = (140 if gate.time_limit else 143) if sigterm else 130
    return CellInterrupted(
        f"{settings.run_name} interrupted ({signal_name}); run the same command to resume", code, signal_name
    )


def _skip_or_refuse(
    settings: RunSettings, run_dir: Path, record: RunRecord, datamodule: ImageDataModule
) -> dict[str, Any]:
    """A complete record of this identity is reused only if it was measured on the same data."""
    datamodule.prepare_data()
    datamodule.setup("fit")
    change = data_change(record, datamodule)
    if change is not None:
        raise ConfigError(
            f"run directory {run_dir} holds a complete run of this config measured on other data ({change}); "
            f"{another_directory(run_dir)}"
        )
    if not is_rank_zero():
        return record.data
    updated = add_labels(settings, run_dir, record)
    if updated is not None:
        log.info("%s is complete already, not retrained: %s", settings.run_name, updated.summary)
        record = RunRecord(run_dir, updated.data)
    measured = remeasure_if_asked(settings, run_dir, record, datamodule)
    if updated is None and measured is None:
        log.info("%s is complete already: skipped (results in %s)", settings.run_name, run_dir)
    return measured or record.data


def say_inert_settings(settings: RunSettings) -> None:
    """A setting that cannot act under the others (`aug.cutmix_alpha=0.3` with `aug.cutmix=false`) is said once, at
    the start: it is left out of the cell's identity and name, so the cell is the one without it."""
    config = settings.as_record() if isinstance(settings, RunSettings) else settings
    defaults = AugConfig().model_dump(mode="json")  # every applies_when setting is in `aug` (protocol.py)
    for key in inert_keys(config):
        name = key.split(".", 1)[1]
        value = config["aug"][name]
        if value != defaults[name]:
            log.info("%s=%s has no effect with %s=false: not part of this cell", key, value, APPLIES_WHEN[key])


def _train_and_test(
    settings: RunSettings,
    run_dir: Path,
    make_callbacks: CallbackFactory,
    record: dict[str, Any],
    datamodule: ImageDataModule,
    gate: SigtermGate,
    start: StartPoint,
) -> dict[str, Any]:
    started = time.perf_counter()
    datamodule.prepare_data()
    datamodule.setup("fit")
    module = build_module(settings, datamodule)
    if start.weights is not None:
        load_start_weights(module, start.weights, str(settings.ckpt_path))
    record.update(setup_sections(settings, datamodule, module.model))
    log.info("%s | protocol: %s", settings.run_name, record["protocol"]["description"])
    parameters = f"{record['model']['num_params']:,}"
    log.info("model %s: %s parameters, patch %d", settings.model.name, parameters, module.model.patch_size)

    world_size = trainer_world_size(settings)
    if settings.compiles:
        device_type = "cuda" if uses_cuda(settings.trainer.accelerator) else "cpu"
        log.info("%s", module.compile_step(compile_choice(device_type, world_size)).line())
    global_batch = datamodule.batch_size
    split_global_batch(datamodule, world_size)
    record["batch"] = {"global": global_batch, "per_device": datamodule.batch_size, "world_size": world_size}
    resume = start.resume
    loggers = build_loggers(settings, run_dir, record.get(RUN_ID_ENTRY))
    # A resumed run skips the sanity-check validation: the run was checked when it first started.
    trainer = build_trainer(settings, run_dir, loggers, make_callbacks(settings, run_dir), sanity_check=resume is None)
    if trainer.is_global_zero:
        write_record(run_dir, record, status="running")
    if resume:
        log.info("resuming %s from %s (%d epochs done)", settings.run_name, resume, start.epochs)
    finished = False
    try:
        fit_start = time.perf_counter()
        with gate.deferring():
            trainer.fit(module, datamodule=datamodule, ckpt_path=resume, weights_only=True)
        if trainer.received_sigterm:  # the signal came too late in fit for Lightning to raise it
            raise SIGTERMException()
        fit_seconds = time.perf_counter() - fit_start
        # `epoch` is the x-axis the module logs (module.py), not a result.
        # A fit resumed from a finished checkpoint trains no epoch: its last epoch's figures come from the checkpoint.
        fitted = {k: float(v) for k, v in trainer.callback_metrics.items() if k != "epoch"}
        val_metrics = {**start.fit_metrics, **fitted}
        test_start = time.perf_counter()
        test_metrics = trainer.test(module, datamodule=datamodule, verbose=False)[0]
        test_seconds = time.perf_counter() - test_start

        timings = {"fit_s": fit_seconds, "test_s": test_seconds, "total_s": time.perf_counter() - started}
        test_metrics = {k: float(v) for k, v in test_metrics.items()}
        record.update(result_sections(settings, trainer, datamodule, val_metrics, test_metrics, timings))
        for callback in trainer.callbacks:
            if isinstance(callback, RecordSection):  # sections of one key merge (attention and its noise band)
                for key, section in callback.record_section().items():
                    merged = isinstance(section, dict) and isinstance(record.get(key), dict)
                    record[key] = {**record[key], **section} if merged else section
        if trainer.is_global_zero:
            path = write_record(run_dir, record, status="complete")
            discard_interrupted(run_dir)  # superseded by the finished run
            log.info(
                "%s: test acc1 %.4f -> %s", settings.run_name, record["metrics"].get("test/acc1", float("nan")), path
            )
            # The W&B run gets the complete record, statistics, pictures (and checkpoint) before it is finished.
            wandb = settings.logger.wandb
            publish_run_files(loggers, run_dir, bool(wandb and wandb.log_model))
        finished = True
    finally:
        finish_wandb(loggers, failed=not finished)
    return {**record, "status": "complete"}
