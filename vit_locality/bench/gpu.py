"""`python -m vit_locality.bench gpu`: the GPU figures of BENCHMARKS.md in one call of at most about 8 minutes.

Sections, in the order they run (each a row group of the table):
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

`--device cpu --smoke` runs every section on the tiny model with a few steps in well under a minute, so the first GPU
call is not the script's first run; `--benchmarks BENCHMARKS.md` writes the table between its GPU markers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from statistics import median
from typing import Any

import torch
from omegaconf import DictConfig

from vit_locality.augment.mixing import cutmix_batch
from vit_locality.bench.common import (
    autocast,
    bench_config,
    build_vit,
    interleaved,
    per_round,
    section_parser,
    sync,
    timed,
    train_step,
)
from vit_locality.bench.sections import model_flops, probe_cost
from vit_locality.bench.suite import COLUMNS, Row, load_average, machine, render
from vit_locality.data.on_device import DeviceTrainLoader
from vit_locality.model.vit import VisionTransformer
from vit_locality.run.builders import build_datamodule, build_module, resolve_precision

BEGIN, END = "<!-- bench-gpu:begin -->", "<!-- bench-gpu:end -->"
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


FULL = Settings("vit_paper", 128, 512, 60, 10, 16_384, 512, (1, 2, 4, 8), 20.0, 1, 7, "inductor", 4, smoke=False)
SMOKE = Settings("vit_tiny", 16, 64, 3, 1, 256, 32, (1, 2), 1.0, 2, 2, "eager", 2, smoke=True)


def row(section: str, quantity: str, value: str, target: str | None = None, measured: float = math.nan) -> Row:
    """A table row in the suite's form; with `target` (a key of TARGETS), whether `measured` meets it."""
    text = status = ""
    if target is not None:
        op, threshold, unit = TARGETS[target]
        met = measured >= threshold if op == ">=" else measured <= threshold
        text, status = f"{op} {threshold:g}{unit}", ("met" if met else "NOT met") if math.isfinite(measured) else ""
    return dict(zip(COLUMNS, (section, quantity, value, text, status), strict=True))


def config(settings: Settings, device: torch.device, protocol: str, on_device: bool) -> DictConfig:
    """A CIFAR-100-shaped cell (100 classes, 32 px) on synthetic data with the protocol preset and data path."""
    return bench_config(
        settings.model,
        device,
        [
            f"protocol={protocol}",
            f"data.on_device={str(on_device).lower()}",
            f"data.train_size={settings.train_size}",
            "data.test_size=64",
            f"data.batch_size={settings.batch}",
            f"data.num_workers={settings.workers}",
            "model.compile=false",  # the bench compiles its one model itself, once
        ],
    )


def endless(loader: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """A training loader's batches epoch after epoch, each epoch told to its sampler as Lightning does."""
    epoch = 0
    while True:
        loader.sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


class CellStep:
    """One training step of a cell as its module runs it, minus the Trainer: the next batch from the cell's data path
    (workers or on the device), `training_loss` (CutMix, normalise, forward, loss), backward, AdamW."""

    def __init__(self, cfg: DictConfig, device: torch.device, vit: VisionTransformer | None = None) -> None:
        datamodule, policy = build_datamodule(cfg)
        datamodule.setup("fit")
        self.module = build_module(cfg, datamodule, policy).to(device)
        if vit is not None:  # one (compiled) model for every cell measured, so it compiles once
            self.module.model = vit.to(device)
        self.device = device
        self.on_device = datamodule.on_device
        if self.on_device:
            images, labels = datamodule.device_arrays(device).train
            loader: Any = DeviceTrainLoader(images, labels, datamodule.batch_size, 0, datamodule.batch_augment)
        else:
            datamodule.pin_memory = device.type == "cuda"
            loader = datamodule.train_dataloader()
        self.loader = loader
        self.batches = endless(loader)
        self.optimizer = torch.optim.AdamW(self.module.parameters(), lr=1e-4)
        self.amp = autocast(cfg)
        self.batch = datamodule.batch_size

    def __call__(self) -> torch.Tensor:
        images, labels = next(self.batches)
        images, labels = images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)
        self.optimizer.zero_grad(set_to_none=True)
        with self.amp:
            loss = self.module.training_loss(images, labels)[0]
        loss.backward()
        self.optimizer.step()
        self.module._note_nonfinite(loss)  # what training_step adds per step besides logging (a check on the device)
        return loss

    def close(self) -> None:
        """Stop the loader's workers before the next figure."""
        self.batches.close()
        del self.loader, self.batches
        gc.collect()


