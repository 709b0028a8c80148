"""One protocol cell, end to end: check the config, build data, model and trainer, fit, test, record.

Takes an OmegaConf config and a run directory; the Hydra entry points (train.py) only supply those two.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from .config import ConfigError, identity_hash, register_resolvers, validate
from .data import ImageDataModule, datamodule_class
from .model import count_parameters
from .module import ViTClassifier
from .results import read_results, write_results
from .seeding import reseed_for_epoch
from .transforms import build_train_transform, describe_protocol, resolve_policy
from .versions import environment_versions

log = logging.getLogger("vit_locality")
# Lightning 2.6 with torch 2.14 warns about its own use of a torch pytree API at every fit: not the user's concern.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
# Lightning advertises a cloud logger at every Trainer construction; one per cell of a sweep is noise.
logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(lambda r: "Tip:" not in r.getMessage())
CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
INTERRUPTED_CHECKPOINT = "interrupted.ckpt"


def uses_cuda(accelerator: str) -> bool:
    return accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())


def resolve_precision(requested: str, accelerator: str) -> str:
    """`auto`: bf16-mixed on CUDA, full fp32 elsewhere (bf16 autocast is slower than fp32 on CPUs)."""
    if requested != "auto":
        return str(requested)
    return "bf16-mixed" if uses_cuda(accelerator) else "32-true"


def build_datamodule(cfg: DictConfig) -> tuple[ImageDataModule, str]:
    """The configured datamodule with the protocol's per-sample transform, and the effective policy.

    With `aug.device=gpu` the workers only crop and flip; AutoAugment then runs batched in the LightningModule."""
    cls = datamodule_class(cfg.data.name)
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg.data, resolve=True).items() if k != "name"}
    datamodule = cls(**kwargs)
    policy = resolve_policy(cfg.aug.policy, datamodule.default_policy)
    per_sample_autoaug = bool(cfg.aug.autoaug) and cfg.aug.device == "cpu"
    datamodule.train_transform = build_train_transform(datamodule.image_size, per_sample_autoaug, policy)
    return datamodule, policy


def compile_wanted(cfg: DictConfig) -> bool:
    """`model.compile=auto`: on for CUDA, off on CPU (where it gained ~4% after a 47 s compile, REFERENCE.md)."""
    setting = cfg.model.get("compile", "auto")
    return uses_cuda(cfg.trainer.accelerator) if setting == "auto" else bool(setting)


def build_module(cfg: DictConfig, datamodule: ImageDataModule, policy: str | None = None) -> ViTClassifier:
    on_device = bool(cfg.aug.autoaug) and cfg.aug.device == "gpu"
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
        # Checking the loss costs a device sync: every step on CPU (free), every 25 steps on a GPU.
        nonfinite_check_every=25 if uses_cuda(cfg.trainer.accelerator) else 1,
        seed=int(cfg.seed),
        device_autoaugment=policy if on_device else None,
        compile_model=compile_wanted(cfg),
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
    """`last.ckpt`, rewritten at the end of every `checkpoint_every_n_epochs` epochs: what an interrupted cell
    resumes from. (Lightning's own `save_last` only writes when a top-k checkpoint is saved, so the file name is
    set directly instead.)"""
    return ModelCheckpoint(
        dirpath=run_dir / CHECKPOINT_DIR,
        filename=Path(LAST_CHECKPOINT).stem,
        save_top_k=1,
        every_n_epochs=int(cfg.callbacks.checkpoint_every_n_epochs),
        enable_version_counter=False,
    )


def build_trainer(
    cfg: DictConfig, run_dir: Path, loggers: list[Logger], callbacks: list[Callback], sanity_check: bool = True
) -> L.Trainer:
    t = cfg.trainer
    optional = {k: t[k] for k in ("limit_train_batches", "limit_val_batches", "gradient_clip_val") if t[k] is not None}
    return L.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=t.strategy,
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
        num_sanity_val_steps=2 if sanity_check else 0,
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
        "description": describe_protocol(autoaug, policy, cutmix, float(cfg.aug.cutmix_alpha), ls, cfg.aug.device),
        "autoaug_device": cfg.aug.device if autoaug else None,
    }


class CellInterrupted(RuntimeError):
    """SIGTERM (e.g. SLURM preemption) or SIGINT stopped the cell; a resumable checkpoint was saved."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class InterruptCheckpoint(Callback):
    """On SIGTERM or Ctrl-C, save `interrupted.ckpt` so the next run of the same command continues from there."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt | SIGTERMException):
            trainer.save_checkpoint(self.path)
            log.warning("interrupted at step %d: saved %s", trainer.global_step, self.path)


def checkpoint_progress(path: Path) -> tuple[int, int]:
    """(global step, completed epochs) of a checkpoint; (-1, -1) when it cannot be read."""
    try:
        meta = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # a truncated or foreign file is not a checkpoint to resume from
        return -1, -1
    return int(meta.get("global_step", -1)), completed_epochs(meta)


def completed_epochs(checkpoint: dict[str, Any]) -> int:
    """Epochs finished when the checkpoint was written. Lightning's `processed` counter: an end-of-epoch checkpoint
    is written after validation, before the epoch counts as `completed` (and `epoch` is still the finished one's
    index)."""
    try:
        return int(checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except (KeyError, TypeError):
        return int(checkpoint.get("epoch", 0))


def resume_checkpoint(run_dir: Path) -> tuple[Path | None, int]:
    """The furthest of `last.ckpt` (an epoch boundary) and `interrupted.ckpt` (mid-epoch, after a signal), with
    its completed epochs; (None, 0) for a fresh start."""
    candidates = [run_dir / CHECKPOINT_DIR / name for name in (LAST_CHECKPOINT, INTERRUPTED_CHECKPOINT)]
    progress = {path: checkpoint_progress(path) for path in candidates if path.exists()}
    usable = {path: p for path, p in progress.items() if p[0] >= 0}
    if not usable:
        return None, 0
    best = max(usable, key=lambda path: usable[path][0])
    return best, usable[best][1]


def trainer_world_size(cfg: DictConfig) -> int:
    """Processes that share one cell: devices x nodes (devices -1/auto count what the accelerator sees)."""
    devices = cfg.trainer.devices
    if isinstance(devices, int) and devices > 0:
        count = devices
    elif devices in (-1, "auto"):
        count = torch.cuda.device_count() if uses_cuda(cfg.trainer.accelerator) else 1
    else:  # a list of device indices
        count = len(devices)
    return max(1, count) * int(cfg.trainer.num_nodes)


def split_global_batch(datamodule: ImageDataModule, world_size: int) -> None:
    """`data.batch_size` is the global batch: each process loads its share, so DDP changes no hyper-parameter."""
    if datamodule.batch_size % world_size:
        raise ConfigError(
            f"data.batch_size={datamodule.batch_size} is not allowed: a multiple of the {world_size} processes "
            "(trainer.devices x trainer.num_nodes) that share the cell"
        )
    datamodule.batch_size //= world_size


def is_rank_zero() -> bool:
    return rank_zero_only.rank == 0


def run_cell(cfg: DictConfig, run_dir: Path, callbacks: list[Callback] | None = None) -> dict[str, Any]:
    """Train and test one cell into `run_dir`; return its results record (an existing one if complete).

    `callbacks` come from the entry point (train.py builds them from `callbacks/`); their
    `results_section()`, where they have one, is merged into results.json. Whatever stops the cell is recorded in
    results.json (`failed` with the error, or `interrupted`) before it propagates.
    """
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
        return _train_and_test(cfg, run_dir, callbacks or [], record)
    except (KeyboardInterrupt, SIGTERMException, SystemExit) as stop:
        sigterm = isinstance(stop, SIGTERMException)
        if is_rank_zero():
            write_results(run_dir, {**record, "error": "SIGTERM" if sigterm else "interrupted"}, status="interrupted")
        raise CellInterrupted(
            f"{cfg.run_name} interrupted ({'SIGTERM' if sigterm else 'SIGINT'}); run the same command to resume",
            143 if sigterm else 130,
        ) from stop
    except BaseException as error:
        if is_rank_zero():
            write_results(run_dir, {**record, "error": f"{type(error).__name__}: {error}"}, status="failed")
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
    interrupted = run_dir / CHECKPOINT_DIR / INTERRUPTED_CHECKPOINT
    own = [InterruptCheckpoint(interrupted), checkpoint_callback(cfg, run_dir)]
    world_size = trainer_world_size(cfg)
    global_batch = datamodule.batch_size
    split_global_batch(datamodule, world_size)
    record["batch"] = {"global": global_batch, "per_device": datamodule.batch_size, "world_size": world_size}
    resume, start_epoch = resume_checkpoint(run_dir)
    # A resumed run skips the sanity-check validation: its loader would draw from the generator that the resumed
    # epoch must start from, and the run was checked when it first started.
    trainer = build_trainer(cfg, run_dir, loggers, [*callbacks, *own], sanity_check=resume is None)
    if trainer.is_global_zero:
        write_results(run_dir, record, status="running")
    if resume:
        log.info("resuming %s from %s (%d epochs done)", cfg.run_name, resume, start_epoch)
    reseed_for_epoch(int(cfg.seed), start_epoch)
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
        interrupted.unlink(missing_ok=True)  # superseded by the finished run
        log.info("%s: test acc1 %.4f -> %s", cfg.run_name, record["metrics"].get("test/acc1", float("nan")), path)
    return {**record, "status": "complete"}


def finish_wandb(loggers: list[Logger]) -> None:
    """Close the W&B run so it does not leak into the next cell of a multirun."""
    if any(isinstance(logger, WandbLogger) for logger in loggers):
        import wandb

        wandb.finish()
