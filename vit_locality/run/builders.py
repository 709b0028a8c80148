"""Settings -> objects: the datamodule, the LightningModule, the loggers and the Trainer of one cell. The cell,
`analyze`, the instruments and the benchmarks all build through these, so each sees what a run saw."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger

from vit_locality.augment.mixing import build_train_transform
from vit_locality.config.extensions import filled_directories
from vit_locality.config.identity import identity_hash
from vit_locality.config.settings import RunSettings, uses_cuda
from vit_locality.data import ImageDataModule, datamodule_class
from vit_locality.data.on_device import BatchAugment
from vit_locality.errors import ConfigError
from vit_locality.model.classifier import ViTClassifier
from vit_locality.run.checkpoints import AtomicCheckpointIO
from vit_locality.tracking.csv_log import ResumableCSVLogger
from vit_locality.tracking.wandb_run import first_run_id, wandb_logger


def resolve_precision(requested: str, accelerator: str) -> str:
    """`auto`: bf16-mixed on CUDA, full fp32 elsewhere (bf16 autocast is about 3x slower than fp32 on CPUs)."""
    if requested != "auto":
        return str(requested)
    return "bf16-mixed" if uses_cuda(accelerator) else "32-true"


def build_datamodule(settings: RunSettings) -> ImageDataModule:
    """The configured datamodule with the protocol's augmentation, per sample or batched on the device (docs/gpu.md)."""
    protocol = settings.protocol
    arguments = settings.data.model_dump(exclude={"name", "module"}) | {"on_device": settings.data_on_device}
    datamodule = datamodule_class(settings.data.name, settings.data.module)(**arguments, seed=settings.seed)
    datamodule.train_transform = build_train_transform(datamodule.image_size, protocol)
    datamodule.batch_augment = BatchAugment(datamodule.image_size, protocol)
    if settings.compiles and settings.data_on_device:  # the compiled step augments: the loader yields plain batches
        datamodule.step_augment, datamodule.batch_augment = datamodule.batch_augment, None
        datamodule.step_augment.grouping = "select"  # AutoAugment without host reads, one graph
    return datamodule


def build_module(settings: RunSettings, datamodule: ImageDataModule) -> ViTClassifier:
    """The cell's LightningModule."""
    return ViTClassifier(
        num_classes=datamodule.num_classes,
        image_size=datamodule.image_size,
        mean=list(datamodule.mean),
        std=list(datamodule.std),
        model=settings.model.architecture(),
        protocol=settings.protocol,
        optim=settings.optim.model_dump(),
        # Checking the loss costs a device sync: every step on CPU (free); on a GPU at Lightning's logging steps,
        # which read the loss anyway (and at every epoch's end, before a checkpoint).
        nonfinite_check_every=settings.trainer.log_every_n_steps if uses_cuda(settings.trainer.accelerator) else 1,
        compile_model=settings.compiles,
        batch_augment=datamodule.step_augment,
    )


def build_loggers(settings: RunSettings, run_dir: Path, wandb_id: str | None = None) -> list[Logger]:
    """The CSV log always, W&B when `logger=wandb` (continuing the run `wandb_id` names, by default a first start's),
    then the user's loggers (`logger.<name>._target_`, told `<run dir>/<name>` where they name no directory)."""
    loggers: list[Logger] = [ResumableCSVLogger(save_dir=str(run_dir), name="", version="csv")]
    if settings.logger.wandb:
        loggers.append(wandb_logger(settings, run_dir, wandb_id or wandb_run_id(settings, run_dir)))
    for name, entry in settings.logger.user_entries().items():
        loggers.append(instantiate_entry(entry, **filled_directories(entry, str(run_dir / name))))
    return loggers


def instantiate_entry(entry: Mapping[str, Any], **filled: Any) -> Any:
    """A user callback's or logger's object from its entry (Hydra's `instantiate`); `filled` sets what it leaves out."""
    from hydra.utils import instantiate

    return instantiate({"_convert_": "all", **entry, **filled})


def wandb_run_id(settings: RunSettings, run_dir: Path) -> str:
    """The W&B run id of the cell's first start in `run_dir` (wandb_run.first_run_id)."""
    return first_run_id(identity_hash(settings), run_dir)


def build_trainer(
    settings: RunSettings,
    run_dir: Path,
    loggers: list[Logger],
    callbacks: list[Callback],
    sanity_check: bool = True,
) -> L.Trainer:
    """Every `trainer.*` setting as given, plus what follows from other settings: run directory, loggers, callbacks,
    progress display, the atomic checkpoint plugin. `sanity_check=False` (a resumed cell) skips the sanity check."""
    arguments = settings.trainer_arguments()
    arguments["precision"] = resolve_precision(settings.trainer.precision, settings.trainer.accelerator)
    arguments.setdefault("enable_model_summary", False)
    # A compiled model evaluates under no_grad: inference-mode tensors in the test would compile a third graph.
    arguments.setdefault("inference_mode", not settings.compiles)
    if not sanity_check:
        arguments["num_sanity_val_steps"] = 0
    arguments.setdefault("num_sanity_val_steps", 2)
    return L.Trainer(
        **arguments,
        default_root_dir=str(run_dir),
        logger=loggers,
        callbacks=callbacks,
        enable_progress_bar=settings.callbacks.progress_bar != "none",
        plugins=[AtomicCheckpointIO(), *slurm_environment()],  # checkpoints written whole or not at all
    )


def slurm_environment() -> list[SLURMEnvironment]:
    """Under SLURM, Lightning's cluster environment without its auto-requeue (run/interrupts.py owns the requeue)."""
    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


def trainer_world_size(settings: RunSettings) -> int:
    """Processes that share one cell: devices x nodes (devices -1/auto count what the accelerator sees)."""
    devices = settings.trainer.devices
    if isinstance(devices, int) and devices > 0:
        count = devices
    elif devices in (-1, "auto"):
        count = torch.cuda.device_count() if uses_cuda(settings.trainer.accelerator) else 1
    else:  # a list of device indices
        count = len(devices)
    return max(1, count) * int(settings.trainer.num_nodes)


def split_global_batch(datamodule: ImageDataModule, world_size: int) -> None:
    """`data.batch_size` is the global batch: each process loads its share, so DDP changes no hyper-parameter."""
    if datamodule.batch_size % world_size:
        raise ConfigError(
            f"data.batch_size={datamodule.batch_size} is not allowed: a multiple of the {world_size} processes "
            "(trainer.devices x trainer.num_nodes) that share the cell"
        )
    datamodule.batch_size //= world_size
