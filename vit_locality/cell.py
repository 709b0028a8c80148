"""The cell runner: one protocol cell, end to end, into its run directory.

Skip a complete cell with the same identity, refuse a directory that holds another config, resume from the
furthest checkpoint, record `running`, fit, test, record `complete`. Whatever stops the cell is recorded
(`failed` with the error, or `interrupted`) before it propagates. Objects come from builders.py; the Trainer's
callbacks come from the entry point (callbacks/ builds them), and those that implement `RecordSection` add
their section to the complete record.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger, WandbLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from .builders import (
    build_datamodule,
    build_loggers,
    build_module,
    build_trainer,
    split_global_batch,
    trainer_world_size,
)
from .checkpoints import interrupted_checkpoint, resume_point
from .config import ConfigError, identity_hash, register_resolvers, validate
from .model import count_parameters
from .results import RecordError, RecordSection, read_record, write_record
from .transforms import describe_protocol
from .versions import environment_versions

log = logging.getLogger("vit_locality")


class CellInterrupted(RuntimeError):
    """SIGTERM (e.g. SLURM preemption) or SIGINT stopped the cell; a resumable checkpoint was saved."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def check_existing(run_dir: Path, identity: str) -> dict[str, Any] | None:
    """A complete record with the same identity is returned (skip the cell); a different one is refused.
    An unusable record is no verdict either way: the cell runs (resuming from its checkpoint) and rewrites it."""
    try:
        record = read_record(run_dir)
    except RecordError as error:
        log.warning("%s: %s; running the cell again", run_dir, error)
        return None
    if record is None:
        return None
    if record.identity_hash != identity:
        raise ConfigError(
            f"run directory {run_dir} already holds a run with a different config "
            f"(status {record.status!r}); choose another sweep_name or move that directory away"
        )
    return record.data if record.complete else None


def protocol_record(cfg: DictConfig, policy: str) -> dict[str, Any]:
    """The record's `protocol` section: the three flags, the effective policy and the one-line description."""
    autoaug, cutmix, ls = bool(cfg.aug.autoaug), bool(cfg.aug.cutmix), float(cfg.loss.ls)
    return {
        "autoaug": autoaug,
        "cutmix": cutmix,
        "ls": ls,
        "policy": policy if autoaug else None,
        "cutmix_alpha": float(cfg.aug.cutmix_alpha) if cutmix else None,
        "description": describe_protocol(autoaug, policy, cutmix, float(cfg.aug.cutmix_alpha), ls, cfg.aug.device),
        "autoaug_device": cfg.aug.device if autoaug else None,
    }


def is_rank_zero() -> bool:
    return rank_zero_only.rank == 0


def run_cell(cfg: DictConfig, run_dir: Path, callbacks: list[Callback]) -> dict[str, Any]:
    """Train and test one cell into `run_dir`; return its record (an existing one if complete).

    `callbacks` are everything the Trainer gets besides loggers (callbacks.build_callbacks): progress display,
    statistics, checkpointing and per-epoch reseeding, on which resume and its exactness depend."""
    register_resolvers()
    validate(cfg)
    run_dir = Path(run_dir)
    identity = identity_hash(cfg)
    finished = check_existing(run_dir, identity)
    if finished is not None:
        log.info("%s is complete already: skipped (results in %s)", cfg.run_name, run_dir)
        return finished
    record: dict[str, Any] = {"run_name": cfg.run_name, "identity_hash": identity, "seed": int(cfg.seed)}
    try:
        return _train_and_test(cfg, run_dir, callbacks, record)
    except (KeyboardInterrupt, SIGTERMException, SystemExit) as stop:
        sigterm = isinstance(stop, SIGTERMException)
        if is_rank_zero():
            write_record(run_dir, {**record, "error": "SIGTERM" if sigterm else "interrupted"}, status="interrupted")
        raise CellInterrupted(
            f"{cfg.run_name} interrupted ({'SIGTERM' if sigterm else 'SIGINT'}); run the same command to resume",
            143 if sigterm else 130,
        ) from stop
    except BaseException as error:
        if is_rank_zero():
            write_record(run_dir, {**record, "error": f"{type(error).__name__}: {error}"}, status="failed")
        raise


def _train_and_test(
    cfg: DictConfig, run_dir: Path, callbacks: list[Callback], record: dict[str, Any]
) -> dict[str, Any]:
    started = time.perf_counter()
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule, policy = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    module = build_module(cfg, datamodule, policy)
    record.update(
        {
            "data": {
                "name": cfg.data.name,
                "num_classes": datamodule.num_classes,
                "image_size": datamodule.image_size,
                "num_train": datamodule.num_train,
                "eval_split": "val" if cfg.data.val_size else "test",
            },
            "protocol": protocol_record(cfg, policy),
            "model": {
                **OmegaConf.to_container(cfg.model, resolve=True),
                "patch_size": module.model.patch_size,
                "num_params": count_parameters(module.model),
            },
            "config": OmegaConf.to_container(cfg, resolve=True),
            "versions": environment_versions(),
        }
    )
    log.info("%s | protocol: %s", cfg.run_name, record["protocol"]["description"])
    log.info(
        "model %s: %s parameters, patch %d",
        cfg.model.name,
        f"{record['model']['num_params']:,}",
        module.model.patch_size,
    )

    loggers = build_loggers(cfg, run_dir)
    world_size = trainer_world_size(cfg)
    global_batch = datamodule.batch_size
    split_global_batch(datamodule, world_size)
    record["batch"] = {"global": global_batch, "per_device": datamodule.batch_size, "world_size": world_size}
    resume, start_epoch = resume_point(run_dir)
    # A resumed run skips the sanity-check validation: its loader would draw from the generator that the resumed
    # epoch must start from, and the run was checked when it first started.
    trainer = build_trainer(cfg, run_dir, loggers, callbacks, sanity_check=resume is None)
    if trainer.is_global_zero:
        write_record(run_dir, record, status="running")
    if resume:
        log.info("resuming %s from %s (%d epochs done)", cfg.run_name, resume, start_epoch)
    try:
        fit_start = time.perf_counter()
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume, weights_only=True)
        fit_seconds = time.perf_counter() - fit_start
        val_metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        test_start = time.perf_counter()
        test_metrics = trainer.test(module, datamodule=datamodule, verbose=False)[0]
        test_seconds = time.perf_counter() - test_start
    finally:
        finish_wandb(loggers)

    record["metrics"] = {**val_metrics, **{k: float(v) for k, v in test_metrics.items()}}
    record["epochs"] = trainer.current_epoch
    record["steps"] = trainer.global_step
    record["precision"] = str(trainer.precision)
    record["timings"] = {"fit_s": fit_seconds, "test_s": test_seconds, "total_s": time.perf_counter() - started}
    for callback in trainer.callbacks:
        if isinstance(callback, RecordSection):
            record.update(callback.record_section())
    if trainer.is_global_zero:
        path = write_record(run_dir, record, status="complete")
        interrupted_checkpoint(run_dir).unlink(missing_ok=True)  # superseded by the finished run
        log.info("%s: test acc1 %.4f -> %s", cfg.run_name, record["metrics"].get("test/acc1", float("nan")), path)
    return {**record, "status": "complete"}


def finish_wandb(loggers: list[Logger]) -> None:
    """Close the W&B run so it does not leak into the next cell of a multirun."""
    if any(isinstance(logger, WandbLogger) for logger in loggers):
        import wandb

        wandb.finish()
