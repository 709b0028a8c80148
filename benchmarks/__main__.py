"""`python -m benchmarks [--quick] [--sections ...]`: the suite (suite.py); `python -m benchmarks gpu ...`: the GPU
bench (gpu.py). Run from the checkout's top folder; the figures go to files and the terminal, not the exit status."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import Report, finish, load_average, meta, say


def sections_arg(known: list[str]) -> Any:
    """`--sections a,b`: the named sections in the bench's own order; an unknown name is an argparse error."""

    def parse(text: str) -> list[str]:
        chosen = [s.strip() for s in text.split(",") if s.strip()]
        unknown = [s for s in chosen if s not in known]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown sections {unknown}: choose from {', '.join(known)}")
        return [s for s in known if s in chosen]

    return parse


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gpu"]:
        from benchmarks.gpu import main as gpu_main

        return gpu_main(argv[1:])
    from benchmarks.suite import SECTIONS, SETTINGS

    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny settings, seconds (for tests)")
    parser.add_argument("--out", type=Path, default=Path("bench_results.json"), help="JSON record")
    parser.add_argument("--markdown", type=Path, default=None, help="write BENCHMARKS.md-ready rows here")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    sections = sections_arg(list(SECTIONS))
    parser.add_argument("--sections", type=sections, default=list(SECTIONS), help=",".join(SECTIONS))
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible")
    if "model" in args.sections and importlib.util.find_spec("timm") is None:
        parser.error("the model section compares against timm: `pip install timm`, or leave `model` out of --sections")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    started, load_start, report = time.perf_counter(), load_average(), Report()
    for name in args.sections:
        say(f"{name} ... (load average {load_average()})")
        report.section = name
        SECTIONS[name](report, device, **{arg: values[args.quick] for arg, values in SETTINGS[name].items()})
    info = meta(argv, device, load_start, time.perf_counter() - started, quick=args.quick)
    finish(report, info, f"## Bench suite ({device})", args.out, args.markdown)
    return {"meta": info, "figures": report.figures, "rows": report.rows}


if __name__ == "__main__":
    main()
