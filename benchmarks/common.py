"""What the benchmarks share: the config composed as `train.py` composes it, the ViT it names, a training step in the
Trainer's precision, side-by-side timing on `torch.utils.benchmark`, and the report (Compare's tables of times, then
one table of ratios and figures with their targets, as text, Markdown and JSON).

The sides of a comparison run in alternating rounds (A B, then B A, ...) after a warm-up, so drift in the machine's
load hits all alike: the ratio of medians is steadier than either time, and the spread of the per-round ratios says
how far the drift moved it.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import math
import os
import platform
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from torch import nn
from torch.utils.benchmark import Compare, Measurement, TaskSpec, Timer

from vit_locality.config.settings import RunSettings, uses_cuda
from vit_locality.model.classifier import adamw_with_decay_groups
from vit_locality.model.vit import VisionTransformer
from vit_locality.paths import CONF_DIR
from vit_locality.precheck.gate import settings_from
from vit_locality.precheck.resolvers import register_resolvers
from vit_locality.run.builders import resolve_precision

COLUMNS = ("section", "quantity", "value", "target", "status")
TARGETS = {  # name: (comparison, threshold, unit); the GPU bench's: the last three (*_minutes), the rest the CPU's
    "ours_over_timm": (">=", 1.0, ""),
    "tiny_added_ms": ("<=", 1.0, " ms"),
    "host_data_ms": ("<=", 1.0, " ms"),
    "host_added_ms": ("<=", 1.0, " ms"),
    "host_compiled_over_ms": ("<=", 1.5, " ms"),  # a compiled Modern cell over the plain -AA loop
    "paper_overhead_pct": ("<=", 5.0, "%"),
    "headroom": (">=", 20.0, "x"),
    "probe_in_steps": ("<=", 1.5, " steps"),
    "probe_pct_of_epoch": ("<=", 1.0, "%"),
    "flops_apart_pct": ("<=", 3.0, "% apart"),
    "on_device_overhead_pct": ("<=", 5.0, "%"),
    "pack_per_cell": ("<=", 1 / 6, ""),  # ops and host time per cell-step, a pack of 8 against one cell alone
    "pack_demo_ratio": ("<=", 1.0, ""),  # the demo's 8 cells packed against one after another, wall time
    "cell_minutes": ("<=", 3.0, " min"),
    "grid_minutes": ("<=", 45.0, " min"),
    "fused_grid_minutes": ("<=", 20.0, " min"),  # the grid as one fused 24-cell pack on one H100 (docs/gpu.md)
}
VERSIONED = ("torch", "torchvision", "lightning", "timm", "torchmetrics", "numpy")  # what a figure depends on


def bench_config(model: str, device: torch.device, overrides: Sequence[str] = ()) -> RunSettings:
    """The settings of `python train.py data=synthetic data.num_classes=100 model=<model> <overrides>` on `device`,
    composed without running Hydra's app: synthetic data (nothing to download) and the paper's 100-class head."""
    trainer = ["trainer=cpu"] if device.type == "cpu" else ["trainer=default", "trainer.accelerator=gpu"]
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        base = ["data=synthetic", "data.num_classes=100", f"model={model}", *trainer]
        return settings_from(compose(config_name="train", overrides=[*base, *overrides]), machine=False)


def build_vit(cfg: RunSettings) -> VisionTransformer:
    m = cfg.model
    size, classes = cfg.data.image_size, cfg.data.num_classes
    return VisionTransformer(classes, size, depth=m.depth, dim=m.dim, heads=m.heads, mlp_ratio=m.mlp_ratio)


def autocast(cfg: RunSettings) -> torch.autocast:
    """The precision `build_trainer` gives this config's Trainer, for a hand-written step (bf16-mixed or fp32)."""
    t = cfg.trainer
    bf16 = resolve_precision(t.precision, t.accelerator) == "bf16-mixed"
    return torch.autocast("cuda" if uses_cuda(t.accelerator) else "cpu", dtype=torch.bfloat16, enabled=bf16)


def optimizer_step(model: nn.Module, optimizer: Any, amp: torch.autocast, images: Any, labels: Any) -> None:
    optimizer.zero_grad(set_to_none=True)  # before the forward: last step's gradients freed, as Lightning does
    with amp:
        loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()


def train_step(model: nn.Module, cfg: RunSettings, batch: int, device: torch.device) -> Callable[[], None]:
    """Forward + cross-entropy + backward + the project's AdamW on a fixed random batch (data cost excluded)."""
    model.to(device).train()
    optimizer = adamw_with_decay_groups(model, cfg.optim.lr, cfg.optim.weight_decay, tuple(cfg.optim.betas))
    generator = torch.Generator().manual_seed(0)
    size = cfg.data.image_size
    images = torch.randn(batch, 3, size, size, generator=generator).to(device)
    labels = torch.randint(cfg.data.num_classes, (batch,), generator=generator).to(device)
    return partial(optimizer_step, model, optimizer, autocast(cfg), images, labels)


