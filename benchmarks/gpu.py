"""`python -m benchmarks gpu` (`make bench-gpu`): the GPU rows of BENCHMARKS.md in one call of at most about 8 minutes.

Sections, in the order they run (each a group of rows; a failing section becomes a row and the next one runs):
- model: train steps of the ViT alone (fixed batch, the Trainer's precision), eager against compiled; eval images/s;
  achieved TFLOP/s against the analytic FLOPs and a measured dense matmul peak.
- autoaugment: batched AutoAugment without host reads (`select`) against grouped, same pixels.
- e2e: a cell's whole training step (next batch, augmentation, CutMix, loss, backward, AdamW), Baseline and Modern,
  per-sample workers against on-device data; on CUDA the host syncs per on-device step and where they come from;
  the on-device data path alone against the model's step (the CPU target: at most +5% at the paper config).
- probe: one attention-statistics pass in training steps (the suite's stats section).
- memory: the peak memory of a Modern on-device cell, and how many such cells fit on the device (CUDA only).
- fused: 1, 8 and 24 cells (the 8 grid protocols x 3 seeds) trained as one fused model (vit_locality/model/fused.py):
  images/s per cell and in all, the compile, the 24-cell pack's eval forward; a pack past the device's memory is a row.
- pack: aggregate images/s of 1, 2, 4, 8 Modern cells sharing the device (separate processes, as joblib runs them).
- projection: one 200-epoch CIFAR-100 cell, the 8-cell x 3-seed grid as processes and as one fused 24-cell pack, from
  the figures above.

`--device cpu --smoke` runs every section on the tiny model in about a minute (the tests), so the first GPU call is not
the script's first run; `--compile-mode reduce-overhead` measures CUDA graphs in place of the default compile;
`--benchmarks BENCHMARKS.md` writes the table between its GPU markers.

`--budget-s` bounds the whole call: every wait is bounded by the time left, a section still running when it is spent
is cut (its row says so) and the sections after it are skipped. The bench cleans up after itself: SIGTERM (or
Ctrl-C) stops its packed cells and removes their temp folder, and a packed cell ends on its own when the bench dies
(even by SIGKILL), removing that folder.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.benchmark import Timer
from torch.utils.benchmark import timer as clock  # the time once the device's queued work is done

from benchmarks import common
from benchmarks.common import Report, autocast, bench_config, build_vit, ratio_text, side_by_side, train_step
from benchmarks.suite import model_flops, stats
from vit_locality.augment.batched_autoaugment import apply, draw
from vit_locality.augment.mixing import mix_batch
from vit_locality.config.settings import RunSettings
from vit_locality.data.on_device import DeviceTrainLoader
from vit_locality.run.builders import build_datamodule, build_module
from vit_locality.store.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]  # the checkout, where `python -m benchmarks` runs the packed cells
BEGIN, END = "<!-- bench-gpu:begin -->", "<!-- bench-gpu:end -->"
CIFAR100 = {"train": 50_000, "eval": 10_000, "epochs": 200, "cells": 8, "seeds": 3}
WORKER_GRACE_S = 30.0  # a packed cell outlives the bench's budget by at most this long, even if nobody stops it
STOP_GRACE_S = 10.0  # how long a packed cell gets to end on SIGTERM before it is killed
FREE_SECTIONS = ("projection",)  # arithmetic on what was measured: runs even when the budget is spent


@dataclass(frozen=True)
class Settings:
    """One run's sizes: FULL for the GPU call, SMOKE for the CPU test run."""

    model: str
    batch: int
    eval_batch: int
    steps: int  # steps per timed call
    warmup: int  # untimed steps first (the compile happens here)
    train_size: int  # synthetic images the cells read
    probe_size: int
    pack: tuple[int, ...]  # cells packed (up to one 8-cell grid wave)
    pack_seconds: float
    rounds: int
    backend: str  # "inductor"; "eager" in the smoke run (dynamo traces, nothing is compiled)
    workers: int  # data workers of the worker path (a CIFAR cell's default)
    smoke: bool
    compile_mode: str = "default"  # torch.compile's mode with inductor (--compile-mode)
    fused_batch: int = 128  # per cell of a fused pack (a CIFAR cell's batch)


