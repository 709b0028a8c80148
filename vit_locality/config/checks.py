"""The checks on a composed config's values that its schema (schema.py) cannot express: ranges, closed lists of
names, and rules across settings (`data.batch_size` against `aug.cutmix`, `stats.early_layers` against
`model.depth`). Keys and types are the schema's: OmegaConf refuses `optim.lr=abc` while composing.

The checks run before anything is built, so a typo costs a second, not a run; that is why this module takes its
vocabulary from the torch-free `catalog` module (torch is imported only to count devices, and only when a check
reaches that point; Lightning only when a `trainer.*` setting outside the declared ones is used).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vit_locality.catalog import DATASETS, GRID_SIZE
from vit_locality.config.file_access import check_directory, file_problem
from vit_locality.config.schema import DECLARED_TRAINER_KEYS
from vit_locality.errors import ConfigError
from vit_locality.protocol import Protocol

# Names the trainer takes, from Lightning's own registries (AcceleratorRegistry plus the connector's `auto` and `gpu`,
# StrategyRegistry plus `auto`, and the `_PRECISION_INPUT` literal plus this project's `auto`). Written out so the
# check needs no Lightning import (2 s); tests/test_config.py compares them with the installed Lightning.
ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps", "tpu")
_DDP = ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook")
_DEEPSPEED = ("stage_1", "stage_2", "stage_2_offload", "stage_3", "stage_3_offload", "stage_3_offload_nvme")
STRATEGIES = (
    "auto",
    *_DDP,
    *(f"{ddp}_find_unused_parameters_{flag}" for ddp in _DDP for flag in ("false", "true")),
    "deepspeed",
    *(f"deepspeed_{stage}" for stage in _DEEPSPEED),
    "fsdp",
    "fsdp_cpu_offload",
    "single_device",
    "single_tpu",
    "single_xla",
    "xla",
    "xla_debug",
)
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "32", "16", "bf16", "64")
PRECISIONS += ("transformer-engine", "transformer-engine-float16")
MODEL_STEMS = ("patch", "conv")
ANALYSIS_DEVICES = ("auto", "cpu", "cuda")
# Official training-set sizes, which data.val_size must leave images of (the synthetic set's is data.train_size).
TRAIN_SIZES = {"cifar10": 50_000, "cifar100": 50_000, "tiny_imagenet": 100_000}
MAX_SEED = 2**32 - 1  # the range of numpy's seed, which Lightning's seed_everything enforces
# A name that becomes a directory (sweep_name, model.name, run_name): one path component, nothing a shell minds.
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
TAGS_RULE = "a list of strings of 1 to 64 characters, e.g. tags=[paper,v2] (W&B run tags)"
SAFE_NAME_RULE = "letters, digits and _ . + - (it names a directory), not starting with . or -, no '..'"


def _check(condition: bool, key: str, value: Any, allowed: str) -> None:
    if not condition:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    """inf passes `> 0`; a learning rate or a weight decay of inf trains nothing but NaNs."""
    return _is_number(value) and math.isfinite(value)


def _integer(section: DictConfig, prefix: str, name: str, minimum: int, maximum: int | None = None) -> None:
    value = section[name]
    within = _is_int(value) and value >= minimum and (maximum is None or value <= maximum)
    allowed = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
    _check(within, f"{prefix}.{name}" if prefix else name, value, allowed)


def _flags(section: DictConfig, prefix: str, *names: str) -> None:
    for name in names:
        _check(_is_bool(section[name]), f"{prefix}.{name}", section[name], "true or false")


def _one_of(key: str, value: Any, choices: tuple[str, ...]) -> None:
    _check(isinstance(value, str) and value in choices, key, value, f"one of {', '.join(choices)}")


def _name(key: str, value: Any) -> None:
    """Names that end up in a run directory's path may not climb out of it or split it: `../x`, `a/b`."""
    text = str(value) if _is_int(value) else value
    safe = isinstance(text, str) and SAFE_NAME.fullmatch(text) is not None and ".." not in text
    _check(safe, key, value, SAFE_NAME_RULE)


