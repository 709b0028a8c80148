"""The trainer section's rules beyond field ranges: the names Lightning takes, the other Trainer arguments, the
validation interval against an epoch and the global batch against the devices."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vit_locality.config.fields import check, is_int

# Names from Lightning's registries, written out so the check needs no Lightning import (2 s); tests/config/
# test_config.py compares them with the installed Lightning.
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
LIMITS = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches", "overfit_batches")
# Lower bounds of the count-like Trainer arguments a quick check or a debug config sets.
TRAINER_COUNTS = {
    "max_steps": -1,
    "min_steps": 0,
    "min_epochs": 0,
    "accumulate_grad_batches": 1,
    "num_sanity_val_steps": -1,
    "reload_dataloaders_every_n_epochs": 0,
}
VAL_CHECK_RULE = "null, a fraction of an epoch in (0, 1] or a count of batches in [1, {batches}] (an epoch's)"
VAL_CHECK_RULE_UNBOUNDED = "null, a fraction of an epoch in (0, 1] or a count of batches >= 1"


def limit_ok(value: Any) -> bool:
    """Lightning reads an integer as a count of batches and a float as a fraction of them."""
    return value is None or (is_int(value) and value >= 0) or (isinstance(value, float) and 0 <= value <= 1)


def trains_a_batch(value: Any) -> bool:
    """A training limit that leaves a batch to train (0 would record the untrained model as a complete cell)."""
    return limit_ok(value) and (value is None or value > 0)


def limit_allowed(key: str) -> str:
    """The words of a limit's refusal: the test and training splits must keep a batch."""
    if key == "trainer.limit_test_batches":
        return "null, a count of batches >= 1 or a fraction in (0, 1]"
    if key == "trainer.limit_train_batches":
        return "null, a count of batches >= 1 or a fraction in (0, 1] (0 trains nothing: no cell)"
    return "null, a count of batches >= 0 or a fraction in [0, 1]"


def check_trainer_limits(others: Mapping[str, Any]) -> dict[str, Any]:
    """The ranges of the other Trainer arguments a quick check or a debug config sets (limits, step counts,
    fast_dev_run)."""
    for name in LIMITS:
        value = others.get(name)
        keeps_one = name not in ("limit_test_batches", "limit_train_batches") or value is None or value > 0
        check(limit_ok(value) and keeps_one, f"trainer.{name}", value, limit_allowed(f"trainer.{name}"))
    for name, minimum in TRAINER_COUNTS.items():
        value = others.get(name)
        if value is not None:
            check(is_int(value) and value >= minimum, f"trainer.{name}", value, f"an integer >= {minimum}")
    fast = others.get("fast_dev_run", False)
    allowed = "true, false or a count of batches >= 0"
    check(isinstance(fast, bool) or (is_int(fast) and fast >= 0), "trainer.fast_dev_run", fast, allowed)
    return dict(others)


MAX_EPOCHS_RULE = "an integer >= 1, or -1 (no epoch limit) with trainer.max_steps >= 1 to end the run"


def epochs_ok(value: Any) -> bool:
    """Lightning's -1 is "no epoch limit" (check_epoch_limit asks for another)."""
    return is_int(value) and (value >= 1 or value == -1)


def check_epoch_limit(trainer: Mapping[str, Any]) -> None:
    """`trainer.max_epochs=-1` only with `trainer.max_steps` ending the run: the schedule spans the run's steps."""
    if trainer.get("max_epochs") != -1:
        return
    steps = trainer.get("max_steps")
    check(is_int(steps) and steps >= 1, "trainer.max_epochs", -1, MAX_EPOCHS_RULE)


def check_val_check_interval(trainer: Mapping[str, Any], batches: int) -> None:
    """A float is a fraction of the epoch, an int a count of its batches; Lightning refuses either beyond one."""
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


def check_global_batch(batch_size: int, devices: Any, num_nodes: int) -> None:
    if is_int(devices) and devices >= 1:
        world = devices * num_nodes
        allowed = f"a multiple of trainer.devices x trainer.num_nodes = {world} (the global batch is split evenly)"
        check(batch_size % world == 0, "data.batch_size", batch_size, allowed)