FULL = Settings("vit_paper", 128, 512, 60, 10, 16_384, 512, (1, 2, 4, 8), 20.0, 5, "inductor", 4, False)
SMOKE = Settings("vit_tiny", 16, 64, 3, 1, 256, 32, (1, 2), 1.0, 2, "eager", 2, True, fused_batch=2)


def config(s: Settings, device: torch.device, protocol: str, on_device: bool) -> RunSettings:
    """A CIFAR-100-shaped cell (100 classes, 32 px) on synthetic data with the protocol preset and data path."""
    return bench_config(s.model, device, [
        f"protocol={protocol}", f"data.on_device={str(on_device).lower()}", f"data.train_size={s.train_size}",
        "data.test_size=64", f"data.batch_size={s.batch}", f"data.num_workers={s.workers}", "model.compile=false",
    ])  # fmt: skip


def repeat(fn: Callable[[], object], count: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(count):
            fn()

    return run


def left_s(state: dict[str, Any]) -> float:
    return state["budget_s"] - (time.perf_counter() - state["started"])


class BudgetSpent(BaseException):
    """`--budget-s` ran out: a BaseException, so that a section's `except Exception` (and torch's own handlers) let it
    through to `main`, which records the cut section and skips the rest."""


def deadline(state: dict[str, Any], timeout: float) -> tuple[float, bool]:
    """A wait's end on the monotonic clock: its own `timeout` or the budget's end, whichever comes first; and
    whether it is the budget's."""
    left = left_s(state)
    return time.monotonic() + min(timeout, left), left <= timeout


def compile_vit(vit: torch.nn.Module, s: Settings, dynamic: bool | None = None) -> None:
    """torch.compile as every measured model gets it: `s.backend`, with `s.compile_mode` where inductor takes one;
    `dynamic=False` for a model met in several shapes (a graph of its own per shape, none made shape-generic)."""
    vit.compile(backend=s.backend, dynamic=dynamic, **({"mode": s.compile_mode} if s.backend == "inductor" else {}))


def compile_text(s: Settings) -> str:
    unused = "" if s.backend == "inductor" else " (unused by this backend)"
    return f"compile {s.backend}, mode {s.compile_mode}{unused}"


class CellStep:
    """One training step of a cell as its module runs it, minus the Trainer: the next batch from the cell's data path
    (workers or on the device), `training_loss` (mixing, normalise, forward, loss), backward, AdamW."""

    def __init__(self, cfg: RunSettings, device: torch.device, vit: torch.nn.Module | None = None) -> None:
        datamodule = build_datamodule(cfg)
        datamodule.setup("fit")
        self.module, self.device = build_module(cfg, datamodule).to(device), device
        if vit is not None:  # one (compiled) model for every cell measured, so it compiles once
            self.module.model = vit.to(device)
        if datamodule.on_device:
            images, labels = datamodule.device_arrays(device).train
            loader: Any = DeviceTrainLoader(images, labels, datamodule.batch_size, 0, datamodule.batch_augment)
        else:
            datamodule.pin_memory = device.type == "cuda"
            loader = datamodule.train_dataloader()
        self.loader, self.batch, self.amp = loader, datamodule.batch_size, autocast(cfg)
        self.iterator = iter(loader)
        self.optimizer = torch.optim.AdamW(self.module.parameters(), lr=1e-4)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            images, labels = next(self.iterator)
        except StopIteration:  # a new epoch
            self.iterator = iter(self.loader)
            images, labels = next(self.iterator)
        return images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)

    def __call__(self) -> None:
        images, labels = self.next_batch()
        self.optimizer.zero_grad(set_to_none=True)
        with self.amp:
            loss = self.module.training_loss(images, labels)[0]
        loss.backward()
        self.optimizer.step()
        self.module._note_nonfinite(loss)  # what training_step adds per step besides logging (a check on the device)

    def data_path(self) -> None:
        """Everything the step adds to the model's: the batch, its augmentation and mixing, normalisation."""
        images, labels = self.next_batch()
        self.module.preprocess(mix_batch(images, labels, self.module.num_classes, self.module.protocol)[0])


