"""The bench suite: every section measured in one process, a table printed, JSON and Markdown rows written.

    python -m vit_locality.bench [--quick] [--out bench_results.json] [--markdown BENCH_ROWS.md]
                                 [--device cpu|cuda] [--sections model,framework,data,stats,flops] [--threads N]

Full settings are sized so that the whole suite ends within 5 minutes on a 2-core CPU; `--quick` runs every
section on the tiny model with a handful of images, for tests. Targets are the CPU targets of issue 6.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import data_bench, flops, framework_bench, model_bench, stats_bench
from .common import PAPER, TINY, ModelConfig, precision_name
from .report import build_rows, format_table, markdown, targets
from .timing import load_average, machine

SECTIONS = ("model", "framework", "data", "stats", "flops")


@dataclass(frozen=True)
class FrameworkCase:
    label: str
    config: ModelConfig
    batch: int
    first: int  # warm-up steps before the timed window
    steps: int
    repeats: int
    warmup: int  # untimed rounds
    bare: bool  # also time a Trainer without bar and logger, to attribute the overhead
    target: str  # "ms" (added ms per step) or "pct" (time ratio)


@dataclass(frozen=True)
class Settings:
    model: ModelConfig = PAPER
    model_batch: int = 128
    model_repeats: int = 7
    framework: tuple[FrameworkCase, ...] = field(
        default_factory=lambda: (
            FrameworkCase("tiny", TINY, 32, first=3, steps=30, repeats=5, warmup=1, bare=True, target="ms"),
            FrameworkCase("paper", PAPER, 128, first=2, steps=5, repeats=3, warmup=0, bare=False, target="pct"),
        )
    )
    data_samples: int = 2048
    data_loader_images: int = 2560
    data_batch: int = 128
    data_repeats: int = 3
    stats_probe: int = 512
    stats_repeats: int = 5
    train_images: int = 50_000


FULL = Settings()
QUICK = Settings(
    model=TINY,
    model_batch=16,
    model_repeats=2,
    framework=(
        FrameworkCase("tiny", TINY, 16, first=1, steps=3, repeats=2, warmup=0, bare=True, target="ms"),
        FrameworkCase("paper", TINY, 16, first=1, steps=3, repeats=2, warmup=0, bare=False, target="pct"),
    ),
    data_samples=64,
    data_loader_images=128,
    data_batch=32,
    data_repeats=2,
    stats_probe=32,
    stats_repeats=2,
)


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def run_section(name: str, settings: Settings, device: torch.device, done: dict[str, Any]) -> dict[str, Any]:
    s = settings
    if name == "model":
        return model_bench.run(s.model, s.model_batch, s.model_repeats, warmup=1, device=device)
    if name == "framework":
        cases = {}
        for case in s.framework:
            say(f"framework: {case.label} ({case.config.name}, batch {case.batch})")
            result = framework_bench.measure(
                case.config, case.batch, case.first, case.steps, case.repeats, case.warmup, device, case.bare
            )
            cases[case.label] = {**result, "target": case.target}
        ratios = {f"{label}_{k}": v for label, c in cases.items() for k, v in c["ratios"].items()}
        return {"cases": cases, "ratios": ratios}
    if name == "data":
        return data_bench.run(
            s.model, s.data_samples, s.data_loader_images, s.data_batch, s.model_batch, s.data_repeats, 1, device
        )
    if name == "stats":
        return stats_bench.run(s.model, s.model_batch, s.stats_probe, s.train_images, s.stats_repeats, 1, device)
    if name == "flops":
        img_s = done["model"]["ours_img_s"] if "model" in done else None
        return flops.run(s.model.build(), img_s)
    raise ValueError(f"unknown section {name!r}: choose from {', '.join(SECTIONS)}")


def run_suite(settings: Settings, sections: list[str], device: torch.device, command: str) -> dict[str, Any]:
    """Run the chosen sections in order; return the JSON-ready record (meta, sections, rows, targets)."""
    started = time.perf_counter()
    load_start = load_average()
    done: dict[str, Any] = {}
    for name in sections:
        say(f"{name} ... (load average {load_average()})")
        section_start = time.perf_counter()
        done[name] = run_section(name, settings, device, done)
        done[name]["elapsed_s"] = time.perf_counter() - section_start
        done[name]["load_average_after"] = load_average()
    meta = {
        "command": command,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(device),
        "precision": precision_name(device),
        "batch": {"model": settings.model_batch, "data": settings.data_batch},
        "quick": settings is QUICK,
        "load_start": load_start,
        "load_end": load_average(),
        "elapsed_s": time.perf_counter() - started,
    }
    rows = build_rows(done)
    return {"meta": meta, "sections": done, "targets": targets(rows), "rows": [vars(r) for r in rows]}


def parse_sections(text: str) -> list[str]:
    chosen = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown sections {unknown}: choose from {', '.join(SECTIONS)}")
    return [s for s in SECTIONS if s in chosen]  # the flops section reads the model section's rate


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
    raw = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "-m", "vit_locality.bench", *raw])
    record = run_suite(QUICK if args.quick else FULL, args.sections, torch.device(args.device), command)
    rows = build_rows(record["sections"])
    print(format_table(rows, record["meta"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    say(f"JSON -> {args.out}")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(rows, record["meta"]))
        say(f"Markdown rows -> {args.markdown}")
    return record
