"""`python -m vit_locality.bench gpu`: the GPU figures of BENCHMARKS.md in one call of at most about 8 minutes.

Sections, in the order they run (each a row group of the table):
- syncs, autoaugment, memory: host syncs per step of every cell, sync-free against grouped AutoAugment, and the
  memory model's projection of cells per GPU (gpu_checks.py).
- model: train images/s of the ViT alone (fixed batch, the Trainer's precision: bf16 autocast on CUDA), eager and
  compiled; eval images/s; achieved TFLOP/s against the analytic FLOPs and a measured bf16 matmul peak.
- e2e: a cell's whole training step (data, augmentation, CutMix, loss, backward, AdamW) in images/s, for Baseline
  and Modern, with per-sample workers and with on-device data; the host syncs per step of the on-device path
  (`torch.cuda.set_sync_debug_mode`), which should be none.
- probe: one attention-statistics pass (explicit fp32) in training steps.
- pack: aggregate images/s of 1, 2, 4 and 8 Modern cells sharing the GPU (separate processes, as joblib runs them).
- overhead: the on-device path against the model alone, side by side (the CPU target: at most +5% at the paper
  config).
- projection: from the figures above, one 200-epoch CIFAR-100 cell and the 8-cell x 3-seed grid.
- cell, compile_modes: a real 200-epoch Modern cell through train.py, timed against the 3-minute target, and the
  compiled step under max-autotune-no-cudagraphs and CUDA graphs (gpu_runs.py); each skipped if the budget is short.

`--device cpu --smoke` runs every section on the tiny model with a few steps in well under a minute, so the first GPU
call is not the script's first run; `--benchmarks BENCHMARKS.md` writes the table between its GPU markers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from vit_locality.bench.common import (
    section_parser,
)
from vit_locality.bench.gpu_checks import autoaugment_section, memory_section, syncs_section
from vit_locality.bench.gpu_pack import pack_section, pack_worker
from vit_locality.bench.gpu_runs import cell_section, compile_modes_section
from vit_locality.bench.gpu_sections import (
    e2e_section,
    model_section,
    overhead_section,
    probe_section,
    projection_section,
)
from vit_locality.bench.gpu_settings import FULL, MEMORY_CELLS_PER_GPU, SMOKE, row
from vit_locality.bench.suite import load_average, machine, render
from vit_locality.run.builders import resolve_precision

__all__ = ["FULL", "MEMORY_CELLS_PER_GPU", "SECTIONS", "SMOKE", "main", "projection_section", "write_benchmarks"]
BEGIN, END = "<!-- bench-gpu:begin -->", "<!-- bench-gpu:end -->"


SECTIONS = {
    "syncs": syncs_section,
    "autoaugment": autoaugment_section,
    "memory": memory_section,
    "model": model_section,
    "e2e": e2e_section,
    "probe": probe_section,
    "pack": pack_section,
    "overhead": overhead_section,
    "projection": projection_section,
    "cell": cell_section,  # after projection (its projected time decides whether the budget holds it)
    "compile_modes": compile_modes_section,  # last: max-autotune may take minutes, and it resets dynamo
}
parse_sections = section_parser(SECTIONS)


def write_benchmarks(path: Path, block: str) -> None:
    """Replace what stands between the GPU markers of BENCHMARKS.md with `block`."""
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} markers to write the GPU rows between")
    head, rest = text.split(BEGIN, 1)
    path.write_text(f"{head}{BEGIN}\n{block.rstrip()}\n{END}{rest.split(END, 1)[1]}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m vit_locality.bench gpu", description=__doc__)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny model, a few steps: the CPU test run")
    parser.add_argument("--sections", type=parse_sections, default=list(SECTIONS), help=",".join(SECTIONS))
    parser.add_argument("--out", type=Path, default=Path("reports/bench_gpu.json"), help="JSON record")
    parser.add_argument("--markdown", type=Path, default=None, help="write the rows as Markdown here")
    parser.add_argument("--benchmarks", type=Path, default=None, help="write the rows into this BENCHMARKS.md")
    parser.add_argument("--budget-s", type=float, default=420.0, help="skip packing levels past 3/4 of this")
    parser.add_argument("--compile-mode", default="default", help="torch.compile mode, e.g. reduce-overhead")
    parser.add_argument("--pack-worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--pack-index", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible")
    device = torch.device(args.device)
    settings = replace(SMOKE if args.smoke else FULL, compile_mode=args.compile_mode)
    if args.pack_worker is not None:
        pack_worker(args.pack_worker, args.pack_index, settings, device)
        return {}
    state: dict[str, Any] = {"started": time.perf_counter(), "budget_s": args.budget_s}
    load_start, rows = load_average(), []
    command = ["python", "-m", "vit_locality.bench", "gpu", *(sys.argv[2:] if argv is None else argv)]

    def record() -> dict[str, Any]:
        meta = {
            "command": shlex.join(command),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(device),
            "precision": resolve_precision("auto", "gpu" if device.type == "cuda" else "cpu"),
            "smoke": args.smoke,
            "settings": vars(settings),
            "load_start": load_start,
            "load_end": load_average(),
            "elapsed_s": time.perf_counter() - state["started"],
        }
        return {"meta": meta, "rows": rows}

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as scratch:  # the packed cells' files
        for name in args.sections:
            begun = time.perf_counter()
            section = SECTIONS[name]
            run = partial(section, out_dir=Path(scratch)) if name == "pack" else section
            run = partial(section, out_dir=args.out.parent) if name == "cell" else run  # the cell's run dir stays
            try:  # one device call must bring back every row it could measure
                rows.extend(run(settings, device, state))
            except Exception as error:  # noqa: BLE001 - reported as the section's row, the next section runs
                rows.append(row(name, "section failed", f"{type(error).__name__}: {error}"[:300].replace("|", "/")))
            print(f"[bench gpu] {name}: {time.perf_counter() - begun:.1f} s", file=sys.stderr, flush=True)
            args.out.write_text(json.dumps(record(), indent=2, default=str) + "\n")  # what a killed run leaves
    final = record()
    print(render(rows, final["meta"]))
    markdown = render(rows, final["meta"], markdown=True).replace("## Bench suite", "### GPU bench", 1)
    args.out.write_text(json.dumps(final, indent=2, default=str) + "\n")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown)
    if args.benchmarks:
        write_benchmarks(args.benchmarks, markdown)
    return final
