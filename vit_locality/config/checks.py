"""The entry points of config validation: a composed train config (`validate`, building the cell's typed settings,
settings.py), the analysis command's settings, and the checks of this machine (cores, memory, the data's files).

The checks run before anything is built, so a typo costs a second, not a run: torch is imported only to count
devices, and only when a check reaches that point; Lightning only when a `trainer.*` setting outside the declared
ones, or an accelerator or strategy beyond the plain ones, is used.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from vit_locality.config.data_presence import check_data_present
from vit_locality.config.file_access import check_directory, file_problem
from vit_locality.config.schema import TRAIN_SIZES, StatsConfig
from vit_locality.config.settings import RunSettings, early_layers_rule, settings_of, typed_section
from vit_locality.config.value_rules import check
from vit_locality.errors import ConfigError

__all__ = ["TRAIN_SIZES", "validate", "validate_analysis", "validate_stats"]
ANALYSIS_DEVICES = ("auto", "cpu", "cuda")
# data/synthetic.py draws a split in float32 (noise, images and three temporaries: 12 bytes a value at the peak)
# and keeps every split as uint8 (1 byte a value).
SYNTHETIC_DRAW_BYTES_PER_VALUE = 12
TRAINING_BYTES_PER_PARAMETER = 16  # weights, gradients and AdamW's two moments, float32
WORKERS_PER_CORE = 4


def validate(cfg: DictConfig, check_devices: bool = True) -> RunSettings:
    """The cell's typed settings (settings.settings_of), or ConfigError on the first value outside its allowed
    range. `check_devices=False` skips comparing the config with this machine (a SLURM submission host has none of
    the compute nodes' GPUs, nor perhaps their data)."""
    return settings_of(cfg, check_devices)


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
