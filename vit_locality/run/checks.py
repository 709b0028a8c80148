"""The entry points of config validation: a composed train config (`validate`, building the cell's typed settings,
settings.py), the analysis command's settings, and the checks of this machine (cores, memory, the data's files).

The checks run before anything is built, so a typo costs a second, not a run: torch is imported only to count
devices, and only when a check reaches that point; Lightning only when a `trainer.*` setting outside the declared
ones, or an accelerator or strategy beyond the plain ones, is used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vit_locality.config.fields import check, is_int
from vit_locality.config.file_access import check_directory, file_problem
from vit_locality.config.schema import TRAIN_SIZES, StatsConfig
from vit_locality.config.settings import (
    RunSettings,
    early_layers_rule,
    resolved,
    settings_of,
    typed_section,
    undeclared_trainer_arguments,
)
from vit_locality.errors import ConfigError
from vit_locality.run import trainer_options
from vit_locality.run.data_presence import check_data_present
from vit_locality.tracking.wandb_mode import check_wandb_key

__all__ = ["TRAIN_SIZES", "validate", "validate_analysis", "validate_stats"]
ANALYSIS_DEVICES = ("auto", "cpu", "cuda")
# data/synthetic.py draws a split in float32 (noise, images and three temporaries: 12 bytes a value at the peak)
# and keeps every split as uint8 (1 byte a value).
SYNTHETIC_DRAW_BYTES_PER_VALUE = 12
TRAINING_BYTES_PER_PARAMETER = 16  # weights, gradients and AdamW's two moments, float32
WORKERS_PER_CORE = 4


_CHECKED: dict[int, RunSettings] = {}  # settings already checked against this machine in this process (by id)
_REMEMBERED = 8


def validate(cfg: DictConfig | RunSettings, check_devices: bool = True) -> RunSettings:
    """The cell's typed settings (settings.settings_of), or ConfigError on the first value outside its allowed
    range; then what only this installation can judge (Trainer arguments beyond the declared ones, asked of the
    installed Lightning; an online W&B run's key) and, unless `check_devices=False`, this machine (devices, cores,
    memory, the data's files; a SLURM submission host has none of the compute nodes' GPUs, nor perhaps their data).
    Each settings object is checked against the machine once per process."""
    if isinstance(cfg, RunSettings):
        settings = cfg
    else:  # the installed Trainer judges its own arguments first: its words for a wrong type are the clearer
        values = resolved(cfg) if isinstance(cfg, DictConfig) else dict(cfg)
        others = undeclared_trainer_arguments(values)
        if others:
            trainer_options.check_trainer_options(others)
        settings = settings_of(values)
    if settings.logger.wandb is not None:
        check_wandb_key(str(settings.logger.wandb.mode))
    if check_devices and id(settings) not in _CHECKED:
        validate_devices(settings.trainer.arguments())
        check_this_machine(settings)
        if len(_CHECKED) >= _REMEMBERED:
            _CHECKED.pop(next(iter(_CHECKED)))
        _CHECKED[id(settings)] = settings  # kept alive, so its id is not reused while listed
    return settings


def _physical_memory() -> int | None:
    """Bytes of memory on this machine, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_this_machine(settings: RunSettings) -> None:
    """Sizes against this machine (data workers against its cores, a synthetic set and the model's training state
    against its memory) and the data set's files. Skipped for a SLURM submission, whose compute nodes are other
    machines."""
    data, model = settings.data, settings.model
    cores = os.cpu_count() or 1
    workers = f"an integer in [0, {WORKERS_PER_CORE * cores}]: {WORKERS_PER_CORE} per CPU core of this machine"
    check(data.num_workers <= WORKERS_PER_CORE * cores, "data.num_workers", data.num_workers, workers)
    memory = _physical_memory()
    if memory is not None:
        gib = f"{memory / 2**30:.0f} GiB"
        if data.name == "synthetic":
            values = 3 * data.image_size**2
            split = max(data.train_size, data.test_size)
            needed = values * (split * SYNTHETIC_DRAW_BYTES_PER_VALUE + data.train_size + data.test_size)
            allowed = f"a set whose drawing fits in half of this machine's {gib} (about {needed / 2**30:.0f} GiB asked)"
            check(needed <= memory // 2, "data.train_size", data.train_size, allowed)
        parameters = 12 * model.depth * model.dim**2  # attention (4 dim^2) and MLP (2 x 4 dim^2) per block
        needed = parameters * TRAINING_BYTES_PER_PARAMETER
        allowed = f"a model whose training state fits in this machine's {gib} (about {needed / 2**30:.0f} GiB asked)"
        check(needed <= memory, "model.depth", model.depth, allowed)
    check_data_present(data)


def validate_stats(stats: DictConfig, depth: int | None) -> StatsConfig:
    """The probe's settings; `depth` (unknown to `analyze` until it reads the run) bounds `early_layers`."""
    typed = typed_section(StatsConfig, OmegaConf.to_container(stats, resolve=True), "stats")
    early_layers_rule(typed.early_layers, depth)
    return typed


def validate_analysis(cfg: DictConfig) -> None:
    """The settings of `python -m vit_locality.analyze` that can be checked without loading the checkpoint."""
    if OmegaConf.is_missing(cfg, "ckpt_path"):
        raise ConfigError("ckpt_path is not set: pass ckpt_path=<run dir>/checkpoints/last.ckpt (from train.py)")
    checkpoint = cfg.ckpt_path
    problem = file_problem(Path(str(checkpoint))) if checkpoint not in (None, "") else "empty"
    check(problem is None, "ckpt_path", checkpoint, f"a .ckpt file written by train.py ({problem})")
    validate_stats(cfg.stats, None)
    device = cfg.device
    check(device in ANALYSIS_DEVICES, "device", device, f"one of {', '.join(ANALYSIS_DEVICES)}")
    check(isinstance(cfg.overwrite, bool), "overwrite", cfg.overwrite, "true or false")
    for key in ("out_dir", "data_root"):
        check(cfg[key] is None or isinstance(cfg[key], str), key, cfg[key], "a directory path, or null")
    if cfg.out_dir:
        check_directory("out_dir", cfg.out_dir, Path(cfg.out_dir))


def available_devices(accelerator: str) -> tuple[int, str]:
    """How many devices `trainer.devices` may ask for, and what they are."""
    import torch  # deferred: config checks should not pay for torch unless they reach this point

    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.cuda.device_count(), "CUDA GPUs"
    return os.cpu_count() or 1, "CPU cores (trainer.accelerator=cpu runs one process per device)"


def validate_devices(trainer: Mapping[str, Any]) -> None:
    """`trainer.devices` against this machine, and an accelerator or strategy beyond the plain ones judged by
    Lightning's own connector here. One device on the CPU is always there (and needs no torch to count); auto, -1
    and a list of indices leave the count to Lightning."""
    devices, accelerator = trainer["devices"], str(trainer["accelerator"])
    if accelerator in ("gpu", "cuda"):  # no GPU here: the accelerator is what to change, not devices
        count, kind = available_devices(accelerator)
        check(count > 0, "trainer.accelerator", accelerator, f"cpu or auto: this machine has no {kind}")
    if is_int(devices) and devices != -1 and not (devices == 1 and accelerator in ("auto", "cpu")):
        count, kind = available_devices(accelerator)
        check(devices <= count, "trainer.devices", devices, f"at most {count}: this machine has {count} {kind}")
    if trainer_options.needs_lightning(trainer):
        trainer_options.check_accelerator_and_strategy(trainer)