def compiled_step(cfg: RunSettings, s: Settings, device: torch.device, compile: bool) -> tuple[Callable, float, Any]:
    """`s.steps` train steps of a new model, compiled (`s.backend`, `s.compile_mode`) or eager; the seconds of the
    warm-up steps (the compile) and the model."""
    torch.manual_seed(0)
    vit = build_vit(cfg)
    if compile:
        compile_vit(vit, s)
    step = train_step(vit, cfg, s.batch, device)
    if compile and s.compile_mode == "reduce-overhead":  # CUDA graphs: a new graph iteration per step
        step = graph_step(step)
    started = clock()
    repeat(step, s.warmup)()
    return repeat(step, s.steps), clock() - started, vit


def graph_step(step: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        torch.compiler.cudagraph_mark_step_begin()
        step()

    return run


def model_section(r: Report, s: Settings, device: torch.device, state: dict[str, Any]) -> None:
    cfg = config(s, device, "modern", True)
    eager, _, _ = compiled_step(cfg, s, device, False)
    compiled, compile_s, vit = compiled_step(cfg, s, device, True)
    where, mode = f"{s.model}, batch {s.batch} x {s.steps} steps, {device.type}", f"compiled ({s.backend})"
    mode += f", {s.compile_mode}" if s.backend == "inductor" else ""
    times = side_by_side("model: train steps", where, {"eager": eager, mode: compiled}, s.rounds)
    r.measurements += times.values()
    rate = s.batch * s.steps / times[mode].median
    images = torch.randint(0, 256, (s.eval_batch, 3, 32, 32), device=device).float()

    def forward() -> None:
        with torch.no_grad(), autocast(cfg):
            vit.eval()(images)
        vit.train()

    evaluation = Timer("fn()", globals={"fn": forward}, label="model: eval forward", sub_label=where).timeit(s.rounds)
    eval_rate = s.eval_batch / evaluation.median
    size, dtype = (8192, torch.bfloat16) if device.type == "cuda" and not s.smoke else (512, torch.float32)
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    peak = 2 * size**3 / Timer("a @ b", globals={"a": a, "b": b}).blocked_autorange(min_run_time=0.5).median
    achieved = model_flops(vit)["train_step"] * rate
    state.update(train_img_s=rate, eval_img_s=eval_rate, compile_s=compile_s, cfg=cfg, vit=vit, where=where)
    r.row(f"train step img/s, {mode} ({where})", f"{rate:.0f}")
    r.row("compiled speed-up (eager step time / compiled)", ratio_text(times["eager"], times[mode]))
    r.row("first compiled steps (compile), s", f"{compile_s:.1f}")
    r.row(f"eval forward img/s, compiled, batch {s.eval_batch}", f"{eval_rate:.0f}")
    r.row("achieved TFLOP/s (analytic 3 x forward FLOPs x img/s)", f"{achieved / 1e12:.3f}")
    r.row(f"dense matmul peak TFLOP/s measured here ({dtype})", f"{peak / 1e12:.3g}")
    r.row("achieved / peak", f"{100 * achieved / peak:.1f}%")


def autoaugment_section(r: Report, s: Settings, device: torch.device, state: dict[str, Any]) -> None:
    generator = torch.Generator(device=device).manual_seed(0)
    images = torch.randint(0, 256, (s.batch, 3, 32, 32), dtype=torch.uint8, device=device, generator=generator)
    draws = draw(s.batch, generator, device)
    same = torch.equal(apply(images, draws, "select"), apply(images, draws, "grouped"))
    sides = {grouping: lambda g=grouping: apply(images, draws, g) for grouping in ("select", "grouped")}
    times = side_by_side("autoaugment: one batch", f"batch {s.batch}, 32 px, {device.type}", sides, s.rounds)
    r.measurements += times.values()
    r.row("sync-free (select) / grouped (host reads), time per batch", f"{ratio_text(*times.values())}")
    r.row("select and grouped give the same pixels", str(same))


def sync_places(fn: Callable[[], object], count: int) -> str:
    """Host syncs per call of `fn` on CUDA (`set_sync_debug_mode`), with the three places that asked most."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            repeat(fn, count)()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    seen = Counter(f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message))
    places = "; ".join(f"{place} x{n}" for place, n in seen.most_common(3))
    return f"{sum(seen.values()) / count:g}" + (f" ({places})" if places else "")


def e2e_section(r: Report, s: Settings, device: torch.device, state: dict[str, Any]) -> None:
    """Per protocol, a cell's step with workers against on-device data; for Modern also the model's own step and the
    on-device data path alone (gather, crop, flip, AutoAugment, CutMix, normalise), whose share of the model's step
    is the judged figure (on a busy machine the ratio of two whole steps drifts by more than that share)."""
    vit = state["vit"] if "vit" in state else build_vit(config(s, device, "modern", True))
    for protocol in ("baseline", "modern"):
        cfg = config(s, device, protocol, True)
        steps = {f"{s.workers} workers": CellStep(config(s, device, protocol, False), device, vit),
                 "on-device": CellStep(cfg, device, vit)}  # fmt: skip
        sides = {path: repeat(step, s.steps) for path, step in steps.items()}
        if protocol == "modern":
            sides["model alone"] = repeat(train_step(vit, cfg, s.batch, device), s.steps)
            sides["data path"] = repeat(steps["on-device"].data_path, s.steps)
        times = side_by_side(f"e2e: {protocol}", f"{s.model}, batch {s.batch} x {s.steps} steps", sides, s.rounds)
        r.measurements += times.values()
        name = protocol.capitalize()
        for path in steps:
            r.row(f"{name} cell step img/s, {path}", f"{s.batch * s.steps / times[path].median:.0f}")
        r.row(f"{name}: on-device speed-up (workers' step time / on-device)", ratio_text(*list(times.values())[:2]))
        if device.type == "cuda":
            r.row(f"{name}, on-device: host syncs per step", sync_places(steps["on-device"], 5))
        state[f"e2e_{protocol}_img_s"] = s.batch * s.steps / times["on-device"].median
        del steps, sides
        gc.collect()  # stops the loader's workers before the next figure
    added = 100 * times["data path"].median / times["model alone"].median
    r.row("Modern: whole on-device step / model alone", ratio_text(times["on-device"], times["model alone"]))
    judged = math.nan if s.smoke else added  # the target is set at the paper config
    r.row("Modern: added by the on-device data path (data path / model step)", f"{added:+.1f}%",
          "on_device_overhead_pct", judged)  # fmt: skip


def probe_section(r: Report, s: Settings, device: torch.device, state: dict[str, Any]) -> None:
    stats(r, device, s.model, s.batch, s.probe_size, s.rounds)
    state["probe_s"] = r.figures["probe.probe_s"]


def memory_section(r: Report, s: Settings, device: torch.device, state: dict[str, Any]) -> None:
    """The peak memory of a Modern on-device cell's steps (its data set on the device included), and the cells that
    lets share the device with a CUDA context each (about 0.5 GiB) in 90% of its memory."""
    if device.type != "cuda":
        r.row("peak memory of a Modern on-device cell", "skipped: CUDA only")
        return
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    repeat(CellStep(config(s, device, "modern", True), device, state.get("vit")), s.warmup)()
    peak, total = torch.cuda.max_memory_allocated(), torch.cuda.get_device_properties(device).total_memory
    r.row(
        f"peak memory of a Modern on-device cell ({s.train_size:,} images, batch {s.batch}), GiB", f"{peak / 2**30:.2f}"
    )
    r.row(f"cells that fit in {total / 2**30:.0f} GiB", str(math.floor(0.9 * total / (peak + 2**29))))


def on_signals(handler: Callable[[int, Any], None], signums: tuple[int, ...]) -> dict[int, Any]:
    """Install `handler` for `signums` (main thread only: elsewhere Python cannot); the handlers it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, handler) for signum in signums}


