"""The checks on a composed config's values that its schema (schema.py) cannot express: ranges, closed lists of
names, and rules across settings (`data.batch_size` against `aug.cutmix`, `stats.early_layers` against
`model.depth`). Keys and types are the schema's: OmegaConf refuses `optim.lr=abc` while composing.

The checks run before anything is built, so a typo costs a second, not a run; that is why this module takes its
vocabulary from the torch-free `catalog` module (torch is imported only to count devices, and only when a check
reaches that point; Lightning only when a `trainer.*` setting outside the declared ones is used).
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vit_locality.catalog import DATASETS, GRID_SIZE, POSITION_INITS
from vit_locality.config.data_presence import check_data_present
from vit_locality.config.file_access import check_directory, file_problem
from vit_locality.config.trainer_checks import (
    _check_global_batch,
    _check_trainer,
    _check_val_check_interval,
)
from vit_locality.config.value_rules import check, flags, integer, is_bool, is_finite, is_int, one_of, safe_name
from vit_locality.errors import ConfigError
from vit_locality.metric_names import selection_problem
from vit_locality.protocol import Protocol

MODEL_STEMS = ("patch", "conv")
ANALYSIS_DEVICES = ("auto", "cpu", "cuda")
# Official training-set sizes, which data.val_size must leave images of (the synthetic set's is data.train_size).
TRAIN_SIZES = {"cifar10": 50_000, "cifar100": 50_000, "tiny_imagenet": 100_000}
MAX_SEED = 2**32 - 1  # the range of numpy's seed, which Lightning's seed_everything enforces
MAX_THREADS = 1024  # torch threads per cell: more than any machine here has cores; an extra zero is a typo
TAGS_RULE = "a list of strings of 1 to 64 printable characters (no newline or escape), e.g. tags=[paper,v2]"
# W&B's own rule for a project name (wandb_settings.Settings.validate_project): at most 128 characters, none of these.
WANDB_PROJECT_FORBIDDEN = "/\\#?%:"
WANDB_PROJECT_RULE = f"a name of 1 to 128 characters without any of {' '.join(WANDB_PROJECT_FORBIDDEN)} (W&B's rule)"
# What every record holds that optimized_metric may name: the figures the LightningModule logs each epoch
# (model/classifier.py; the last value of each is in the record's `metrics`; `train/loss` and `lr` are logged every
# log_every_n_steps only) and, with stats.enabled, the final attention headline pair (`attention.final`).
ATTENTION_METRICS = ("min_mad_early", "mean_entropy_early")
RECORD_METRICS = (
    *(f"{split}/{figure}" for split in ("val", "test_epoch", "test") for figure in ("acc1", "acc5", "loss")),
    "train/acc1",
    "train/loss_epoch",
    *ATTENTION_METRICS,
)
# Sizes beyond what this project's runs are for; stated so that a typo (an extra zero) is refused before it allocates.
MAX_IMAGE_SIZE = 512  # pixels a side: 64 x 64 patches of 8 pixels at the 8 x 8 grid
MAX_SYNTHETIC_IMAGES = 2_000_000  # per split
# data/synthetic.py draws a split in float32 (noise, images and three temporaries: 12 bytes a value at the peak)
# and keeps every split as uint8 (1 byte a value).
SYNTHETIC_DRAW_BYTES_PER_VALUE = 12
MAX_DEPTH = 64  # blocks; ViT-G has 48
MAX_DIM = 8192
TRAINING_BYTES_PER_PARAMETER = 16  # weights, gradients and AdamW's two moments, float32
WORKERS_PER_CORE = 4


def validate(cfg: DictConfig, check_devices: bool = True) -> None:
    """Raise ConfigError on the first value outside its allowed range. `check_devices=False` skips comparing
    `trainer.devices` with this machine (a SLURM submission host has none of the compute nodes' GPUs)."""
    data_name = cfg.data.name
    check(data_name in DATASETS, "data.name", data_name, f"one of {', '.join(DATASETS)}")
    Protocol.from_cfg(cfg)  # the protocol checks its own settings (aug.*, loss.ls)
    _check_data(cfg.data, cfg.aug.cutmix)
    _check_model(cfg.model)
    _check_optim(cfg.optim)
    _check_trainer(cfg.trainer, check_devices)
    _check_global_batch(cfg.data.batch_size, cfg.trainer)
    _check_val_check_interval(cfg.trainer, _train_batches(cfg.data))
    if check_devices:  # this machine's: its devices, and its copy of the data
        check_machine_sizes(cfg.data, cfg.model)
        check_data_present(cfg.data)
    validate_stats(cfg.stats, cfg.model.depth)
    _check_callbacks(cfg.callbacks)
    _check_logger(cfg.logger)
    _check_run(cfg)


def _check_data(data: DictConfig, cutmix: bool) -> None:
    integer(data, "data", "batch_size", 1)
    if cutmix:
        check(data.batch_size >= 2, "data.batch_size", data.batch_size, ">= 2 when aug.cutmix=true")
    eval_batch = data.eval_batch_size
    allowed = "an integer >= 1, or null (the training batch size)"
    check(eval_batch is None or (is_int(eval_batch) and eval_batch >= 1), "data.eval_batch_size", eval_batch, allowed)
    integer(data, "data", "num_workers", 0)
    on_device = data.get("on_device", False)
    check(on_device in ("auto", True, False), "data.on_device", on_device, "auto (on with CUDA), true or false")
    integer(data, "data", "split_seed", 0)
    if "root" in data:
        check(data.root != "", "data.root", data.root, "a directory path")
    if data.name == "synthetic":
        _check_synthetic(data)
    if data.name == "glyphs":
        _check_glyphs(data)
    if "image_size" in data:
        size = data.image_size
        allowed = f"a multiple of {GRID_SIZE} (the {GRID_SIZE} x {GRID_SIZE} patch grid) in [16, {MAX_IMAGE_SIZE}]"
        within = is_int(size) and 16 <= size <= MAX_IMAGE_SIZE and size % GRID_SIZE == 0
        check(within, "data.image_size", size, allowed)
    train_size = _train_size(data)
    allowed = f"an integer in [0, {train_size - 1}]: held out of the {train_size} training images of {data.name}"
    check(is_int(data.val_size) and 0 <= data.val_size < train_size, "data.val_size", data.val_size, allowed)
    left = train_size - data.val_size
    held_out = f" left after data.val_size={data.val_size}" if data.val_size else ""
    check(data.batch_size <= left, "data.batch_size", data.batch_size, f"at most the {left} training images{held_out}")


def _train_size(data: DictConfig) -> int:
    return data.train_size if data.name in GENERATED_SETS else TRAIN_SIZES[data.name]


def _train_batches(data: DictConfig) -> int:
    """Training batches in an epoch: full global batches of what val_size leaves (the loaders drop the last)."""
    return (_train_size(data) - data.val_size) // data.batch_size


GENERATED_SETS = ("synthetic", "glyphs")  # drawn from a seed: data.train_size is the training set's size
SYNTHETIC_MINIMUMS = {"train_size": 1, "test_size": 1, "num_classes": 2}


def _check_synthetic(data: DictConfig) -> None:
    for name, minimum in (*SYNTHETIC_MINIMUMS.items(), ("generator_seed", 0)):
        integer(data, "data", name, minimum)
    for name in ("train_size", "test_size"):
        integer(data, "data", name, 1, MAX_SYNTHETIC_IMAGES)
    check(is_finite(data.noise) and data.noise >= 0, "data.noise", data.noise, "a number >= 0, finite")
    check(is_finite(data.period) and data.period >= 2, "data.period", data.period, "a number of pixels >= 2, finite")


def _check_glyphs(data: DictConfig) -> None:
    for name, minimum in (*SYNTHETIC_MINIMUMS.items(), ("generator_seed", 0), ("clutter", 0)):
        integer(data, "data", name, minimum)
    for name in ("train_size", "test_size"):
        integer(data, "data", name, 1, MAX_SYNTHETIC_IMAGES)
    integer(data, "data", "num_classes", 2, 10)
    check(is_finite(data.noise) and data.noise >= 0, "data.noise", data.noise, "a number >= 0, finite")
    low, high = data.min_height, data.max_height
    check(is_finite(low) and 0.2 <= low <= 1, "data.min_height", low, "a fraction of the image side in [0.2, 1]")
    check(is_finite(high) and low <= high <= 1, "data.max_height", high, f"a fraction in [data.min_height={low}, 1]")


def _check_model(model: DictConfig) -> None:
    safe_name("model.name", model.name)
    integer(model, "model", "depth", 1, MAX_DEPTH)
    integer(model, "model", "dim", 1, MAX_DIM)
    integer(model, "model", "heads", 1)
    check(model.dim % model.heads == 0, "model.dim", model.dim, f"a multiple of model.heads={model.heads}")
    check(is_finite(model.mlp_ratio) and model.mlp_ratio > 0, "model.mlp_ratio", model.mlp_ratio, "> 0, finite")
    compile_ = model.compile
    check(compile_ in ("auto", True, False), "model.compile", compile_, "auto, true or false")
    if "stem" in model:
        one_of("model.stem", model.stem, MODEL_STEMS)
    if "pos_init" in model:
        one_of("model.pos_init", model.pos_init, POSITION_INITS)
        sincos_fits = model.pos_init != "sincos" or model.dim % 4 == 0
        check(sincos_fits, "model.dim", model.dim, "a multiple of 4 with model.pos_init=sincos")


def _check_optim(optim: DictConfig) -> None:
    check(is_finite(optim.lr) and optim.lr > 0, "optim.lr", optim.lr, "> 0, finite")
    for key in ("weight_decay", "warmup_epochs"):
        check(is_finite(optim[key]) and optim[key] >= 0, f"optim.{key}", optim[key], ">= 0, finite")
    betas = optim.betas
    pair = len(betas) == 2 and all(0 <= b < 1 for b in betas)
    check(pair, "optim.betas", list(betas), "two numbers in [0, 1), e.g. [0.9,0.999]")
    ratio = optim.min_lr_ratio
    check(0 <= ratio <= 1, "optim.min_lr_ratio", ratio, "a number in [0, 1] (of optim.lr)")


def _physical_memory() -> int | None:
    """Bytes of memory on this machine, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_machine_sizes(data: DictConfig, model: DictConfig) -> None:
    """Sizes against this machine: data workers against its cores, a synthetic set and the model's training state
    against its memory. Skipped for a SLURM submission, whose compute nodes are other machines."""
    cores = os.cpu_count() or 1
    workers = f"an integer in [0, {WORKERS_PER_CORE * cores}]: {WORKERS_PER_CORE} per CPU core of this machine"
    check(data.num_workers <= WORKERS_PER_CORE * cores, "data.num_workers", data.num_workers, workers)
    memory = _physical_memory()
    if memory is None:
        return
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


def validate_stats(stats: DictConfig, depth: int | None) -> None:
    """The probe's settings; `depth` (unknown to `analyze` until it reads the run) bounds `early_layers`."""
    for name in ("probe_size", "batch_size", "every_n_epochs"):
        integer(stats, "stats", name, 1)
    integer(stats, "stats", "early_layers", 1, depth)


def _check_callbacks(callbacks: DictConfig) -> None:
    integer(callbacks, "callbacks", "checkpoint_every_n_epochs", 1)


def _check_logger(logger: DictConfig) -> None:
    wandb = logger.get("wandb")
    if wandb is None:
        return
    project = wandb.project
    forbidden = any(char in WANDB_PROJECT_FORBIDDEN for char in project)
    check(0 < len(project) <= 128 and not forbidden, "logger.wandb.project", project, WANDB_PROJECT_RULE)
    _check_wandb_key(str(wandb.get("mode", "auto")))


def _check_wandb_key(mode: str) -> None:
    """An online W&B run needs an API key; without one wandb stops the run with a validation traceback."""
    if mode != "online" and os.environ.get("WANDB_MODE") != "online":
        return
    from vit_locality.tracking.wandb_run import api_key_source, resolve_mode

    if resolve_mode(mode) == "online" and api_key_source() is None:
        raise ConfigError(
            f"logger.wandb.mode={mode} needs a W&B API key, and none is set: set WANDB_API_KEY (or run `wandb "
            "login`), or add logger.wandb.mode=offline (upload later with `wandb sync`)"
        )


def _check_run(cfg: DictConfig) -> None:
    integer(cfg, "", "seed", 0, MAX_SEED)
    if cfg.get("threads") is not None:
        integer(cfg, "", "threads", 1, MAX_THREADS)
    flags(cfg.sweep, "sweep", "continue_on_error")
    safe_name("sweep_name", cfg.sweep_name)
    tags = cfg.get("tags", [])
    listed = isinstance(tags, ListConfig) and all(
        isinstance(tag, str) and 0 < len(tag) <= 64 and tag.isprintable() for tag in tags
    )
    check(listed, "tags", OmegaConf.to_container(tags) if OmegaConf.is_config(tags) else tags, TAGS_RULE)
    try:
        run_name = cfg.run_name
    except OmegaConfBaseException as error:
        raise ConfigError(f"run_name: {str(error).splitlines()[0]}") from None
    safe_name("run_name", run_name)
    metric = cfg.get("optimized_metric")
    allowed = f"null or a figure every record has: one of {', '.join(RECORD_METRICS)}"
    check(metric is None or metric in RECORD_METRICS, "optimized_metric", metric, allowed)
    measured = metric not in ATTENTION_METRICS or cfg.stats.enabled
    check(measured, "optimized_metric", metric, "a figure the cell measures: set stats.enabled=true for it")
    test_set = selection_problem(metric, int(cfg.data.val_size or 0)) if metric else None
    if test_set:  # a search selects: it must never select on the test set (vit_locality/metric_names.py)
        raise ConfigError(test_set)
    _check_start(cfg)


def _check_start(cfg: DictConfig) -> None:
    """`ckpt_path` (train): a checkpoint file this user can read, or null; whether it is a checkpoint, and of which
    cell, the run itself finds out before anything is recorded (run/start.py)."""
    checkpoint = cfg.get("ckpt_path")
    resume_alone = checkpoint is None and str(cfg.get("ckpt_mode")) == "resume"
    check(not resume_alone, "ckpt_mode", "resume", "only with ckpt_path=FILE (the checkpoint to resume from)")
    if checkpoint is None:
        return
    problem = file_problem(Path(str(checkpoint)).expanduser()) if checkpoint != "" else "empty"
    check(problem is None, "ckpt_path", checkpoint, f"null or a checkpoint file this user can read ({problem})")


def validate_analysis(cfg: DictConfig) -> None:
    """The settings of `python -m vit_locality.analyze` that can be checked without loading the checkpoint."""
    if OmegaConf.is_missing(cfg, "ckpt_path"):
        raise ConfigError("ckpt_path is not set: pass ckpt_path=<run dir>/checkpoints/last.ckpt (from train.py)")
    checkpoint = cfg.ckpt_path
    problem = file_problem(Path(str(checkpoint))) if checkpoint not in (None, "") else "empty"
    check(problem is None, "ckpt_path", checkpoint, f"a .ckpt file written by train.py ({problem})")
    validate_stats(cfg.stats, None)
    one_of("device", cfg.device, ANALYSIS_DEVICES)
    check(is_bool(cfg.overwrite), "overwrite", cfg.overwrite, "true or false")
    for key in ("out_dir", "data_root"):
        check(cfg[key] is None or isinstance(cfg[key], str), key, cfg[key], "a directory path, or null")
    if cfg.out_dir:
        check_directory("out_dir", cfg.out_dir, Path(cfg.out_dir))
