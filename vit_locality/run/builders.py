"""Settings -> objects: the datamodule, the LightningModule, the loggers and the Trainer of one cell.

Pure construction, no run semantics: the cell runner (cell.py), `analyze` and the benchmarks all build through
these functions, so a benchmark times what a user runs and an analysis sees the data a run saw. Each takes the
cell's typed settings (config.settings.RunSettings) and reads the parts it needs, the protocol built once there;
a composed DictConfig is accepted too and validated into its settings first (`as_settings`). The datamodule alone is
also built from a recorded config (an analysis or a report rebuilds a finished run's data), read as it stands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel

from vit_locality.augment.per_sample import build_train_transform
from vit_locality.config.identity import identity_hash
from vit_locality.config.settings import RunSettings, as_settings
from vit_locality.data import ImageDataModule, datamodule_class
from vit_locality.data.on_device import BatchAugment, data_on_device, uses_cuda
from vit_locality.errors import ConfigError
from vit_locality.model.classifier import ViTClassifier
from vit_locality.model.optimization import OptimSettings
from vit_locality.model.vit import ModelConfig
from vit_locality.protocol import Protocol
from vit_locality.run.checkpoint_io import AtomicCheckpointIO
from vit_locality.run.trainer_options import trainer_arguments
from vit_locality.tracking.csv_log import ResumableCSVLogger
from vit_locality.tracking.wandb_run import first_run_id, wandb_logger


def resolve_precision(requested: str, accelerator: str) -> str:
    """`auto`: bf16-mixed on CUDA, full fp32 elsewhere (bf16 autocast is about 3x slower than fp32 on CPUs)."""
    if requested != "auto":
        return str(requested)
    return "bf16-mixed" if uses_cuda(accelerator) else "32-true"


def plain(section: Any) -> dict[str, Any]:
    """A section as plain data: a typed section's fields, or a composed one resolved."""
    if isinstance(section, BaseModel):
        return section.model_dump()
    return OmegaConf.to_container(section, resolve=True)


def compile_wanted(cfg: RunSettings | DictConfig) -> bool:
    """`model.compile=auto`: on for CUDA, off on CPU (where it gained about 4% after a 47 s compile)."""
    settings = as_settings(cfg)
    setting = settings.model.compile
    return uses_cuda(settings.trainer.accelerator) if setting == "auto" else bool(setting)


def build_datamodule(cfg: RunSettings | DictConfig) -> ImageDataModule:
    """The configured datamodule with the protocol's per-sample transform.

    With `aug.device=gpu` the workers only crop and flip; AutoAugment then runs batched in the LightningModule.
    With on-device data (`data.on_device`, auto: on CUDA) there are no workers: the datamodule augments whole
    batches on the device, AutoAugment or ColorJitter included, whatever `aug.device` says."""
    on_device = data_on_device(cfg)
    protocol = cell_protocol(cfg) if isinstance(cfg, RunSettings) else Protocol.from_cfg(cfg, on_device)
    kwargs = {k: v for k, v in plain(cfg.data).items() if k != "name"}
    datamodule = datamodule_class(cfg.data.name)(**kwargs | {"on_device": on_device}, seed=int(cfg.seed))
    policy = protocol.policy
    datamodule.train_transform = build_train_transform(datamodule.image_size, protocol.per_sample_autoaugment, policy)
    datamodule.batch_augment = BatchAugment(datamodule.image_size, protocol.autoaug, policy)
    return datamodule


def cell_protocol(settings: RunSettings) -> Protocol:
    """The cell's protocol, where AutoAugment runs following from the data path (on the device or in workers)."""
    return Protocol.of_settings(settings, data_on_device(settings))


def build_module(cfg: RunSettings | DictConfig, datamodule: ImageDataModule) -> ViTClassifier:
    """The cell's LightningModule: the model, the protocol and the optimiser settings of the cell."""
    settings = as_settings(cfg)
    return ViTClassifier(
        num_classes=datamodule.num_classes,
        image_size=datamodule.image_size,
        mean=list(datamodule.mean),
        std=list(datamodule.std),
        model=ModelConfig.from_mapping(plain(settings.model)),
        protocol=cell_protocol(settings),
        optim=OptimSettings.from_mapping(plain(settings.optim)),
        # Checking the loss costs a device sync: every step on CPU (free); on a GPU at Lightning's logging steps,
        # which read the loss anyway (and at every epoch's end, before a checkpoint).
        nonfinite_check_every=settings.trainer.log_every_n_steps if uses_cuda(settings.trainer.accelerator) else 1,
        compile_model=compile_wanted(settings),
    )


def build_loggers(cfg: RunSettings | DictConfig, run_dir: Path, wandb_id: str | None = None) -> list[Logger]:
    """The CSV log always (the offline record beside results.json), W&B on top when `logger=wandb` (mode, group
    and tags: wandb_run.py). Both resume with the run: the CSV keeps earlier attempts' rows, W&B continues the run
    `wandb_id` names (the cell's record's: wandb_run.cell_run_id), by default a first start's."""
    settings = as_settings(cfg)
    loggers: list[Logger] = [ResumableCSVLogger(save_dir=str(run_dir), name="", version="csv")]
    if settings.logger.wandb:
        loggers.append(wandb_logger(settings, run_dir, wandb_id or wandb_run_id(settings, run_dir)))
    return loggers


def wandb_run_id(cfg: RunSettings | DictConfig, run_dir: Path) -> str:
    """The W&B run id of the cell's first start in `run_dir` (wandb_run.first_run_id)."""
    return first_run_id(identity_hash(cfg), run_dir)


def build_trainer(
    cfg: RunSettings | DictConfig,
    run_dir: Path,
    loggers: list[Logger],
    callbacks: list[Callback],
    sanity_check: bool = True,
) -> L.Trainer:
    """Every `trainer.*` setting reaches the Trainer as given (the settings checked each against the installed
    Trainer); the cell adds what follows from other settings: run directory, loggers, callbacks, progress display
    and the atomic checkpoint plugin. `sanity_check=False` (a resumed cell) skips the sanity validation."""
    settings = as_settings(cfg)
    arguments = trainer_arguments(settings.trainer_arguments())
    arguments["precision"] = resolve_precision(settings.trainer.precision, settings.trainer.accelerator)
    arguments.setdefault("enable_model_summary", False)
    # A compiled model evaluates under no_grad: inference-mode tensors in the test would compile a third graph.
    arguments.setdefault("inference_mode", not compile_wanted(settings))
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
    """Under SLURM, Lightning's cluster environment (ranks from SLURM's variables) without its auto-requeue: the
    time-limit signal and the requeue have one owner each (vit_locality.run.interrupts), not two."""
    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


def trainer_world_size(cfg: RunSettings | DictConfig) -> int:
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