def validate(cfg: DictConfig, check_devices: bool = True) -> None:
    """Raise ConfigError on the first value outside its allowed range. `check_devices=False` skips comparing
    `trainer.devices` with this machine (a SLURM submission host has none of the compute nodes' GPUs)."""
    data_name = cfg.data.name
    _check(data_name in DATASETS, "data.name", data_name, f"one of {', '.join(DATASETS)}")
    Protocol.from_cfg(cfg)  # the protocol checks its own settings (aug.*, loss.ls)
    _check_data(cfg.data, cfg.aug.cutmix)
    _check_model(cfg.model)
    _check_optim(cfg.optim)
    _check_trainer(cfg.trainer, check_devices)
    _check_global_batch(cfg.data.batch_size, cfg.trainer)
    validate_stats(cfg.stats, cfg.model.depth)
    _check_callbacks(cfg.callbacks)
    _check_logger(cfg.logger)
    _check_run(cfg)


def _check_data(data: DictConfig, cutmix: bool) -> None:
    _integer(data, "data", "batch_size", 1)
    if cutmix:
        _check(data.batch_size >= 2, "data.batch_size", data.batch_size, ">= 2 when aug.cutmix=true")
    eval_batch = data.eval_batch_size
    allowed = "an integer >= 1, or null (the training batch size)"
    _check(eval_batch is None or (_is_int(eval_batch) and eval_batch >= 1), "data.eval_batch_size", eval_batch, allowed)
    _integer(data, "data", "num_workers", 0)
    on_device = data.get("on_device", False)
    _check(on_device in ("auto", True, False), "data.on_device", on_device, "auto (on with CUDA), true or false")
    _integer(data, "data", "split_seed", 0)
    if "root" in data:
        _check(data.root != "", "data.root", data.root, "a directory path")
    if data.name == "synthetic":
        _check_synthetic(data)
    if "image_size" in data:
        size = data.image_size
        allowed = f"a multiple of {GRID_SIZE} (the {GRID_SIZE} x {GRID_SIZE} patch grid), at least 16"
        _check(_is_int(size) and size >= 16 and size % GRID_SIZE == 0, "data.image_size", size, allowed)
    train_size = data.train_size if data.name == "synthetic" else TRAIN_SIZES[data.name]
    allowed = f"an integer in [0, {train_size - 1}]: held out of the {train_size} training images of {data.name}"
    _check(_is_int(data.val_size) and 0 <= data.val_size < train_size, "data.val_size", data.val_size, allowed)
    left = train_size - data.val_size
    held_out = f" left after data.val_size={data.val_size}" if data.val_size else ""
    _check(data.batch_size <= left, "data.batch_size", data.batch_size, f"at most the {left} training images{held_out}")


SYNTHETIC_MINIMUMS = {"train_size": 1, "test_size": 1, "num_classes": 2}


def _check_synthetic(data: DictConfig) -> None:
    for name, minimum in (*SYNTHETIC_MINIMUMS.items(), ("generator_seed", 0)):
        _integer(data, "data", name, minimum)
    _check(_is_finite(data.noise) and data.noise >= 0, "data.noise", data.noise, "a number >= 0, finite")
    _check(_is_finite(data.period) and data.period >= 2, "data.period", data.period, "a number of pixels >= 2, finite")


def _check_model(model: DictConfig) -> None:
    _name("model.name", model.name)
    for key in ("depth", "dim", "heads"):
        _integer(model, "model", key, 1)
    _check(model.dim % model.heads == 0, "model.dim", model.dim, f"a multiple of model.heads={model.heads}")
    _check(_is_finite(model.mlp_ratio) and model.mlp_ratio > 0, "model.mlp_ratio", model.mlp_ratio, "> 0, finite")
    compile_ = model.compile
    _check(compile_ in ("auto", True, False), "model.compile", compile_, "auto, true or false")
    if "stem" in model:
        _one_of("model.stem", model.stem, MODEL_STEMS)


