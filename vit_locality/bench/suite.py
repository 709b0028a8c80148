"""The bench suite: every section measured in one process, a table printed, JSON and Markdown rows written.

The full settings end within about 5 minutes on a 2-core CPU; `--quick` runs every section on the tiny model with
a handful of images, for tests. TARGETS are set for the CPU: on a GPU they are figures to read, not verdicts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import shlex
import sys
import time
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from vit_locality.bench import framework
from vit_locality.bench.common import bench_config, section_parser
from vit_locality.bench.framework import FrameworkCase
from vit_locality.bench.sections import data_headroom, flops_check, model_vs_timm, probe_cost
from vit_locality.run.builders import resolve_precision

TINY = FrameworkCase("tiny", "vit_tiny", 32, first=3, steps=30, repeats=5, warmup=1, target="tiny_added_ms")
PAPER = FrameworkCase("paper", "vit_paper", 128, first=2, steps=5, repeats=3, warmup=0, target="paper_overhead_pct")
QUICK = tuple(replace(c, model="vit_tiny", batch=16, first=1, steps=3, repeats=2, warmup=0) for c in (TINY, PAPER))
MODELS = ("vit_paper", "vit_tiny")
SETTINGS = {  # section: {argument: (full, quick)}
    "model": {"model": MODELS, "batch": (128, 16), "repeats": (7, 2)},
    "framework": {"cases": ((TINY, PAPER), QUICK)},
    "data": {
        "model": MODELS,
        "samples": (2048, 64),
        "loader_images": (2560, 128),
        "batch": (128, 32),
        "model_batch": (128, 16),
        "repeats": (3, 2),
    },
    "stats": {"model": MODELS, "batch": (128, 16), "probe_size": (512, 32), "repeats": (5, 2)},
    "flops": {"model": MODELS},
}
# in the order they run: flops reads the rate the model section measured
SECTIONS = dict(model=model_vs_timm, framework=framework.run, data=data_headroom, stats=probe_cost, flops=flops_check)
parse_sections = section_parser(SECTIONS)
TARGETS = {  # name: (comparison, threshold, unit)
    "ours_over_timm": (">=", 1.0, ""),
    "tiny_added_ms": ("<=", 1.0, " ms"),
    "paper_overhead_pct": ("<=", 5.0, "%"),
    "headroom": (">=", 20.0, "x"),
    "probe_in_steps": ("<=", 1.5, " steps"),
    "probe_pct_of_epoch": ("<=", 1.0, "%"),
    "flops_apart_pct": ("<=", 3.0, "% apart"),
}
VERSIONED = ("torch", "torchvision", "lightning", "timm", "torchmetrics", "numpy")  # what a figure depends on
COLUMNS = ("section", "quantity", "value", "target", "status")
Row = dict[str, str]  # keyed by COLUMNS


def make_row(section: str, quantity: str, value: str, target: str | None = None, measured: float = 0.0) -> Row:
    """A table row; with `target` (a key of TARGETS), its text and whether `measured` meets it."""
    text = status = ""
    if target is not None:
        op, threshold, unit = TARGETS[target]
        met = measured >= threshold if op == ">=" else measured <= threshold
        text, status = f"{op} {threshold:g}{unit}", "met" if met else "NOT met"
    return dict(zip(COLUMNS, (section, quantity, value, text, status), strict=True))


def load_average() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def render(rows: list[Row], meta: dict[str, Any], markdown: bool = False) -> str:
    """The table under a header that says where and how it was measured, then the targets met: columns padded
    for a terminal, or rows for BENCHMARKS.md."""
    m = meta["machine"]
    gpu = f" ({m['gpu']})" if m["gpu"] else ""
    header = [
        f"Command: `{meta['command']}`",
        f"Date: {meta['date']}; machine: {m['processor']}, {m['usable_cores']} usable cores, "
        f"{m['torch_threads']} torch threads, device {m['device']}{gpu}",
        f"Precision: {meta['precision']}; load average (1, 5, 15 min) at start {meta['load_start']}, "
        f"at end {meta['load_end']}; elapsed {meta['elapsed_s']:.0f} s",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
    ] + (["The targets are set for the CPU: on a GPU read them as figures, not verdicts."] if gpu else [])
    cells = [COLUMNS, *(tuple(r.values()) for r in rows)]
    if markdown:
        header = [f"## Bench suite ({m['device']})", "", *(f"{line}  " for line in header)]
        table = ["| " + " | ".join(c) + " |" for c in cells]
        table.insert(1, "|---" * len(COLUMNS) + "|")
    else:
        widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
        table = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    judged = [r for r in rows if r["status"]]
    missed = ["{section}: {quantity} ({value}, target {target})".format(**r) for r in judged if r["status"] != "met"]
    summary = [f"Targets met: {len(judged) - len(missed)} of {len(judged)}."]
    summary += ["Not met: " + "; ".join(missed) + "."] if missed else []
    return "\n".join([*header, "", *table, "", *summary]) + ("\n" if markdown else "")


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def machine(device: torch.device) -> dict[str, Any]:
    """What the figures were measured on: the device, the usable cores and threads, the library versions."""
    return {
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "python": platform.python_version(),
        "versions": {name: metadata.version(name) for name in VERSIONED if importlib.util.find_spec(name)}
        | ({"cuda": torch.version.cuda} if device.type == "cuda" else {}),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m vit_locality.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny settings, seconds (for tests)")
    parser.add_argument("--out", type=Path, default=Path("bench_results.json"), help="JSON record")
    parser.add_argument("--markdown", type=Path, default=None, help="write BENCHMARKS.md-ready rows here")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sections", type=parse_sections, default=list(SECTIONS), help=",".join(SECTIONS))
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible")
    if "model" in args.sections and importlib.util.find_spec("timm") is None:
        parser.error("the model section compares against timm: `pip install timm`, or leave `model` out of --sections")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    settings = {name: {arg: values[args.quick] for arg, values in SETTINGS[name].items()} for name in args.sections}
    started, load_start = time.perf_counter(), load_average()
    sections: dict[str, Any] = {}
    rows: list[Row] = []
    for name in args.sections:
        say(f"{name} ... (load average {load_average()})")
        if name == "flops":  # counts on the CPU, and turns the model section's images/s into FLOP/s
            kwargs = {"train_img_s": sections["model"]["img_s"]["ours"] if "model" in sections else None}
        else:
            kwargs = {"device": device}
        sections[name], section_rows = SECTIONS[name](**settings[name], **kwargs)
        rows += [make_row(name, *row) for row in section_rows]
    cfg = bench_config(MODELS[args.quick], device)
    meta = {
        "command": shlex.join(["python", "-m", "vit_locality.bench", *(sys.argv[1:] if argv is None else argv)]),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(device),
        "precision": resolve_precision(cfg.trainer.precision, cfg.trainer.accelerator),
        "quick": args.quick,
        "settings": settings,
        "load_start": load_start,
        "load_end": load_average(),
        "elapsed_s": time.perf_counter() - started,
    }
    record = {"meta": meta, "sections": sections, "rows": rows}
    print(render(rows, meta))
    outputs = {args.out: json.dumps(record, indent=2, default=vars) + "\n"}
    if args.markdown:
        outputs[args.markdown] = render(rows, meta, markdown=True)
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        say(f"wrote {path}")
    return record