def exit_on_signal(signum: int, frame: Any) -> None:
    """SIGTERM as Ctrl-C is: an exception, so every `finally` on the way out runs (workers stopped, folders gone)."""
    raise SystemExit(128 + signum)


def die_with_parent(parent: int, deadline_s: float) -> None:
    """A packed cell must never outlive its bench (a GPU keeps its memory while it idles): SIGTERM when the parent
    dies (Linux's PR_SET_PDEATHSIG), and, on any platform, a thread that watches the parent and the budget's end
    and sends it, then exits hard if the main thread is stuck in a long call."""
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):  # without it, the watching thread below still ends it
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the bench died before the request above
        raise SystemExit(128 + signal.SIGTERM)

    def watch() -> None:
        while os.getppid() == parent and time.monotonic() < deadline_s:
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(STOP_GRACE_S / 2)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="watch-bench", daemon=True).start()


def pack_worker(directory: Path, index: int, s: Settings, device: torch.device, parent: int, budget_s: float) -> None:
    """Packed cell `index` of the bench `parent`, which gave it `budget_s`: ends when the bench dies or the budget is
    spent (and then removes the bench's folder, which nobody else will); see `pack_cell`."""
    on_signals(exit_on_signal, (signal.SIGTERM,))
    die_with_parent(parent, time.monotonic() + budget_s)
    try:
        pack_cell(directory, index, s, device)
    finally:
        if os.getppid() != parent:
            shutil.rmtree(directory, ignore_errors=True)


