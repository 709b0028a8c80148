"""One protocol cell, end to end: check the config, build data, model and trainer, fit, test, record.

Takes an OmegaConf config and a run directory; the Hydra entry points (train.py) only supply those two.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from omegaconf import DictConfig, OmegaConf

from .config import ConfigError, identity_hash, register_resolvers, validate
from .data import ImageDataModule, datamodule_class
from .model import count_parameters
from .module import ViTClassifier
from .results import read_results, write_results
from .transforms import build_train_transform, describe_protocol, resolve_policy
from .versions import environment_versions

log = logging.getLogger("vit_locality")
# Lightning advertises a cloud logger at every Trainer construction; one per cell of a sweep is noise.
logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(lambda r: "Tip:" not in r.getMessage())
CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"


def resolve_precision(requested: str, accelerator: str) -> str:
    """`auto`: bf16-mixed on CUDA, full fp32 elsewhere (bf16 autocast is slower than fp32 on CPUs)."""
    if requested != "auto":
        return str(requested)
    on_cuda = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    return "bf16-mixed" if on_cuda else "32-true"


def build_datamodule(cfg: DictConfig) -> tuple[ImageDataModule, str]:
    """The configured datamodule with the protocol's per-sample transform, and the effective policy."""
    cls = datamodule_class(cfg.data.name)
    policy = resolve_policy(cfg.aug.policy, cls.default_policy)
    transform = build_train_transform(cls.image_size, bool(cfg.aug.autoaug), policy)
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg.data, resolve=True).items() if k != "name"}
    return cls(train_transform=transform, **kwargs), policy


def build_module(cfg: DictConfig, datamodule: ImageDataModule) -> ViTClassifier:
    return ViTClassifier(
        num_classes=datamodule.num_classes,
        image_size=datamodule.image_size,
        mean=list(datamodule.mean),
        std=list(datamodule.std),
        model=OmegaConf.to_container(cfg.model, resolve=True),
        cutmix=bool(cfg.aug.cutmix),
        cutmix_alpha=float(cfg.aug.cutmix_alpha),
        label_smoothing=float(cfg.loss.ls),
        lr=float(cfg.optim.lr),
        weight_decay=float(cfg.optim.weight_decay),
        betas=tuple(cfg.optim.betas),
        warmup_epochs=float(cfg.optim.warmup_epochs),
        min_lr_ratio=float(cfg.optim.min_lr_ratio),
    )


def build_loggers(cfg: DictConfig, run_dir: Path) -> list[Logger]:
    loggers: list[Logger] = [CSVLogger(save_dir=str(run_dir), name="", version="csv")]
    wandb_cfg = cfg.logger.get("wandb")
    if wandb_cfg:
        mode = wandb_cfg.mode
        if mode == "auto":
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
        loggers.append(
            WandbLogger(
                project=wandb_cfg.project,
                entity=wandb_cfg.entity,
                group=wandb_cfg.group,
                job_type=wandb_cfg.job_type,
                name=cfg.run_name,
                tags=[
                    f"aa{int(cfg.aug.autoaug)}",
                    f"cm{int(cfg.aug.cutmix)}",
                    f"ls{cfg.loss.ls}",
                    cfg.model.name,
                ],
                save_dir=str(run_dir),
                mode=mode,
                config=OmegaConf.to_container(cfg, resolve=True),
            )
        )
    return loggers


def checkpoint_callback(cfg: DictConfig, run_dir: Path) -> ModelCheckpoint:
    """`last.ckpt` every epoch: what an interrupted cell resumes from."""
    return ModelCheckpoint(
        dirpath=run_dir / CHECKPOINT_DIR,
        save_last=True,
        save_top_k=0,
        every_n_epochs=int(cfg.callbacks.checkpoint_every_n_epochs),
    )


def build_trainer(cfg: DictConfig, run_dir: Path, loggers: list[Logger], callbacks: list[Callback]) -> L.Trainer:
    t = cfg.trainer
    optional = {k: t[k] for k in ("limit_train_batches", "limit_val_batches", "gradient_clip_val") if t[k] is not None}
    return L.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        max_epochs=t.max_epochs,
        precision=resolve_precision(t.precision, t.accelerator),
        log_every_n_steps=t.log_every_n_steps,
        deterministic=t.deterministic,
        check_val_every_n_epoch=t.check_val_every_n_epoch,
        default_root_dir=str(run_dir),
        logger=loggers,
        callbacks=callbacks,
        enable_progress_bar=cfg.callbacks.progress_bar != "none",
        enable_model_summary=False,
        **optional,
    )


