"""The checks of the trainer group: names Lightning takes, counts, limits, validation intervals, the global batch and
the devices of this machine. Lightning itself judges what only it can (trainer_options)."""

from __future__ import annotations

import math
import os
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from vit_locality.config.schema import DECLARED_TRAINER_KEYS
from vit_locality.config.value_rules import check, integer, is_finite, is_int, one_of

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


def _check_trainer(trainer: DictConfig, check_devices: bool) -> None:
    one_of("trainer.accelerator", trainer.accelerator, ACCELERATORS)
    one_of("trainer.strategy", trainer.strategy, STRATEGIES)
    precision = str(trainer.precision) if is_int(trainer.precision) else trainer.precision
    one_of("trainer.precision", precision, PRECISIONS)
    for name in ("max_epochs", "num_nodes", "log_every_n_steps"):
        integer(trainer, "trainer", name, 1)
    every = trainer.check_val_every_n_epoch
    check(is_int(every) and every >= 1, "trainer.check_val_every_n_epoch", every, "an integer >= 1")
    clip = trainer.gradient_clip_val
    check(clip is None or (is_finite(clip) and clip >= 0), "trainer.gradient_clip_val", clip, "null or a number >= 0")
    allowed = "true, false or warn (warn: non-deterministic operations only warn)"
    check(trainer.deterministic in (True, False, "warn"), "trainer.deterministic", trainer.deterministic, allowed)
    limits = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")
    for name in (*limits, "overfit_batches"):
        if name in trainer:
            _check_limit(f"trainer.{name}", trainer[name])
    _check_other_trainer_arguments(trainer)
    devices = trainer.devices
    listed = isinstance(devices, ListConfig) and len(devices) > 0 and all(is_int(d) and d >= 0 for d in devices)
    counted = devices in ("auto", -1) or (is_int(devices) and devices >= 1)
    allowed = "an integer >= 1, -1 or auto (every device), or a list of device indices"
    check(listed or counted, "trainer.devices", devices, allowed)
    if check_devices:
        validate_devices(trainer)
        _check_with_lightning(trainer)


def _check_with_lightning(trainer: DictConfig) -> None:
    """An accelerator or strategy beyond the plain ones, judged by Lightning's own connector on this machine."""
    from vit_locality.config.trainer_options import check_accelerator_and_strategy, needs_lightning

    if needs_lightning(trainer):
        check_accelerator_and_strategy(trainer)


# Lower bounds of the count-like Trainer arguments a quick check or a debug config sets.
TRAINER_COUNTS = {
    "max_steps": -1,
    "min_steps": 0,
    "min_epochs": 0,
    "accumulate_grad_batches": 1,
    "num_sanity_val_steps": -1,
    "reload_dataloaders_every_n_epochs": 0,
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
            check(is_int(value) and value >= minimum, f"trainer.{name}", value, f"an integer >= {minimum}")
    fast = trainer.get("fast_dev_run", False)
    check(
        isinstance(fast, bool) or (is_int(fast) and fast >= 0),
        "trainer.fast_dev_run",
        fast,
        "true, false or a count of batches >= 0",
    )


VAL_CHECK_RULE = "null, a fraction of an epoch in (0, 1] or a count of batches in [1, {batches}] (an epoch's)"


VAL_CHECK_RULE_UNBOUNDED = "null, a fraction of an epoch in (0, 1] or a count of batches >= 1"


def _check_val_check_interval(trainer: DictConfig, batches: int) -> None:
    """Lightning reads a float as a fraction of the epoch and an int as a count of its batches, and refuses either
    beyond one epoch (this project validates every epoch: check_val_every_n_epoch is always set)."""
    interval = trainer.get("val_check_interval")
    limit = trainer.get("limit_train_batches")
    if is_int(limit):
        batches = min(batches, limit)
    elif isinstance(limit, float):
        batches = int(batches * limit)
    unbounded = bool(trainer.get("overfit_batches") or trainer.get("fast_dev_run"))  # loops that count their own
    fraction = isinstance(interval, float) and math.isfinite(interval) and 0 < interval <= 1
    count = is_int(interval) and interval >= 1 and (unbounded or interval <= batches)
    rule = VAL_CHECK_RULE_UNBOUNDED if unbounded else VAL_CHECK_RULE.format(batches=batches)
    check(interval is None or fraction or count, "trainer.val_check_interval", interval, rule)


def _check_limit(key: str, value: Any) -> None:
    """Lightning reads an integer as a count of batches and a float as a fraction of them. The test split must keep
    a batch: a cell's record is its test figures, and Lightning would train the whole cell before failing."""
    count = is_int(value) and value >= 0
    fraction = isinstance(value, float) and 0 <= value <= 1
    check(value is None or count or fraction, key, value, "null, a count of batches >= 0 or a fraction in [0, 1]")
    if key == "trainer.limit_test_batches":
        check(value is None or value > 0, key, value, "null, a count of batches >= 1 or a fraction in (0, 1]")


def _check_global_batch(batch_size: int, trainer: DictConfig) -> None:
    devices = trainer.devices
    if is_int(devices) and devices >= 1:
        world = devices * trainer.num_nodes
        allowed = f"a multiple of trainer.devices x trainer.num_nodes = {world} (the global batch is split evenly)"
        check(batch_size % world == 0, "data.batch_size", batch_size, allowed)


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
    if str(trainer.accelerator) in ("gpu", "cuda"):  # no GPU here: the accelerator is what to change, not devices
        count, kind = available_devices(str(trainer.accelerator))
        check(count > 0, "trainer.accelerator", trainer.accelerator, f"cpu or auto: this machine has no {kind}")
    if not is_int(devices) or devices == -1 or (devices == 1 and trainer.accelerator in ("auto", "cpu")):
        return
    count, kind = available_devices(str(trainer.accelerator))
    check(devices <= count, "trainer.devices", devices, f"at most {count}: this machine has {count} {kind}")