def pack_cell(directory: Path, index: int, s: Settings, device: torch.device) -> None:
    """Compile and warm up once, say so with the settings it runs (the bench checks them against its own), then in
    every round whose file asks for more than `index` cells train for `pack_seconds` and write its images/s; idle
    (holding its memory) otherwise, until the folder goes."""
    if device.type == "cpu":
        torch.set_num_threads(1)
    cfg = config(s, device, "modern", True)
    vit = build_vit(cfg)
    compile_vit(vit, s)
    cell = CellStep(cfg, device, vit)
    step = graph_step(cell) if s.backend == "inductor" and s.compile_mode == "reduce-overhead" else cell
    repeat(step, s.warmup)()
    stated = {"pid": os.getpid(), "device": device.type, "settings": asdict(s)}
    atomic_write_text(directory / f"ready.{index}", json.dumps(stated))
    for round_index in range(len(s.pack)):
        order = directory / f"round.{round_index}"
        while not order.exists():
            if not directory.exists():  # the bench removed it: nothing more will be asked
                return
            time.sleep(0.01)
        if index < int(order.read_text()):
            done, started = 0, clock()
            while clock() - started < s.pack_seconds:
                repeat(step, 5)()
                done += 5
            rate = done * cell.batch / (clock() - started)
            atomic_write_text(directory / f"result.{round_index}.{index}", json.dumps(rate))


