"""Config helpers that need OmegaConf only (no Hydra, no torch): resolvers for run names and the checks on values.

The checks run on the composed config before anything is built, so a typo costs a second, not a run; that is
why this module takes its vocabulary from the torch-free `domain` module (torch is imported only to count
devices, and only when a check reaches that point).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from .domain import AUGMENT_POLICIES, COLORJITTER, DATASETS, GRID_SIZE, resolve_policy


class ConfigError(ValueError):
    """A setting has a value that is not allowed; the message names the key, the value and what is allowed."""


def _as_01(value: Any) -> int:
    return int(bool(value))


def _compact_number(value: Any) -> str:
    """0 and 0.0 both print as `0`, 0.10 as `0.1`: one cell, one directory name."""
    return f"{float(value):g}"


def register_resolvers() -> None:
    """`${as_01:...}` (bool -> 0/1) and `${compact_number:...}` (0.10 -> 0.1), used by `run_name`."""
    for name, fn in (("as_01", _as_01), ("compact_number", _compact_number)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def _check(condition: bool, key: str, value: Any, allowed: str) -> None:
    if not condition:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate(cfg: DictConfig, check_devices: bool = True) -> None:
    """Raise ConfigError on the first value outside its allowed range. `check_devices=False` skips comparing
    `trainer.devices` with this machine (a SLURM submission host has none of the compute nodes' GPUs)."""
    data, model, aug, loss, optim, trainer = cfg.data, cfg.model, cfg.aug, cfg.loss, cfg.optim, cfg.trainer
    _check(data.name in DATASETS, "data.name", data.name, f"one of {', '.join(DATASETS)}")
    for key in ("autoaug", "cutmix"):
        _check(_is_bool(aug[key]), f"aug.{key}", aug[key], "true or false")
    allowed_policies = ("auto", *AUGMENT_POLICIES)
    _check(aug.policy in allowed_policies, "aug.policy", aug.policy, ", ".join(allowed_policies))
    _check(aug.device in ("cpu", "gpu"), "aug.device", aug.device, "cpu (per sample, in the workers) or gpu (batched)")
    if aug.device == "gpu" and aug.autoaug:
        colorjitter = resolve_policy(aug.policy, data.name) == COLORJITTER
        _check(not colorjitter, "aug.device", aug.device, "cpu when the policy is colorjitter (Tiny-ImageNet)")
    _check(
        model.get("compile", "auto") in ("auto", True, False),
        "model.compile",
        model.get("compile"),
        "auto, true or false",
    )
    _check(_is_number(aug.cutmix_alpha) and aug.cutmix_alpha > 0, "aug.cutmix_alpha", aug.cutmix_alpha, "> 0")
    _check(_is_number(loss.ls) and 0 <= loss.ls < 1, "loss.ls", loss.ls, "a number in [0, 1)")
    for key in ("depth", "dim", "heads"):
        _check(isinstance(model[key], int) and model[key] >= 1, f"model.{key}", model[key], "an integer >= 1")
    _check(model.dim % model.heads == 0, "model.dim", model.dim, f"a multiple of model.heads={model.heads}")
    _check(_is_number(model.mlp_ratio) and model.mlp_ratio > 0, "model.mlp_ratio", model.mlp_ratio, "> 0")
    _check(isinstance(data.batch_size, int) and data.batch_size >= 1, "data.batch_size", data.batch_size, ">= 1")
    if aug.cutmix:
        _check(data.batch_size >= 2, "data.batch_size", data.batch_size, ">= 2 when aug.cutmix=true")
    _check(
        isinstance(data.num_workers, int) and data.num_workers >= 0,
        "data.num_workers",
        data.num_workers,
        ">= 0",
    )
    _check(_is_number(optim.lr) and optim.lr > 0, "optim.lr", optim.lr, "> 0")
    _check(
        _is_number(optim.weight_decay) and optim.weight_decay >= 0,
        "optim.weight_decay",
        optim.weight_decay,
        ">= 0",
    )
    _check(
        _is_number(optim.warmup_epochs) and optim.warmup_epochs >= 0,
        "optim.warmup_epochs",
        optim.warmup_epochs,
        ">= 0",
    )
    _check(
        isinstance(trainer.max_epochs, int) and trainer.max_epochs >= 1,
        "trainer.max_epochs",
        trainer.max_epochs,
        "an integer >= 1",
    )
    _check(isinstance(cfg.seed, int) and cfg.seed >= 0, "seed", cfg.seed, "an integer >= 0")
    if "image_size" in data:
        size = data.image_size
        allowed = f"a multiple of {GRID_SIZE} (the {GRID_SIZE} x {GRID_SIZE} patch grid), at least 16"
        _check(isinstance(size, int) and size >= 16 and size % GRID_SIZE == 0, "data.image_size", size, allowed)
    if check_devices:
        validate_devices(trainer)
    devices = trainer.devices
    if isinstance(devices, int) and devices >= 1:
        world = devices * int(trainer.num_nodes)
        allowed = f"a multiple of trainer.devices x trainer.num_nodes = {world} (the global batch is split evenly)"
        _check(data.batch_size % world == 0, "data.batch_size", data.batch_size, allowed)


def available_devices(accelerator: str) -> tuple[int, str]:
    """How many devices `trainer.devices` may ask for, and what they are."""
    import torch  # deferred: config checks should not pay for torch unless they reach this point

    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.cuda.device_count(), "CUDA GPUs"
    return os.cpu_count() or 1, "CPU cores (trainer.accelerator=cpu runs one process per device)"


def validate_devices(trainer: DictConfig) -> None:
    devices = trainer.devices
    if devices in ("auto", -1) or isinstance(devices, ListConfig):
        return
    _check(isinstance(devices, int) and devices >= 1, "trainer.devices", devices, "an integer >= 1, -1 or auto")
    count, kind = available_devices(str(trainer.accelerator))
    _check(devices <= count, "trainer.devices", devices, f"at most {count}: this machine has {count} {kind}")


# Settings that decide what a run computes. Two runs with equal identities may share a directory;
# workers, paths, loggers and progress bars may differ between a run and its resumption.
IDENTITY_KEYS = ("data", "model", "aug", "loss", "optim", "seed", "trainer.max_epochs", "trainer.precision")
IGNORED_DATA_KEYS = ("root", "num_workers", "download", "verify", "eval_batch_size")


def run_identity(cfg: DictConfig) -> dict[str, Any]:
    """The part of the config that defines the cell, as plain data."""
    identity: dict[str, Any] = {}
    for key in IDENTITY_KEYS:
        value = OmegaConf.select(cfg, key)
        identity[key] = OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value
    identity["data"] = {k: v for k, v in identity["data"].items() if k not in IGNORED_DATA_KEYS}
    identity["model"] = {k: v for k, v in identity["model"].items() if k != "compile"}  # same maths either way
    return identity


def identity_hash(cfg: DictConfig) -> str:
    blob = json.dumps(run_identity(cfg), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
