"""The GPU bench's sizes (full GPU run, CPU smoke run), its targets and its table rows."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vit_locality.bench.suite import COLUMNS, Row

CIFAR100 = {"train": 50_000, "eval": 10_000, "epochs": 200, "cells": 8, "seeds": 3}
TARGETS = {  # name: (comparison, threshold, unit)
    "on_device_overhead_pct": ("<=", 5.0, "%"),
    "cell_minutes": ("<=", 3.0, " min"),
    "grid_minutes": ("<=", 45.0, " min"),
}


@dataclass(frozen=True)
class Settings:
    """One run's sizes: `full` for the GPU call, `smoke` for the CPU test run."""

    model: str
    batch: int
    eval_batch: int
    steps: int  # timed steps per figure
    warmup: int  # untimed steps (the compile happens here)
    train_size: int  # synthetic images the cells read (several epochs of on-device data per figure)
    probe_size: int
    pack: tuple[int, ...]  # cells packed on the GPU
    pack_seconds: float
    overhead_steps: int
    repeats: int
    compile_backend: str  # "inductor"; "eager" in the smoke run (traces with dynamo, compiles nothing)
    workers: int  # data workers of the worker path (a CIFAR cell's default is 4)
    smoke: bool
    compile_mode: str = "default"  # torch.compile's mode with inductor: --compile-mode reduce-overhead (CUDA graphs)
    compile_reserve_s: float = 120.0  # compile_modes: budget a mode needs left to start (max-autotune tunes kernels)
    cell_epochs: int = CIFAR100["epochs"]  # the real cell run through train.py (gpu_runs.py): CIFAR-100's shapes
    cell_train: int = CIFAR100["train"]
    cell_test: int = CIFAR100["eval"]


# Cells one H200 holds by the memory model (memory_model.py: the paper model's bf16 step at batch 128, CIFAR-100 as
# uint8 on the device, a CUDA context each, 90% of 141 GiB): a projection, recomputed by tests/test_memory_model.py.
MEMORY_CELLS_PER_GPU = 121
GRID_WAVE = 8  # the 8-cell grid: packing more than one wave of it gains a sweep nothing


def pack_levels(cells_fit: int, wave: int = GRID_WAVE) -> tuple[int, ...]:
    """The packing levels the bench measures: 1, 2, 4, ... up to what fits in memory and at most one grid wave."""
    top = max(1, min(cells_fit, wave))
    return tuple(2**k for k in range(top.bit_length()) if 2**k <= top)


FULL = Settings(
    "vit_paper",
    128,
    512,
    60,
    10,
    16_384,
    512,
    pack_levels(MEMORY_CELLS_PER_GPU),
    20.0,
    1,
    7,
    "inductor",
    4,
    smoke=False,
)
SMOKE = Settings(
    "vit_tiny", 16, 64, 3, 1, 256, 32, (1, 2), 1.0, 2, 2, "eager", 2, smoke=True,
    compile_reserve_s=0.0, cell_epochs=1, cell_train=256, cell_test=64,
)  # fmt: skip


def row(section: str, quantity: str, value: str, target: str | None = None, measured: float = math.nan) -> Row:
    """A table row in the suite's form; with `target` (a key of TARGETS), whether `measured` meets it."""
    text = status = ""
    if target is not None:
        op, threshold, unit = TARGETS[target]
        met = measured >= threshold if op == ">=" else measured <= threshold
        text, status = f"{op} {threshold:g}{unit}", ("met" if met else "NOT met") if math.isfinite(measured) else ""
    return dict(zip(COLUMNS, (section, quantity, value, text, status), strict=True))