def check_existing(run_dir: Path, identity: str) -> dict[str, Any] | None:
    """A complete record with the same identity is returned (skip the cell); a different one is refused."""
    record = read_results(run_dir)
    if record is None:
        return None
    if record.get("identity_hash") != identity:
        raise ConfigError(
            f"run directory {run_dir} already holds a run with a different config "
            f"(status {record.get('status')!r}); choose another sweep_name or move that directory away"
        )
    return record if record.get("status") == "complete" else None


def protocol_record(cfg: DictConfig, policy: str) -> dict[str, Any]:
    autoaug, cutmix, ls = bool(cfg.aug.autoaug), bool(cfg.aug.cutmix), float(cfg.loss.ls)
    return {
        "autoaug": autoaug,
        "cutmix": cutmix,
        "ls": ls,
        "policy": policy if autoaug else None,
        "cutmix_alpha": float(cfg.aug.cutmix_alpha) if cutmix else None,
        "description": describe_protocol(autoaug, policy, cutmix, float(cfg.aug.cutmix_alpha), ls),
    }


def run_cell(cfg: DictConfig, run_dir: Path, callbacks: list[Callback] | None = None) -> dict[str, Any]:
    """Train and test one cell into `run_dir`; return its results record (an existing one if complete).

    `callbacks` come from the entry point (train.py builds them from `callbacks/`); their
    `results_section()`, where they have one, is merged into results.json.
    """
    register_resolvers()
    validate(cfg)
    run_dir = Path(run_dir)
    identity = identity_hash(cfg)
    finished = check_existing(run_dir, identity)
    if finished is not None:
        log.info("%s is complete already: skipped (results in %s)", cfg.run_name, run_dir)
        return finished

    started = time.perf_counter()
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule, policy = build_datamodule(cfg)
    datamodule.prepare_data()
    datamodule.setup("fit")
    module = build_module(cfg, datamodule)
    record: dict[str, Any] = {
        "run_name": cfg.run_name,
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
        "seed": int(cfg.seed),
        "identity_hash": identity,
        "config": OmegaConf.to_container(cfg, resolve=True),
        "versions": environment_versions(),
    }
    log.info("%s | protocol: %s", cfg.run_name, record["protocol"]["description"])
    log.info(
        "model %s: %s parameters, patch %d",
        cfg.model.name,
        f"{record['model']['num_params']:,}",
        module.model.patch_size,
    )

    loggers = build_loggers(cfg, run_dir)
    trainer = build_trainer(cfg, run_dir, loggers, [*(callbacks or []), checkpoint_callback(cfg, run_dir)])
    if trainer.is_global_zero:
        write_results(run_dir, record, status="running")
    last = run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT
    resume = last if last.exists() else None
    if resume:
        log.info("resuming %s from %s", cfg.run_name, resume)
    try:
        fit_start = time.perf_counter()
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
        fit_seconds = time.perf_counter() - fit_start
        val_metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        test_start = time.perf_counter()
        test_metrics = trainer.test(module, datamodule=datamodule, verbose=False)[0]
        test_seconds = time.perf_counter() - test_start
    except BaseException as error:
        if trainer.is_global_zero:
            write_results(run_dir, {**record, "error": f"{type(error).__name__}: {error}"}, status="failed")
        raise
    finally:
        finish_wandb(loggers)

    record["metrics"] = {**val_metrics, **{k: float(v) for k, v in test_metrics.items()}}
    record["epochs"] = trainer.current_epoch
    record["steps"] = trainer.global_step
    record["precision"] = str(trainer.precision)
    record["timings"] = {
        "fit_s": fit_seconds,
        "test_s": test_seconds,
        "total_s": time.perf_counter() - started,
    }
    for callback in trainer.callbacks:
        section = getattr(callback, "results_section", None)
        if callable(section):
            record.update(section())
    if trainer.is_global_zero:
        path = write_results(run_dir, record, status="complete")
        log.info("%s: test acc1 %.4f -> %s", cfg.run_name, record["metrics"].get("test/acc1", float("nan")), path)
    return {**record, "status": "complete"}


def finish_wandb(loggers: list[Logger]) -> None:
    """Close the W&B run so it does not leak into the next cell of a multirun."""
    if any(isinstance(logger, WandbLogger) for logger in loggers):
        import wandb

        wandb.finish()
