"""Side-by-side timing: A and B interleaved after a warm-up, medians of the repeats, and the machine's state.

Interleaving (A B, then B A, ...) makes drift in the machine's load (another process, thermal throttling) hit
every candidate alike, so the ratio of medians is steadier than either absolute figure.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata

import torch

VERSIONED = ("torch", "torchvision", "lightning", "timm", "torchmetrics", "numpy")


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so a clock read after it measures the work and not the launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> Callable[[], float]:
    """Wrap `fn` into a run that returns its own wall time in seconds (synchronised on CUDA)."""

    def run() -> float:
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        return time.perf_counter() - start

    return run


@dataclass
class Timing:
    """The timed samples of one candidate, in seconds, in the order they were taken."""

    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.samples), max(self.samples)


def interleaved(runs: dict[str, Callable[[], float]], repeats: int, warmup: int = 1) -> dict[str, Timing]:
    """Call every run `warmup` times untimed, then `repeats` rounds, alternating the order each round.

    Each run returns the seconds it measured itself (see `timed`), so a run may exclude its own set-up.
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats}: at least one timed round is needed")
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            runs[name]()
    timings = {name: Timing() for name in names}
    for round_index in range(repeats):
        for name in names if round_index % 2 == 0 else reversed(names):
            timings[name].samples.append(runs[name]())
    return timings


def paired_ratios(numerator: Timing, denominator: Timing) -> list[float]:
    """Ratio of the samples taken in the same round: their spread says how far load drift moved the ratio."""
    return [a / b for a, b in zip(numerator.samples, denominator.samples, strict=True)]


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run a block with `count` intra-op threads (None: unchanged), restoring the previous count after."""
    previous = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine(device: torch.device) -> dict[str, object]:
    """What a figure depends on besides the code: CPU, threads, accelerator, library versions, load."""
    try:
        usable_cores = len(os.sched_getaffinity(0))
    except AttributeError:
        usable_cores = os.cpu_count()
    info: dict[str, object] = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable_cores,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in VERSIONED},
        "load_average": load_average(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info
