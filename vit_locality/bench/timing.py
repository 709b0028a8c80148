"""Side-by-side timing: candidates interleaved after a warm-up, medians of the repeats, and the machine's state.

Interleaving (A B, then B A, ...) makes drift in the machine's load (another process, thermal throttling) hit
every candidate alike, so the ratio of medians is steadier than either absolute figure.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import time
from collections.abc import Callable
from importlib import metadata

import torch

VERSIONED = ("torch", "torchvision", "lightning", "timm", "torchmetrics", "numpy")


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so a clock read after it measures the work and not the launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, threads: int | None = None) -> Callable[[], float]:
    """Wrap `fn` into a run that returns its own wall time in seconds (synchronised on CUDA), run with `threads`
    intra-op threads (None: as set)."""

    def run() -> float:
        previous = torch.get_num_threads()
        torch.set_num_threads(threads or previous)
        try:
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            return time.perf_counter() - start
        finally:
            torch.set_num_threads(previous)

    return run


def interleaved(runs: dict[str, Callable[[], float]], repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Call every run `warmup` times untimed, then `repeats` rounds, alternating the order each round; return
    each run's samples in the order taken. A run returns the seconds it measured itself (see `timed`), so it may
    leave its own set-up out."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats}: at least one timed round is needed")
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            runs[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(repeats):
        for name in names if round_index % 2 == 0 else reversed(names):
            samples[name].append(runs[name]())
    return samples


def paired_ratios(numerator: list[float], denominator: list[float]) -> dict[str, float]:
    """The extremes of the ratios of samples taken in the same round: how far load drift moved the ratio."""
    ratios = [a / b for a, b in zip(numerator, denominator, strict=True)]
    return {"paired_ratio_min": min(ratios), "paired_ratio_max": max(ratios)}


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine(device: torch.device) -> dict[str, object]:
    """What a figure depends on besides the code: CPU, threads, accelerator, library versions."""
    affinity = getattr(os, "sched_getaffinity", None)
    info: dict[str, object] = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "usable_cores": len(affinity(0)) if affinity else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "python": platform.python_version(),
        "versions": {name: metadata.version(name) for name in VERSIONED if importlib.util.find_spec(name)},
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info
