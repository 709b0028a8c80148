"""The one gate a cell passes before anything is built: its composed config becomes `RunSettings`, then what only
this installation and machine can judge is checked (Trainer arguments beyond the declared ones, an online W&B run's
key, devices, cores, memory, the data's files, a readable `ckpt_path`). The pre-check runs it for every cell, the
job once more for its own (on a SLURM node, the node is the machine)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vit_locality.config.extensions import check_user_entries
from vit_locality.config.fields import check, is_int
from vit_locality.config.identity import identities_of
from vit_locality.config.refusal import missing, typed_section
from vit_locality.config.schema import StatsConfig
from vit_locality.config.settings import (
    REQUIRED,
    RESUME_MODE,
    RunSettings,
    early_layers_rule,
    undeclared_trainer_arguments,
)
from vit_locality.errors import ConfigError
from vit_locality.precheck import trainer_options
from vit_locality.precheck.command_line import check_directory, file_problem
from vit_locality.precheck.data_presence import check_data_present
from vit_locality.tracking.wandb_mode import api_key_source, resolve_mode

ANALYSIS_DEVICES = ("auto", "cpu", "cuda")
# data/synthetic.py draws a split in float32 (noise, images and three temporaries: 12 bytes a value at the peak)
# and keeps every split as uint8 (1 byte a value).
SYNTHETIC_DRAW_BYTES_PER_VALUE = 12
TRAINING_BYTES_PER_PARAMETER = 16  # weights, gradients and AdamW's two moments, float32
WORKERS_PER_CORE = 4


def resolved(cfg: DictConfig, keys: Iterable[str] | None = None) -> dict[str, Any]:
    """The composed config as plain data, interpolations resolved: every key but Hydra's own section and the run
    name, or the `keys` given. A setting the run needs that the config lacks, or a value that does not resolve, is a
    one-line ConfigError naming its key."""
    for name in REQUIRED:
        if name not in cfg:
            raise missing(name)
    values: dict[str, Any] = {}
    for key in keys if keys is not None else [str(key) for key in cfg if key not in ("hydra", "run_name")]:
        try:
            node = cfg[key]
            values[key] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        except OmegaConfBaseException as error:
            raise ConfigError(f"{key}: {str(error).splitlines()[0]}") from None
    return values


def settings_from(cfg: DictConfig, machine: bool = True, ask_servers: bool | None = None) -> RunSettings:
    """The cell's settings, or ConfigError on the first value outside its allowed range (the run name, computed
    from the others, last); then what only this installation can judge (Trainer arguments beyond the declared ones,
    asked of the installed Lightning; an online W&B run's key) and, unless `machine=False` (a SLURM submission host
    has none of the compute nodes' GPUs, nor perhaps their data), this machine; `ask_servers`: whether a data set
    to download needs its server to answer (the entry point's pre-check asks; None or False: not asked)."""
    values = resolved(cfg)
    others = undeclared_trainer_arguments(values)
    if others:  # the installed Trainer judges its own arguments first: its words for a wrong type are the clearer
        trainer_options.check_trainer_options(others)
    settings = RunSettings.from_values(values)
    if "run_name" in cfg:
        settings = settings.named(resolved(cfg, ["run_name"])["run_name"])
    check_installation(settings)
    if machine:
        check_this_machine(settings, bool(ask_servers))
    return settings


def on_this_machine(settings: RunSettings) -> RunSettings:
    """Settings validated elsewhere (a SLURM submission host) checked where the cell runs, without validating them
    again: this installation and this machine."""
    check_installation(settings)
    check_this_machine(settings)
    return settings


def check_installation(settings: RunSettings) -> None:
    """What this installation judges whatever the machine: user callbacks and loggers (`_target_`) must be classes
    it has that the cell can take, an online W&B run needs an API key (without one wandb stops the run with a
    validation traceback), and `ckpt_path` must be a file this user can read."""
    check_user_entries("callbacks", settings.callbacks.user_entries())
    check_user_entries("logger", settings.logger.user_entries())
    wandb = settings.logger.wandb
    if wandb is not None:
        mode = str(wandb.mode)
        online = mode == "online" or os.environ.get("WANDB_MODE") == "online"
        if online and resolve_mode(mode) == "online" and api_key_source() is None:
            raise ConfigError(
                f"logger.wandb.mode={mode} needs a W&B API key, and none is set: set WANDB_API_KEY (or run `wandb "
                "login`), or add logger.wandb.mode=offline (upload later with `wandb sync`)"
            )
    checkpoint = settings.ckpt_path
    if checkpoint is not None:
        problem = file_problem(Path(checkpoint).expanduser()) if checkpoint != "" else "empty"
        allowed = f"null or a checkpoint file this user can read ({problem})"
        check(problem is None, "ckpt_path", checkpoint, allowed)


def _physical_memory() -> int | None:
    """Bytes of memory on this machine, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_this_machine(settings: RunSettings, ask_servers: bool = False) -> None:
    """Devices, data workers against the cores, a synthetic set and the model's training state against the memory,
    and the data set's files (with `ask_servers`, a download's server must answer)."""
    validate_devices(settings.trainer.arguments())
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
    check_data_present(data, ask_servers)


def validate_stats(stats: DictConfig, depth: int | None) -> StatsConfig:
    """The probe's settings; `depth` (unknown to `analyze` until it reads the run) bounds `early_layers`."""
    typed = typed_section(StatsConfig, OmegaConf.to_container(stats, resolve=True), "stats")
    early_layers_rule(typed.early_layers, depth)
    return typed


@dataclass(frozen=True)
class AnalysisRequest:
    """What `analyze` is asked to do, checked: the checkpoint, how to measure, where to write."""

    ckpt_path: Path
    stats: StatsConfig
    device: str
    overwrite: bool
    out_dir: Path | None
    data_root: str | None


def validate_analysis(cfg: DictConfig) -> AnalysisRequest:
    """The analysis command's settings that can be checked without loading the checkpoint."""
    if OmegaConf.is_missing(cfg, "ckpt_path"):
        raise ConfigError("ckpt_path is not set: pass ckpt_path=<run dir>/checkpoints/last.ckpt (from train.py)")
    checkpoint = cfg.ckpt_path
    problem = file_problem(Path(str(checkpoint))) if checkpoint not in (None, "") else "empty"
    check(problem is None, "ckpt_path", checkpoint, f"a .ckpt file written by train.py ({problem})")
    stats = validate_stats(cfg.stats, None)
    device = cfg.device
    check(device in ANALYSIS_DEVICES, "device", device, f"one of {', '.join(ANALYSIS_DEVICES)}")
    check(isinstance(cfg.overwrite, bool), "overwrite", cfg.overwrite, "true or false")
    for key in ("out_dir", "data_root"):
        check(cfg[key] is None or isinstance(cfg[key], str), key, cfg[key], "a directory path, or null")
    if cfg.out_dir:
        check_directory("out_dir", cfg.out_dir, Path(cfg.out_dir))
    out_dir = Path(cfg.out_dir) if cfg.out_dir else None
    return AnalysisRequest(Path(str(checkpoint)), stats, device, cfg.overwrite, out_dir, cfg.data_root or None)


def available_devices(accelerator: str) -> tuple[int, str]:
    """How many devices `trainer.devices` may ask for, and what they are."""
    import torch  # deferred: config checks should not pay for torch unless they reach this point

    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.cuda.device_count(), "CUDA GPUs"
    return os.cpu_count() or 1, "CPU cores (trainer.accelerator=cpu runs one process per device)"


def validate_devices(trainer: dict[str, Any]) -> None:
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


def check_start(settings: RunSettings) -> None:
    """ConfigError, in one line, when `ckpt_mode=resume` names a checkpoint this config did not write (or one that
    cannot be read as a checkpoint). Nothing to check without `ckpt_path`, with `ckpt_mode=weights`, or for a path
    that is not a file (the value checks name that). The cell compares again as it loads the file (run/start.py);
    torch is imported only for a resume."""
    from vit_locality.run.checkpoints import DamagedCheckpoint, stamped_identity
    from vit_locality.run.start import refused_resume

    given = settings.ckpt_path
    if settings.ckpt_mode != RESUME_MODE or given in (None, ""):
        return
    path = Path(str(given)).expanduser()
    if not path.is_file():
        return
    try:
        written_by = stamped_identity(path)
    except DamagedCheckpoint as damage:
        raise ConfigError(
            f"ckpt_path={str(path)!r} is not allowed: a readable checkpoint file ({damage.why})"
        ) from None
    if written_by not in identities_of(settings):
        raise ConfigError(refused_resume(settings, path, written_by))
