"""Data section: can the per-sample augmentation of one CPU core keep the model fed?

One worker process does what a `num_workers=0` loader does: `dataset[i]` (the per-sample transform on a uint8
(3, H, W) tensor) and `default_collate`, one intra-op thread. That is timed for the Baseline (crop + flip) and
the Modern (crop + flip + AutoAugment CIFAR-10) pipelines, and the whole DataModule train loader (Modern, as
`build_datamodule` configures it) is timed an epoch at a time at 1 and 2 persistent workers. The headroom is a
pipeline's images/s on one core over the model's training images/s on one core (CPU) or on the device (CUDA).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from ..data import UInt8ImageDataset
from ..transforms import build_train_transform
from .common import ModelConfig, compose_config, make_train_step
from .timing import interleaved, timed, torch_threads


def per_sample_run(dataset: Dataset, count: int, batch: int) -> Callable[[], float]:
    """Seconds for `count` samples through `__getitem__` and collate, on one thread, as one worker does it."""

    def run() -> float:
        with torch_threads(1):
            start = time.perf_counter()
            for low in range(0, count, batch):
                default_collate([dataset[i] for i in range(low, min(low + batch, count))])
            return time.perf_counter() - start

    return run


def epoch_run(loader: DataLoader) -> Callable[[], float]:
    """Seconds for one epoch of a loader, from `iter()` (which restarts persistent workers' prefetch) to the end."""

    def run() -> float:
        start = time.perf_counter()
        for _ in loader:
            pass
        return time.perf_counter() - start

    return run


def one_core(fn: Callable[[], None], device: torch.device) -> Callable[[], None]:
    def run() -> None:
        with torch_threads(1 if device.type == "cpu" else None):
            fn()

    return run


def run(
    config: ModelConfig,
    samples: int,
    loader_images: int,
    batch: int,
    model_batch: int,
    repeats: int,
    warmup: int,
    device: torch.device,
) -> dict[str, Any]:
    from ..pipeline import build_datamodule

    if samples > loader_images:
        raise ValueError(f"samples={samples} must not exceed loader_images={loader_images} (they are its first images)")
    torch.manual_seed(0)
    cfg = compose_config(
        [
            "data=synthetic",
            "protocol=modern",
            f"data.train_size={loader_images}",
            "data.test_size=64",
            f"data.batch_size={batch}",
            f"data.num_classes={config.num_classes}",
            f"data.image_size={config.image_size}",
        ]
    )
    datamodule, policy = build_datamodule(cfg)
    datamodule.setup("fit")
    arrays = datamodule.arrays
    assert arrays is not None
    images, labels = arrays.train_images[:samples], arrays.train_labels[:samples]
    pipelines = {
        "baseline": build_train_transform(config.image_size, False, policy),
        "modern": build_train_transform(config.image_size, True, policy),
    }
    loaders: dict[str, DataLoader] = {}
    for workers in (1, 2):
        datamodule.num_workers = workers
        loaders[f"loader_{workers}w"] = datamodule.train_dataloader()
    runs = {name: per_sample_run(UInt8ImageDataset(images, labels, t), samples, batch) for name, t in pipelines.items()}
    runs["model_one_core"] = timed(
        one_core(make_train_step(config.build(), config, model_batch, device), device), device
    )
    runs.update({name: epoch_run(loader) for name, loader in loaders.items()})
    try:
        timings = interleaved(runs, repeats=repeats, warmup=warmup)
    finally:
        loaders.clear()
        gc.collect()  # shuts the persistent workers down before the next section
    loader_batches = loader_images // batch
    rates = {
        "baseline": samples / timings["baseline"].median,
        "modern": samples / timings["modern"].median,
        "model_one_core": model_batch / timings["model_one_core"].median,
        "loader_1w": loader_batches * batch / timings["loader_1w"].median,
        "loader_2w": loader_batches * batch / timings["loader_2w"].median,
    }
    return {
        "model": config.as_dict(),
        "policy": policy,
        "samples": samples,
        "loader_images_per_epoch": loader_batches * batch,
        "batch": batch,
        "model_batch": model_batch,
        "model_threads": 1 if device.type == "cpu" else "device",
        "repeats": repeats,
        "img_s": rates,
        "loader_img_s_per_worker": {"1w": rates["loader_1w"], "2w": rates["loader_2w"] / 2},
        "ratios": {
            "headroom_baseline": rates["baseline"] / rates["model_one_core"],
            "headroom_modern": rates["modern"] / rates["model_one_core"],
            "loader_2w_over_1w": rates["loader_2w"] / rates["loader_1w"],
        },
        "samples_s": {name: t.samples for name, t in timings.items()},
    }