def _check_optim(optim: DictConfig) -> None:
    _check(_is_finite(optim.lr) and optim.lr > 0, "optim.lr", optim.lr, "> 0, finite")
    for key in ("weight_decay", "warmup_epochs"):
        _check(_is_finite(optim[key]) and optim[key] >= 0, f"optim.{key}", optim[key], ">= 0, finite")
    betas = optim.betas
    pair = len(betas) == 2 and all(0 <= b < 1 for b in betas)
    _check(pair, "optim.betas", list(betas), "two numbers in [0, 1), e.g. [0.9,0.999]")
    ratio = optim.min_lr_ratio
    _check(0 <= ratio <= 1, "optim.min_lr_ratio", ratio, "a number in [0, 1] (of optim.lr)")


def _check_trainer(trainer: DictConfig, check_devices: bool) -> None:
    _one_of("trainer.accelerator", trainer.accelerator, ACCELERATORS)
    _one_of("trainer.strategy", trainer.strategy, STRATEGIES)
    precision = str(trainer.precision) if _is_int(trainer.precision) else trainer.precision
    _one_of("trainer.precision", precision, PRECISIONS)
    for name in ("max_epochs", "num_nodes", "log_every_n_steps"):
        _integer(trainer, "trainer", name, 1)
    every = trainer.check_val_every_n_epoch
    _check(_is_int(every) and every >= 1, "trainer.check_val_every_n_epoch", every, "an integer >= 1")
    clip = trainer.gradient_clip_val
    _check(clip is None or (_is_finite(clip) and clip >= 0), "trainer.gradient_clip_val", clip, "null or a number >= 0")
    allowed = "true, false or warn (warn: non-deterministic operations only warn)"
    _check(trainer.deterministic in (True, False, "warn"), "trainer.deterministic", trainer.deterministic, allowed)
    for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "overfit_batches"):
        if name in trainer:
            _check_limit(f"trainer.{name}", trainer[name])
    _check_other_trainer_arguments(trainer)
    devices = trainer.devices
    listed = isinstance(devices, ListConfig) and len(devices) > 0 and all(_is_int(d) and d >= 0 for d in devices)
    counted = devices in ("auto", -1) or (_is_int(devices) and devices >= 1)
    allowed = "an integer >= 1, -1 or auto (every device), or a list of device indices"
    _check(listed or counted, "trainer.devices", devices, allowed)
    if check_devices:
        validate_devices(trainer)


# Lower bounds of the count-like Trainer arguments a quick check or a debug config sets.
TRAINER_COUNTS = {
    "max_steps": -1,
    "min_steps": 0,
    "min_epochs": 0,
    "accumulate_grad_batches": 1,
    "num_sanity_val_steps": -1,
}


def _check_other_trainer_arguments(trainer: DictConfig) -> None:
    """Any other Trainer argument (`+trainer.<name>`, or set by a debug config): known to the installed Trainer, of
    a type it takes. Asked of Lightning only when there is one, so an ordinary command is checked without it."""
    from vit_locality.config.trainer_options import check_trainer_options

    others = {k: v for k, v in OmegaConf.to_container(trainer).items() if k not in DECLARED_TRAINER_KEYS}
    if others:
        check_trainer_options(others)
    for name, minimum in TRAINER_COUNTS.items():
        value = trainer.get(name)
        if value is not None:
            _check(_is_int(value) and value >= minimum, f"trainer.{name}", value, f"an integer >= {minimum}")
    fast = trainer.get("fast_dev_run", False)
    _check(
        isinstance(fast, bool) or (_is_int(fast) and fast >= 0),
        "trainer.fast_dev_run",
        fast,
        "true, false or a count of batches >= 0",
    )
    interval = trainer.get("val_check_interval")
    _check(
        interval is None or (_is_finite(interval) and interval > 0),
        "trainer.val_check_interval",
        interval,
        "null, a fraction of an epoch in (0, 1] or a count of batches >= 1",
    )


def _check_limit(key: str, value: Any) -> None:
    """Lightning reads an integer as a count of batches and a float as a fraction of them."""
    count = _is_int(value) and value >= 0
    fraction = isinstance(value, float) and 0 <= value <= 1
    _check(value is None or count or fraction, key, value, "null, a count of batches >= 0 or a fraction in [0, 1]")


