"""The bench suite: every section measured in one process, a table printed, JSON and Markdown rows written.

    python -m vit_locality.bench [--quick] [--out bench_results.json] [--markdown bench_rows.md]
                                 [--device cpu|cuda] [--sections model,framework,data,stats,flops] [--threads N]

The full settings end within about 5 minutes on a 2-core CPU; `--quick` runs every section on the tiny model
with a handful of images, for tests. report.py states the targets.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from . import flops, framework
from .common import Result, bench_config, precision
from .framework import FrameworkCase
from .report import Row, format_table, make_row, markdown
from .sections import data_headroom, model_vs_timm, probe_cost
from .timing import load_average, machine

Settings = dict[str, dict[str, Any]]  # section: its keyword arguments

TINY = FrameworkCase("tiny", "vit_tiny", 32, first=3, steps=30, repeats=5, warmup=1, target="tiny_added_ms")
PAPER = FrameworkCase("paper", "vit_paper", 128, first=2, steps=5, repeats=3, warmup=0, target="paper_overhead_pct")
QUICK_CASES = tuple(
    replace(c, model="vit_tiny", batch=16, first=1, steps=3, repeats=2, warmup=0) for c in (TINY, PAPER)
)
# section: {argument: (full, quick)}
SETTINGS = {
    "model": {"model": ("vit_paper", "vit_tiny"), "batch": (128, 16), "repeats": (7, 2)},
    "framework": {"cases": ((TINY, PAPER), QUICK_CASES)},
    "data": {
        "model": ("vit_paper", "vit_tiny"),
        "samples": (2048, 64),
        "loader_images": (2560, 128),
        "batch": (128, 32),
        "model_batch": (128, 16),
        "repeats": (3, 2),
    },
    "stats": {
        "model": ("vit_paper", "vit_tiny"),
        "batch": (128, 16),
        "probe_size": (512, 32),
        "repeats": (5, 2),
    },
    "flops": {"model": ("vit_paper", "vit_tiny")},
}


def settings_for(quick: bool) -> Settings:
    return {section: {name: values[quick] for name, values in args.items()} for section, args in SETTINGS.items()}


Section = Callable[[dict[str, Any], torch.device, dict[str, Any]], Result]
SECTIONS: dict[str, Section] = {  # in the order they run: flops reads the rate the model section measured
    "model": lambda kwargs, device, done: model_vs_timm(device=device, **kwargs),
    "framework": lambda kwargs, device, done: framework.run(device=device, **kwargs),
    "data": lambda kwargs, device, done: data_headroom(device=device, **kwargs),
    "stats": lambda kwargs, device, done: probe_cost(device=device, **kwargs),
    "flops": lambda kwargs, device, done: flops.run(
        train_img_s=done["model"]["img_s"]["ours"] if "model" in done else None, **kwargs
    ),
}


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def run_suite(settings: Settings, sections: list[str], device: torch.device) -> tuple[dict[str, Any], list[Row]]:
    """Run the chosen sections in order; return the figures by section and the table's rows."""
    done: dict[str, Any] = {}
    rows: list[Row] = []
    for name in sections:
        say(f"{name} ... (load average {load_average()})")
        start = time.perf_counter()
        done[name], section_rows = SECTIONS[name](settings[name], device, done)
        done[name] |= {"elapsed_s": time.perf_counter() - start, "load_average_after": load_average()}
        rows += [make_row(name, *row) for row in section_rows]
    return done, rows


def parse_sections(text: str) -> list[str]:
    chosen = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown sections {unknown}: choose from {', '.join(SECTIONS)}")
    return [s for s in SECTIONS if s in chosen]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m vit_locality.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
    device, settings = torch.device(args.device), settings_for(args.quick)
    started, load_start = time.perf_counter(), load_average()
    sections, rows = run_suite(settings, args.sections, device)
    meta = {
        "command": shlex.join(["python", "-m", "vit_locality.bench", *(sys.argv[1:] if argv is None else argv)]),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(device),
        "precision": precision(bench_config(settings["model"]["model"], device)),
        "quick": args.quick,
        "settings": {name: settings[name] for name in args.sections},
        "load_start": load_start,
        "load_end": load_average(),
        "elapsed_s": time.perf_counter() - started,
    }
    judged = [vars(r) for r in rows if r.met is not None]
    record = {"meta": meta, "sections": sections, "targets": judged, "rows": [vars(r) for r in rows]}
    print(format_table(rows, meta))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2, default=vars) + "\n")
    say(f"JSON -> {args.out}")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(rows, meta))
        say(f"Markdown rows -> {args.markdown}")
    return record