def alternating(names: Sequence[str], rounds: int) -> Iterator[str]:
    """`rounds` rounds over `names`, every other one reversed: A B, B A, A B, ..."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: at least one timed round is needed")
    for index in range(rounds):
        yield from names if index % 2 == 0 else reversed(names)


def side_by_side(
    label: str,
    sub_label: str,
    sides: dict[str, Callable[[], object]],
    rounds: int,
    threads: dict[str, int] | None = None,
) -> dict[str, Measurement]:
    """Each side timed by a `Timer` (on `threads[side]` intra-op threads, default as set now) once per round in
    alternating order (`Timer.timeit(1)`: two untimed calls, then the timed one); one Measurement per side, its times
    in the order taken."""
    timers = {
        name: Timer("fn()", globals={"fn": fn}, label=label, sub_label=sub_label, description=name,
                    num_threads=(threads or {}).get(name, torch.get_num_threads()))
        for name, fn in sides.items()
    }  # fmt: skip
    taken: dict[str, list[Measurement]] = {name: [] for name in sides}
    for name in alternating(list(sides), rounds):
        taken[name].append(timers[name].timeit(1))
    return {name: Measurement.merge(runs)[0] for name, runs in taken.items()}


def self_timed(
    label: str, sub_label: str, sides: dict[str, Callable[[], float]], rounds: int, warmup: int = 0
) -> dict[str, Measurement]:
    """As `side_by_side` for runs that time themselves (each returns the seconds of its own timed window)."""
    for _ in range(warmup):
        for run in sides.values():
            run()
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for name in alternating(list(sides), rounds):
        seconds[name].append(sides[name]())
    threads = torch.get_num_threads()
    return {
        name: Measurement(1, times, TaskSpec(name, "", label=label, sub_label=sub_label, description=name,
                                             num_threads=threads))
        for name, times in seconds.items()
    }  # fmt: skip


def per_round(numerator: Measurement, denominator: Measurement) -> tuple[float, float]:
    """The extremes of the ratios of times taken in the same round."""
    ratios = [a / b for a, b in zip(numerator.times, denominator.times, strict=True)]
    return min(ratios), max(ratios)


def ratio_text(numerator: Measurement, denominator: Measurement) -> str:
    """median / median, with the per-round spread."""
    return "{:.3f} (per-round {:.3f}..{:.3f})".format(
        numerator.median / denominator.median, *per_round(numerator, denominator)
    )


@dataclass
class Report:
    """What a run measured: Measurements for Compare, table rows, and named figures for the JSON record."""

    section: str = ""
    measurements: list[Measurement] = field(default_factory=list)
    rows: list[dict[str, str]] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)

    def row(self, quantity: str, value: str, target: str | None = None, measured: float = math.nan) -> None:
        """A row; with `target` (a key of TARGETS) its text, and whether `measured` meets it (blank when NaN)."""
        text = status = ""
        if target is not None:
            op, threshold, unit = TARGETS[target]
            met = measured >= threshold if op == ">=" else measured <= threshold
            text, status = f"{op} {threshold:g}{unit}", ("met" if met else "NOT met") if math.isfinite(measured) else ""
        self.rows.append(dict(zip(COLUMNS, (self.section, quantity, value, text, status), strict=True)))

    def figure(self, name: str, value: float) -> float:
        self.figures[f"{self.section}.{name}"] = value
        return value


def load_average() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def machine(device: torch.device) -> dict[str, Any]:
    """What the figures were measured on: the device, the usable cores and threads, the library versions."""
    return {
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "processor": platform.processor() or platform.machine(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "python": platform.python_version(),
        "versions": {name: metadata.version(name) for name in VERSIONED if importlib.util.find_spec(name)}
        | ({"cuda": torch.version.cuda} if device.type == "cuda" else {}),
    }


def meta(argv: Sequence[str], device: torch.device, load_start: Any, elapsed_s: float, **extra: Any) -> dict[str, Any]:
    return {
        "command": shlex.join(["python", "-m", "benchmarks", *argv]),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(device),
        "precision": resolve_precision("auto", "gpu" if device.type == "cuda" else "cpu"),
        "load_start": load_start,
        "load_end": load_average(),
        "elapsed_s": elapsed_s,
        **extra,
    }


def render(report: Report, info: dict[str, Any], title: str) -> str:
    """The rows as Markdown (the form BENCHMARKS.md quotes) under a header that says where and how they were
    measured, then the targets met."""
    m = info["machine"]
    gpu = f" ({m['gpu']})" if m["gpu"] else ""
    header = [
        f"Command: `{info['command']}`",
        f"Date: {info['date']}; machine: {m['processor']}, {m['usable_cores']} usable cores, "
        f"{m['torch_threads']} torch threads, device {m['device']}{gpu}",
        f"Precision: {info['precision']}; load average (1, 5, 15 min) at start {info['load_start']}, "
        f"at end {info['load_end']}; elapsed {info['elapsed_s']:.0f} s",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
    ]
    table = ["| " + " | ".join(c) + " |" for c in [COLUMNS, *(tuple(r.values()) for r in report.rows)]]
    table.insert(1, "|---" * len(COLUMNS) + "|")
    header = [title, "", *(f"{line}  " for line in header)]
    judged = [r for r in report.rows if r["status"]]
    missed = ["{section}: {quantity} ({value}, target {target})".format(**r) for r in judged if r["status"] != "met"]
    summary = [f"Targets met: {len(judged) - len(missed)} of {len(judged)}."]
    summary += ["Not met: " + "; ".join(missed) + "."] if missed else []
    return "\n".join([*header, "", *table, "", *summary]) + "\n"


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def finish(report: Report, info: dict[str, Any], title: str, out: Path, markdown: Path | None) -> str:
    """Print Compare's tables (the sides of each comparison side by side) and the rows; write the JSON record and
    the Markdown rows; the Markdown."""
    text = render(report, info, title)
    print(str(Compare(report.measurements)) if report.measurements else "", text, sep="\n")
    for path, content in ((out, json.dumps({"meta": info, "figures": report.figures, "rows": report.rows},
                                           indent=2, default=str) + "\n"), (markdown, text)):  # fmt: skip
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            say(f"wrote {path}")
    return text