def steps(fn: Callable[[], object], count: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(count):
            fn()

    return run


def images_per_s(fn: Callable[[], object], batch: int, settings: Settings, device: torch.device) -> tuple[float, float]:
    """(images/s over `settings.steps` timed steps, seconds of the warm-up: the compile, for a compiled model)."""
    warmup = timed(steps(fn, settings.warmup), device)()
    return batch * settings.steps / timed(steps(fn, settings.steps), device)(), warmup


def compiled(vit: VisionTransformer, settings: Settings) -> VisionTransformer:
    mode = {"mode": settings.compile_mode} if settings.compile_backend == "inductor" else {}
    vit.compile(backend=settings.compile_backend, **mode)
    return vit


def matmul_peak(device: torch.device, smoke: bool) -> float:
    """bf16 (CUDA) or fp32 (CPU) dense matmul FLOP/s at a size that saturates the device: the ceiling to read
    the model's achieved rate against."""
    size = 512 if smoke or device.type == "cpu" else 8192
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    run = timed(steps(lambda: a @ b, 3 if smoke else 20), device)
    run()
    return (3 if smoke else 20) * 2 * size**3 / min(run() for _ in range(3))


def model_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    cfg = config(settings, device, "modern", True)
    torch.manual_seed(0)
    eager_rate, _ = images_per_s(
        train_step(build_vit(cfg), cfg, settings.batch, device), settings.batch, settings, device
    )
    vit = compiled(build_vit(cfg), settings)
    rate, compile_s = images_per_s(train_step(vit, cfg, settings.batch, device), settings.batch, settings, device)
    evaluation = torch.randint(0, 256, (settings.eval_batch, 3, 32, 32), device=device).float()

    def forward() -> None:
        with torch.no_grad(), autocast(cfg):
            vit.eval()(evaluation)
        vit.train()

    eval_rate, _ = images_per_s(forward, settings.eval_batch, settings, device)
    flops = model_flops(vit)["train_step"]
    peak = matmul_peak(device, settings.smoke)
    mode = settings.compile_mode if settings.compile_backend == "inductor" else "no mode"
    state.update(vit=vit, train_img_s=rate, eval_img_s=eval_rate, compile_s=compile_s, cfg=cfg)
    precision = resolve_precision(cfg.trainer.precision, cfg.trainer.accelerator)
    where = f"{settings.model}, batch {settings.batch}, {precision}, 100 classes, 32 px"
    return [
        row("model", f"train step img/s, eager ({where})", f"{eager_rate:.0f}"),
        row("model", f"train step img/s, compiled ({settings.compile_backend}, {mode})", f"{rate:.0f}"),
        row("model", "compiled / eager", f"{rate / eager_rate:.2f}x"),
        row("model", "first compiled steps (compile), s", f"{compile_s:.1f}"),
        row("model", f"eval forward img/s, compiled, batch {settings.eval_batch}", f"{eval_rate:.0f}"),
        row("model", "achieved TFLOP/s (analytic 3 x forward FLOPs x img/s)", f"{flops * rate / 1e12:.3f}"),
        row("model", "dense matmul peak TFLOP/s measured here", f"{peak / 1e12:.1f}"),
        row("model", "achieved / peak", f"{100 * flops * rate / peak:.1f}%"),
    ]


def sync_sources(fn: Callable[[], object], count: int) -> tuple[float, list[str]]:
    """Host syncs per call of `fn` on CUDA, with the three most frequent places (file:line) that asked for one."""
    seen: Counter[str] = Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(count):
                fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    for warning in caught:
        if "synchroniz" in str(warning.message):
            seen[f"{Path(warning.filename).name}:{warning.lineno}"] += 1
    return sum(seen.values()) / count, [f"{place} x{n}" for place, n in seen.most_common(3)]


def e2e_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    rows, rates = [], {}
    for protocol in ("baseline", "modern"):
        for on_device in (False, True):
            cfg = config(settings, device, protocol, on_device)
            step = CellStep(cfg, device, state.get("vit"))
            rate, _ = images_per_s(step, step.batch, settings, device)
            path = "on-device data" if on_device else f"{cfg.data.num_workers} CPU workers"
            rates[protocol, on_device] = rate
            rows.append(row("e2e", f"{protocol.capitalize()} cell step img/s, {path}", f"{rate:.0f}"))
            if on_device and device.type == "cuda":
                per_step, places = sync_sources(step, 5)
                where = f" ({'; '.join(places)})" if places else ""
                rows.append(
                    row("e2e", f"{protocol.capitalize()}, on-device: host syncs per step", f"{per_step:g}{where}")
                )
            step.close()
    for protocol in ("baseline", "modern"):
        gain = rates[protocol, True] / rates[protocol, False]
        rows.append(row("e2e", f"{protocol.capitalize()}: on-device / workers", f"{gain:.2f}x"))
    state["e2e_modern_img_s"] = rates["modern", True]
    return rows


def probe_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    figures, rows = probe_cost(settings.model, settings.batch, settings.probe_size, settings.repeats, device)
    state["probe_s"] = figures["probe_s"]
    return [row("probe", *r[:2]) for r in rows[:3]]


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


def overhead_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    """The Modern cell's on-device step (batch gather, crop, flip, AutoAugment, CutMix, normalise, label-smoothed
    loss) against the model's own step on a fixed batch, same model, interleaved rounds; and the data path alone
    (everything but the model), whose share of the model's step is the judged figure: on a busy machine the ratio
    of two whole steps drifts by more than the few percent it is to show."""
    cfg = config(settings, device, "modern", True)
    torch.manual_seed(0)
    model_alone = train_step(build_vit(cfg), cfg, settings.batch, device)
    cell = CellStep(cfg, device)

    def data_path() -> None:
        images, labels = next(cell.batches)
        hp = cell.module.hparams
        cell.module.preprocess(cutmix_batch(images, labels, hp.num_classes, hp.cutmix_alpha).images)

    chosen = {"model": model_alone, "cell": cell, "data": data_path}
    runs = {name: timed(steps(fn, settings.overhead_steps), device) for name, fn in chosen.items()}
    samples = interleaved(runs, repeats=settings.repeats)
    model_s, cell_s, data_s = (median(samples[k]) for k in ("model", "cell", "data"))
    spread = per_round(samples["cell"], samples["model"])[1]
    added = 100 * data_s / model_s
    where = f"{settings.model}, batch {settings.batch}, {device.type}"
    judged = added if not settings.smoke else math.nan  # the target is set at the paper config
    per_step = 1000 / settings.overhead_steps
    return [
        row("overhead", f"model alone ms/step ({where})", f"{per_step * model_s:.1f}"),
        row("overhead", "on-device data path alone ms/batch (gather, crop, flip, AutoAugment, CutMix, normalise)",
            f"{per_step * data_s:.1f}"),
        row("overhead", "whole on-device Modern step / model alone", f"{cell_s / model_s:.3f} {spread}"),
        row("overhead", "added by the on-device data path (data path / model step)", f"{added:+.1f}%",
            "on_device_overhead_pct", judged),
    ]  # fmt: skip


def projection_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    """One 200-epoch CIFAR-100 cell: training at the Modern on-device rate, an evaluation of 10,000 images and a
    probe every epoch, one compile; the grid: 24 cells in waves of the best packing, each cell at its share of the
    aggregate rate. Projections from the figures above, not measured runs."""
    needed = ("e2e_modern_img_s", "eval_img_s", "probe_s", "compile_s")
    if not all(k in state for k in needed):
        return [row("projection", "projected times", "not computed: needs the model, e2e and probe sections")]
    epochs, train, evaluation = CIFAR100["epochs"], CIFAR100["train"], CIFAR100["eval"]
    rate = state["e2e_modern_img_s"]
    work = epochs * (train / rate + evaluation / state["eval_img_s"] + state["probe_s"])
    cell_s = work + state["compile_s"]
    cells = CIFAR100["cells"] * CIFAR100["seeds"]
    packs = state.get("pack_img_s") or {1: rate}
    best = max(packs, key=lambda k: packs[k] / packs[min(packs)])
    slowdown = (packs[min(packs)] / min(packs)) / (packs[best] / best)  # one cell's rate alone / in the pack
    grid_s = math.ceil(cells / best) * (work * slowdown + state["compile_s"])
    scale = "" if not settings.smoke else " (smoke settings: not the paper's model)"
    return [
        row("projection", f"one 200-epoch CIFAR-100 Modern cell, minutes{scale}", f"{cell_s / 60:.1f}", "cell_minutes",
            cell_s / 60 if not settings.smoke and device.type == "cuda" else math.nan),
        row("projection", f"8-cell x 3-seed grid, {best} cells packed, minutes", f"{grid_s / 60:.1f}", "grid_minutes",
            grid_s / 60 if not settings.smoke and device.type == "cuda" else math.nan),
    ]  # fmt: skip


SECTIONS = {
    "model": model_section,
    "e2e": e2e_section,
    "probe": probe_section,
    "pack": pack_section,
    "overhead": overhead_section,
    "projection": projection_section,
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