def _last_line(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return lines[-1] if lines else "no error output"


def wait_for(
    directory: Path, pattern: str, count: int, procs: list[subprocess.Popen], until: tuple[float, bool]
) -> None:
    """Until `count` files match `pattern`; RuntimeError when a worker fails or the wait's own timeout passes,
    BudgetSpent when the budget's end (`until`, from `deadline`) comes first."""
    end, budget = until
    while len(list(directory.glob(pattern))) < count:
        failed = [index for index, p in enumerate(procs) if p.poll() not in (None, 0)]  # 0: its last result is written
        if failed:
            why = "; ".join(
                f"{i} exit {procs[i].returncode}: {_last_line(directory / f'worker.{i}.err')}" for i in failed
            )
            raise RuntimeError(f"packed cells: waiting for {count} x {pattern}, workers failed ({why})")
        if time.monotonic() > end:
            if budget:
                raise BudgetSpent(f"packed cells: waiting for {count} x {pattern}")
            raise RuntimeError(f"packed cells: waiting for {count} x {pattern}, timed out")
        time.sleep(0.02)


def worker_command(directory: Path, s: Settings, device: torch.device, budget_s: float) -> list[str]:
    """The packed cells' command line: every option of the bench's that shapes a cell, its pid (to die with it) and
    the budget left (to end on their own after it)."""
    command = [sys.executable, "-m", "benchmarks", "gpu", "--device", device.type, "--compile-mode", s.compile_mode]
    command += ["--smoke"] if s.smoke else []
    return [*command, "--pack-worker", str(directory), "--pack-parent", str(os.getpid()), "--budget-s", f"{budget_s}"]


def check_settings(directory: Path, count: int, s: Settings, device: torch.device) -> None:
    """Every packed cell runs the bench's settings (an option that never reached them would measure something else)."""
    ours = json.loads(json.dumps({"device": device.type, "settings": asdict(s)}))
    for index in range(count):
        stated = json.loads((directory / f"ready.{index}").read_text())
        theirs = {"device": stated["device"], "settings": stated["settings"]}
        if theirs != ours:
            apart = {k: v for k, v in theirs["settings"].items() if ours["settings"].get(k) != v}
            raise RuntimeError(f"packed cell {index} runs other settings than the bench: {apart or theirs['device']}")


def stop_workers(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to every worker still running, SIGKILL to those still there `STOP_GRACE_S` later; all reaped."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    end = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pack_section(r: Report, s: Settings, device: torch.device, state: dict[str, Any]) -> None:
    """max(pack) cell processes, started and compiled once, then rounds of 1, 2, 4, ... of them training together;
    a round past 3/4 of the budget, or one that could not end within it, is skipped. The workers are stopped and
    their folder removed however the section ends (an error, the budget, SIGTERM)."""
    directory = Path(tempfile.mkdtemp(prefix="bench_pack_"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"} if device.type == "cpu" else dict(os.environ)
    procs: list[subprocess.Popen] = []
    mps = "CUDA MPS on" if os.environ.get("CUDA_MPS_PIPE_DIRECTORY") else "no MPS (time-sliced)"
    rates: dict[int, float] = {}
    try:
        command = worker_command(directory, s, device, left_s(state) + WORKER_GRACE_S)
        for i in range(max(s.pack)):
            with (directory / f"worker.{i}.err").open("w") as errors:  # the worker holds its own copy
                procs.append(subprocess.Popen([*command, "--pack-index", str(i)], cwd=ROOT, env=env,
                                              stdout=subprocess.DEVNULL, stderr=errors))  # fmt: skip
        wait_for(directory, "ready.*", len(procs), procs, deadline(state, 300))
        check_settings(directory, len(procs), s, device)
        r.row("packed cells' settings (as each cell states them)", f"{s.model}, batch {s.batch}, {device.type}, "
              f"{compile_text(s)}")  # fmt: skip
        for round_index, cells in enumerate(s.pack):
            fits = left_s(state) > max(state["budget_s"] / 4, s.pack_seconds + 5)
            run = cells if fits else 0
            atomic_write_text(directory / f"round.{round_index}", str(run))  # never seen half-written
            if not run:
                r.row(f"{cells} cells packed", "skipped: time budget")
                continue
            wait_for(directory, f"result.{round_index}.*", cells, procs, deadline(state, s.pack_seconds + 120))
            rates[cells] = sum(json.loads(p.read_text()) for p in directory.glob(f"result.{round_index}.*"))
            r.row(f"{cells} Modern cells packed ({mps}): aggregate img/s", f"{rates[cells]:.0f}")
            r.row(f"{cells} cells: aggregate / one cell", f"{rates[cells] / rates[min(rates)]:.2f}x")
    finally:
        state["armed"] = False  # the budget's alarm must not cut the cleanup short (it is bounded by itself)
        stop_workers(procs)
        shutil.rmtree(directory, ignore_errors=True)
    state["pack_img_s"] = rates


def projected_s(state: dict[str, Any]) -> tuple[float, float, int] | None:
    """(one 200-epoch CIFAR-100 cell's seconds, the 8-cell x 3-seed grid's, the packing it uses), or None without
    the figures: training at the Modern on-device rate, an evaluation of 10,000 images and a probe every epoch, one
    compile; the grid in waves of the best packing, each cell at its share of the aggregate rate."""
    if not all(k in state for k in ("e2e_modern_img_s", "eval_img_s", "probe_s", "compile_s")):
        return None
    rate = state["e2e_modern_img_s"]
    work = CIFAR100["epochs"] * (CIFAR100["train"] / rate + CIFAR100["eval"] / state["eval_img_s"] + state["probe_s"])
    packs = state.get("pack_img_s") or {1: rate}
    best = max(packs, key=lambda k: packs[k] / packs[min(packs)])
    slowdown = (packs[min(packs)] / min(packs)) / (packs[best] / best)  # one cell's rate alone / in the pack
    grid = math.ceil(CIFAR100["cells"] * CIFAR100["seeds"] / best) * (work * slowdown + state["compile_s"])
    return work + state["compile_s"], grid, best


def fused_projected_s(state: dict[str, Any]) -> tuple[float, str] | None:
    """(the 8-cell x 3-seed grid's seconds as one fused pack of 24 cells, what it counts), or None without the
    24-cell pack's figures: 200 epochs of training at the pack's rate per cell, an evaluation of 10,000 images per
    cell at the pack's eval rate and a probe per cell every epoch (when the probe section ran), one compile."""
    cells = CIFAR100["cells"] * CIFAR100["seeds"]
    pack = state.get("fused", {}).get(cells)
    if pack is None:
        return None
    probe = cells * state["probe_s"] if "probe_s" in state else 0.0
    epoch = CIFAR100["train"] / pack["img_s"] + CIFAR100["eval"] / pack["eval_img_s"] + probe
    counted = "training, eval, probe, compile" if "probe_s" in state else "training, eval, compile; no probe section"
    return CIFAR100["epochs"] * epoch + pack["compile_s"], counted


def projection_section(r: Report, s: Settings, device: torch.device, state: dict[str, Any]) -> None:
    projected, fused = projected_s(state), fused_projected_s(state)
    judged = not s.smoke and device.type == "cuda"
    note = "" if judged else " (not the paper's model on a GPU: not judged)"
    if projected is None:
        r.row("projected times", "not computed: needs the model, e2e and probe sections")
    else:
        cell, grid, best = projected
        r.row(f"one 200-epoch CIFAR-100 Modern cell, minutes{note}", f"{cell / 60:.1f}", "cell_minutes",
              cell / 60 if judged else math.nan)  # fmt: skip
        r.row(f"8-cell x 3-seed grid, {best} cells packed, minutes", f"{grid / 60:.1f}", "grid_minutes",
              grid / 60 if judged else math.nan)  # fmt: skip
    if fused is not None:
        r.row(f"8-cell x 3-seed grid as one fused pack of 24 cells ({fused[1]}), minutes{note}", f"{fused[0] / 60:.1f}",
              "fused_grid_minutes", fused[0] / 60 if judged else math.nan)  # fmt: skip
    elif "fused" in state:
        r.row("8-cell x 3-seed grid as one fused pack", "not computed: the 24-cell pack was not measured")


def fused_section(r: Report, s: Settings, device: torch.device, state: dict[str, Any]) -> None:
    """Packs of 1, 8 and 24 cells trained as one fused model (benchmarks/gpu_fused.py, imported here: it builds on
    this module)."""
    from benchmarks.gpu_fused import fused_section as measure_packs

    measure_packs(r, s, device, state)


SECTIONS = {
    "model": model_section,
    "autoaugment": autoaugment_section,
    "e2e": e2e_section,
    "probe": probe_section,
    "memory": memory_section,
    "fused": fused_section,
    "pack": pack_section,
    "projection": projection_section,
}


def write_benchmarks(path: Path, block: str) -> None:
    """Replace what stands between the GPU markers of BENCHMARKS.md with `block`."""
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} markers to write the GPU rows between")
    head, rest = text.split(BEGIN, 1)
    path.write_text(f"{head}{BEGIN}\n{block.rstrip()}\n{END}{rest.split(END, 1)[1]}")


@contextmanager
def call_guard(state: dict[str, Any]) -> Iterator[None]:
    """For the call: SIGTERM raises SystemExit (as Ctrl-C raises KeyboardInterrupt), so every `finally` runs; an
    alarm at the budget's end raises BudgetSpent while a section runs (`state["armed"]`), so the call ends within
    `--budget-s` plus the cut section's cleanup. The previous handlers come back after (tests call `main`
    in-process)."""
    state["armed"] = False

    def spent(signum: int, frame: Any) -> None:
        if state["armed"]:
            state["armed"] = False
            raise BudgetSpent(f"the budget of {state['budget_s']:g} s is spent")

    previous = on_signals(exit_on_signal, (signal.SIGTERM,))
    if previous and hasattr(signal, "setitimer"):
        previous |= on_signals(spent, (signal.SIGALRM,))
        signal.setitimer(signal.ITIMER_REAL, max(left_s(state), 0.001))
    try:
        yield
    finally:
        if signal.SIGALRM in previous:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_section(name: str, r: Report, s: Settings, device: torch.device, state: dict[str, Any]) -> None:
    """One section, its failure a row; cut by the budget's alarm, or skipped when the budget is already spent."""
    if left_s(state) <= 0 and name not in FREE_SECTIONS:
        r.row("section skipped", f"skipped: time budget of {state['budget_s']:g} s spent")
        return
    try:  # one device call must bring back every row it could measure
        state["armed"] = name not in FREE_SECTIONS
        SECTIONS[name](r, s, device, state)
    except BudgetSpent:
        r.row("section cut", f"cut: time budget of {state['budget_s']:g} s spent (ended at "
              f"{time.perf_counter() - state['started']:.1f} s, its cleanup included)")  # fmt: skip
    except Exception as error:  # noqa: BLE001 - reported as the section's row, the next section runs
        r.row("section failed", f"{type(error).__name__}: {error}"[:300].replace("|", "/"))
    finally:
        state["armed"] = False


def main(argv: list[str]) -> dict[str, Any]:
    from benchmarks.__main__ import sections_arg

    parser = argparse.ArgumentParser(prog="python -m benchmarks gpu", description=__doc__)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny model, a few steps: the CPU test run")
    sections = sections_arg(list(SECTIONS))
    parser.add_argument("--sections", type=sections, default=list(SECTIONS), help=",".join(SECTIONS))
    parser.add_argument("--out", type=Path, default=Path("reports/bench_gpu.json"), help="JSON record")
    parser.add_argument("--markdown", type=Path, default=None, help="write the rows as Markdown here")
    parser.add_argument("--benchmarks", type=Path, default=None, help="write the rows into this BENCHMARKS.md")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="the whole call's seconds: sections past it are cut or skipped, packing rounds past 3/4 "
                        "of it skipped")  # fmt: skip
    parser.add_argument("--compile-mode", default="default", help="torch.compile's mode, e.g. reduce-overhead")
    parser.add_argument("--pack-worker", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--pack-index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--pack-parent", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible")
    if args.budget_s <= 0:
        parser.error(f"--budget-s {args.budget_s:g}: the call needs some seconds")
    device, s = torch.device(args.device), replace(SMOKE if args.smoke else FULL, compile_mode=args.compile_mode)
    if args.pack_worker is not None:
        parent = os.getppid() if args.pack_parent is None else args.pack_parent
        pack_worker(args.pack_worker, args.pack_index, s, device, parent, args.budget_s)
        return {}
    started, load_start, report = time.perf_counter(), common.load_average(), Report()
    state: dict[str, Any] = {"started": started, "budget_s": args.budget_s}

    def record() -> dict[str, Any]:
        info = common.meta(["gpu", *argv], device, load_start, time.perf_counter() - started, smoke=args.smoke)
        return {"meta": info, "figures": report.figures, "rows": report.rows}

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with call_guard(state):
        for name in args.sections:
            begun, report.section = time.perf_counter(), name
            run_section(name, report, s, device, state)
            common.say(f"gpu {name}: {time.perf_counter() - begun:.1f} s")
            atomic_write_text(args.out, json.dumps(record(), indent=2, default=str) + "\n")  # what a killed run leaves
    final = record()
    markdown = common.finish(report, final["meta"], f"### GPU bench ({device})", args.out, args.markdown)
    if args.benchmarks:
        write_benchmarks(args.benchmarks, markdown)
    return final