def _check_global_batch(batch_size: int, trainer: DictConfig) -> None:
    devices = trainer.devices
    if _is_int(devices) and devices >= 1:
        world = devices * trainer.num_nodes
        allowed = f"a multiple of trainer.devices x trainer.num_nodes = {world} (the global batch is split evenly)"
        _check(batch_size % world == 0, "data.batch_size", batch_size, allowed)


def validate_stats(stats: DictConfig, depth: int | None) -> None:
    """The probe's settings; `depth` (unknown to `analyze` until it reads the run) bounds `early_layers`."""
    for name in ("probe_size", "batch_size", "every_n_epochs"):
        _integer(stats, "stats", name, 1)
    _integer(stats, "stats", "early_layers", 1, depth)


def _check_callbacks(callbacks: DictConfig) -> None:
    _integer(callbacks, "callbacks", "checkpoint_every_n_epochs", 1)


def _check_logger(logger: DictConfig) -> None:
    wandb = logger.get("wandb")
    if wandb is None:
        return
    _check(wandb.project != "", "logger.wandb.project", wandb.project, "a name")


def _check_run(cfg: DictConfig) -> None:
    _integer(cfg, "", "seed", 0, MAX_SEED)
    _flags(cfg.sweep, "sweep", "continue_on_error")
    _name("sweep_name", cfg.sweep_name)
    tags = cfg.get("tags", [])
    listed = isinstance(tags, ListConfig) and all(isinstance(tag, str) and 0 < len(tag) <= 64 for tag in tags)
    _check(listed, "tags", OmegaConf.to_container(tags) if OmegaConf.is_config(tags) else tags, TAGS_RULE)
    try:
        run_name = cfg.run_name
    except OmegaConfBaseException as error:
        raise ConfigError(f"run_name: {str(error).splitlines()[0]}") from None
    _name("run_name", run_name)
    metric = cfg.get("optimized_metric")
    allowed = "null or a record metric, e.g. val/acc1, test/acc1, min_mad_early, mean_entropy_early"
    _check(metric is None or (isinstance(metric, str) and metric.strip() != ""), "optimized_metric", metric, allowed)


def validate_analysis(cfg: DictConfig) -> None:
    """The settings of `python -m vit_locality.analyze` that can be checked without loading the checkpoint."""
    if OmegaConf.is_missing(cfg, "ckpt_path"):
        raise ConfigError("ckpt_path is not set: pass ckpt_path=<run dir>/checkpoints/last.ckpt (from train.py)")
    checkpoint = cfg.ckpt_path
    problem = file_problem(Path(str(checkpoint))) if checkpoint not in (None, "") else "empty"
    _check(problem is None, "ckpt_path", checkpoint, f"a .ckpt file written by train.py ({problem})")
    validate_stats(cfg.stats, None)
    _one_of("device", cfg.device, ANALYSIS_DEVICES)
    _check(_is_bool(cfg.overwrite), "overwrite", cfg.overwrite, "true or false")
    for key in ("out_dir", "data_root"):
        _check(cfg[key] is None or isinstance(cfg[key], str), key, cfg[key], "a directory path, or null")
    if cfg.out_dir:
        check_directory("out_dir", cfg.out_dir, Path(cfg.out_dir))


def available_devices(accelerator: str) -> tuple[int, str]:
    """How many devices `trainer.devices` may ask for, and what they are."""
    import torch  # deferred: config checks should not pay for torch unless they reach this point

    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.cuda.device_count(), "CUDA GPUs"
    return os.cpu_count() or 1, "CPU cores (trainer.accelerator=cpu runs one process per device)"


def validate_devices(trainer: DictConfig) -> None:
    """`trainer.devices` against this machine. One device on the CPU is always there (and needs no torch to count);
    auto, -1 and a list of indices leave the count to Lightning."""
    devices = trainer.devices
    if not _is_int(devices) or devices == -1 or (devices == 1 and trainer.accelerator in ("auto", "cpu")):
        return
    count, kind = available_devices(str(trainer.accelerator))
    _check(devices <= count, "trainer.devices", devices, f"at most {count}: this machine has {count} {kind}")
