"""The GPU bench's pack section: aggregate images/s of several Modern cells sharing the GPU, each in its own
process as joblib runs them (this module's `pack_worker` is what each process runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from vit_locality.bench.common import (
    build_vit,
    sync,
    timed,
)
from vit_locality.bench.gpu_sections import CellStep, compiled, config, steps
from vit_locality.bench.gpu_settings import Settings, row
from vit_locality.bench.suite import Row


def pack_worker(directory: Path, index: int, settings: Settings, device: torch.device) -> None:
    """Packed cell `index`: warm up (compile) once, say so, then in every round `r` whose file asks for more than
    `index` cells train for `pack_seconds` and report; idle (holding its memory, as a waiting cell would) otherwise."""
    if device.type == "cpu":
        torch.set_num_threads(1)
    cfg = config(settings, device, "modern", True)
    step = CellStep(cfg, device, compiled(build_vit(cfg), settings))
    timed(steps(step, settings.warmup), device)()
    (directory / f"ready.{index}").touch()
    for round_index in range(len(settings.pack)):
        order = directory / f"round.{round_index}"
        while not order.exists():
            time.sleep(0.01)
        if index >= int(order.read_text()):
            continue
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < settings.pack_seconds:
            steps(step, 5)()
            sync(device)
            done += 5
        elapsed = time.perf_counter() - start
        result = {"images": done * step.batch, "seconds": elapsed}
        (directory / f"result.{round_index}.{index}").write_text(json.dumps(result))


def wait_for_files(directory: Path, pattern: str, count: int, procs: list[subprocess.Popen], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(list(directory.glob(pattern))) < count:
        failed = [p.returncode for p in procs if p.poll() is not None]
        if failed or time.monotonic() > deadline:
            raise RuntimeError(f"packed cells: waiting for {count} x {pattern}, workers ended {failed} or timed out")
        time.sleep(0.02)


def pack_section(settings: Settings, device: torch.device, state: dict[str, Any], out_dir: Path) -> list[Row]:
    """max(pack) cell processes, started and compiled once, then rounds of 1, 2, 4, ... of them training together."""
    directory = out_dir / "pack"
    directory.mkdir(parents=True)
    command = [sys.executable, "-m", "vit_locality.bench", "gpu", "--device", device.type, "--pack-worker"]
    command += [str(directory), "--compile-mode", settings.compile_mode, *(["--smoke"] if settings.smoke else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1"} if device.type == "cpu" else dict(os.environ)
    procs = [
        subprocess.Popen([*command, "--pack-index", str(i)], env=env, stdout=subprocess.DEVNULL)
        for i in range(max(settings.pack))
    ]
    rates, rows = {}, []
    mps = "CUDA MPS on" if os.environ.get("CUDA_MPS_PIPE_DIRECTORY") else "no MPS (time-sliced)"
    try:
        wait_for_files(directory, "ready.*", len(procs), procs, timeout=300)
        for round_index, cells in enumerate(settings.pack):
            if time.perf_counter() - state["started"] > state["budget_s"] * 0.75:
                cells_run = 0
                rows.append(row("pack", f"{cells} cells packed", "skipped: time budget"))
            else:
                cells_run = cells
            (directory / f"round.{round_index}").write_text(str(cells_run))
            if not cells_run:
                continue
            wait_for_files(directory, f"result.{round_index}.*", cells, procs, timeout=settings.pack_seconds + 120)
            results = [json.loads(p.read_text()) for p in directory.glob(f"result.{round_index}.*")]
            rates[cells] = sum(r["images"] / r["seconds"] for r in results)
            rows.append(row("pack", f"{cells} Modern cells packed ({mps}): aggregate img/s", f"{rates[cells]:.0f}"))
            rows.append(row("pack", f"{cells} cells: aggregate / one cell", f"{rates[cells] / rates[min(rates)]:.2f}x"))
        for proc in procs:
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    state["pack_img_s"] = rates
    return rows
