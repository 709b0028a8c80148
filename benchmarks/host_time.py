"""Host time per step, the work a GPU cannot hide: a near-zero model (depth 1, dim 8, one head) on batches of 8
images of 16 x 16 pixels, so the arithmetic is negligible on any device and what a step costs is the host's dispatch
and bookkeeping (the same ops dispatch for a batch of 128 CIFAR images).

Sides in one process, on on-device data (`data.on_device=true`), AutoAugment grouped as a GPU runs it (`select`):
- data path: the Modern cell's training loader alone, a batch per step;
- plain loop: the -AA cell (crop + flip, CutMix, label smoothing) written by hand: that loader, CutMix, smoothed
  cross-entropy, AdamW and the schedule;
- Trainer.fit, eager and compiled (`model.compile`: the whole step one graph, model/classifier.py), for the -AA
  and the Modern cell: the cell as `train.py` runs it (the project's module, callbacks, CSV logger and progress line;
  validation and the attention statistics at the epoch's end, outside the timed window).
Each compiled side keeps one module over its rounds (one compile, no recompile); its first fit's first step is the
compile time. Lightning's share: cProfile over a compiled Modern fit, the self time of Lightning's own Python by part.

The clock is the main thread's CPU time (`time.thread_time`; one torch thread, no data workers, so every op runs on
it): the host work itself, which other processes on a shared machine stretch in wall time but not in CPU time.
"""

from __future__ import annotations

import cProfile
import pstats
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback

from benchmarks.common import Report, bench_config, self_timed
from vit_locality.augment.mixing import mix_batch
from vit_locality.config.settings import RunSettings
from vit_locality.model.classifier import ViTClassifier, adamw_with_decay_groups, warmup_cosine_schedule
from vit_locality.run.builders import build_datamodule, build_loggers, build_module, build_trainer
from vit_locality.train import cell_callbacks

BATCH, WARMUP = 8, 5
CLOCK = time.thread_time  # the host's CPU time on this thread (module docstring)
NEAR_ZERO = ["model.depth=1", "model.dim=8", "model.heads=1", "model.mlp_ratio=1.0", "stats.early_layers=1"]
CELLS = {"-AA": ["aug.autoaug=false"], "Modern": []}
STEPS_PER_CELL = 78_000  # a 200-epoch CIFAR-100 cell at batch 128
# Lightning's Python by part: a path fragment of its source files -> the part's name (the first that matches)
LIGHTNING_PARTS = {
    "loops/fetchers": "fetcher",
    "connectors/logger_connector": "logger connector",
    "core/optimizer": "optimizer wrapper",
    "plugins/precision": "optimizer wrapper",
    "loops/optimization": "automatic loop (closure)",
    "trainer/call": "hook dispatch",
    "profilers/": "hook dispatch",  # the profiler context each hook call opens
    "callbacks/": "hook dispatch",  # the callbacks' default (empty) hooks
    "core/module": "module API (log, optimizers)",
    "loops/": "training loop",
    "trainer/trainer": "training loop",  # the Trainer's properties the loops read
    "strategies/": "strategy",
}
PROJECT_FILES = ("vit_locality/", "callbacks/")  # the project's own per-step Python (the graph's call included)


def host_config(device: torch.device, steps: int, cell: str = "Modern", compiled: bool = False) -> list[str]:
    """The cell on on-device data with the near-zero model; one epoch of WARMUP + steps + 1 batches."""
    batches = WARMUP + steps + 1
    return [
        *NEAR_ZERO,
        *CELLS[cell],
        "data.image_size=16",  # the smallest images the config takes (data.image_size >= 16): little arithmetic
        "data.on_device=true",
        "data.num_workers=0",
        f"data.batch_size={BATCH}",
        f"data.train_size={BATCH * batches}",
        "data.test_size=64",
        "data.eval_batch_size=64",
        "stats.probe_size=64",
        "stats.pictures=false",
        "trainer.max_epochs=1",
        "callbacks.progress_bar=tqdm",  # the default; the epoch line where stderr is no terminal
        f"model.compile={str(compiled).lower()}",
    ]


def _window(times: list[float], steps: int) -> float:
    """Seconds per step between the clock at batch WARMUP and at batch WARMUP + steps."""
    return (times[WARMUP + steps] - times[WARMUP]) / steps


def _datamodule(settings: RunSettings) -> Any:
    torch.manual_seed(0)
    datamodule = build_datamodule(settings)
    for augment in (datamodule.batch_augment, datamodule.step_augment):
        if augment is not None:
            augment.grouping = "select"  # AutoAugment as a GPU runs it (a CPU groups: its reads are free)
    datamodule.setup("fit")
    return datamodule


class _FitSide:
    """`Trainer.fit` of one cell, timed per step; a compiled side keeps its module (and its graphs) over rounds."""

    def __init__(self, settings: RunSettings, run_dir: Path) -> None:
        self.settings, self.run_dir = settings, run_dir
        self.datamodule = _datamodule(settings)
        self.module: ViTClassifier | None = None
        self.first_step_s: float | None = None  # wall seconds of the first fit's first step (a compile's)

    def __call__(self, steps: int, profile: cProfile.Profile | None = None) -> float:
        settings = self.settings
        if self.module is None or not settings.compiles:
            self.module = build_module(settings, self.datamodule)
        clock = _Clock(profile, WARMUP, WARMUP + steps)
        callbacks = [*cell_callbacks(settings, self.run_dir), clock]
        loggers = build_loggers(settings, self.run_dir)
        trainer = build_trainer(settings, self.run_dir, loggers, callbacks, sanity_check=False)
        trainer.fit(self.module, datamodule=self.datamodule)
        if self.first_step_s is None:
            self.first_step_s = clock.walls[1] - clock.walls[0]
        return _window(clock.times, steps)


def host(report: Report, device: torch.device, steps: int, rounds: int) -> None:
    """Host ms per step of the data path, the plain -AA loop and `Trainer.fit` eager and compiled (module docstring)."""
    modern = bench_config("vit_tiny", device, host_config(device, steps))
    datamodule = _datamodule(modern)
    plain_settings = bench_config("vit_tiny", device, host_config(device, steps, "-AA"))
    plain_data = _datamodule(plain_settings)

    def data_path() -> float:
        times = []
        for _ in datamodule.train_dataloader():
            times.append(CLOCK())
        return _window(times, steps)

    def plain_loop() -> float:
        module = build_module(plain_settings, plain_data).to(device).train()
        optim = plain_settings.optim
        optimizer = adamw_with_decay_groups(module.model, optim.lr, optim.weight_decay, tuple(optim.betas))
        schedule = warmup_cosine_schedule(optimizer, 1000, 1, optim.warmup_epochs, optim.min_lr_ratio)
        times = []
        for images, labels in plain_data.train_dataloader():
            times.append(CLOCK())
            optimizer.zero_grad(set_to_none=True)
            mixed, targets, _ = mix_batch(images, labels, module.num_classes, module.protocol)
            loss = F.cross_entropy(module(mixed), targets, label_smoothing=module.protocol.ls)
            loss.backward()
            optimizer.step()
            schedule.step()
        return _window(times, steps)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # every op on the clocked thread
    try:
        with tempfile.TemporaryDirectory(prefix="vit-host-") as run_dir:
            fits = {
                f"fit {mode} {cell}": _FitSide(
                    bench_config("vit_tiny", device, host_config(device, steps, cell, mode == "compiled")),
                    Path(run_dir) / f"{mode}{cell}",
                )
                for mode in ("eager", "compiled")
                for cell in CELLS
            }
            sides = {"data path": data_path, "plain loop -AA": plain_loop}
            sides |= {name: partial(side, steps) for name, side in fits.items()}
            label = f"near-zero model, batch {BATCH}, on-device"
            times = self_timed("host: per step", label, sides, rounds, 1)
            shares = lightning_share(fits["fit compiled Modern"], steps)
            ops = {name: dispatched_ops(side.settings) for name, side in fits.items()}
    finally:
        torch.set_num_threads(threads)
    report.measurements += times.values()
    ms = {name: 1000 * t.median for name, t in times.items()}
    for name, value in ms.items():
        report.row(f"host: near-zero model, batch {BATCH}, on-device: {name} ms/step", f"{value:.2f}")
    plain = ms["plain loop -AA"]
    added = ms["fit eager -AA"] - plain
    compiled_over = ms["fit compiled Modern"] - plain
    report.row("host: data path ms/batch", f"{ms['data path']:.2f}", "host_data_ms", ms["data path"])
    report.row("host: Trainer + project over the plain loop, ms/step", f"{added:+.2f}", "host_added_ms", added)
    report.row("host: compiled Modern over the plain -AA loop, ms/step", f"{compiled_over:+.2f}",
               "host_compiled_over_ms", compiled_over)  # fmt: skip
    for name, count in ops.items():
        report.row(f"host: {name.removeprefix('fit ')}: aten ops dispatched a step (loader + loss + backward)",
                   f"{count:.0f}")  # fmt: skip
    for name, side in fits.items():
        if side.settings.compiles:
            report.row(f"host: {name}: first step (compile), s", f"{side.first_step_s:.1f}")
    for part, share in shares.items():
        per_cell = share * ms["fit compiled Modern"] / 1000 * STEPS_PER_CELL
        report.row(f"host: compiled Modern step's CPU time (cProfile), self time of {part}",
                   f"{100 * share:.1f}% (about {per_cell:.0f} s a 200-epoch cell)")  # fmt: skip
    for name, value in ms.items():
        report.figure(name.replace(" ", "_"), value)


def dispatched_ops(settings: RunSettings, steps: int = 4) -> float:
    """aten ops the host dispatches a step (torch.profiler, ops called from Python, not those inside another op):
    the loader's batch and the module's training loss with its backward, without Lightning or the optimizer."""
    from torch.profiler import ProfilerActivity, profile

    datamodule = _datamodule(settings)
    module = build_module(settings, datamodule)
    module.on_fit_start()
    if settings.compiles:
        module.compile_step()
    batches = iter(datamodule.train_dataloader())
    for _ in range(WARMUP):  # caches filled, graphs compiled
        module.training_loss(*next(batches))[0].backward()
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        for _ in range(steps):
            module.training_loss(*next(batches))[0].backward()
    ops = [event for event in profiled.events() if event.name.startswith("aten::")]
    outermost = [op for op in ops if op.cpu_parent is None or not op.cpu_parent.name.startswith("aten::")]
    return len(outermost) / steps


def lightning_share(side: _FitSide, steps: int) -> dict[str, float]:
    """Per part of Lightning (LIGHTNING_PARTS), and for the project's own modules, the self time of their Python over
    the timed window of one fit, as a share of the window's profiled time (cProfile slows every call alike, so
    shares, not milliseconds; the ops a part calls count as torch's, not the part's)."""
    profile = cProfile.Profile(CLOCK)
    side(steps, profile)
    stats = pstats.Stats(profile)
    total = max(stats.total_tt, 1e-12)
    shares: dict[str, float] = {}
    for (filename, _, _), (_, _, self_time, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "site-packages/lightning" in filename:
            part = "Lightning: " + next((name for key, name in LIGHTNING_PARTS.items() if key in filename), "other")
        elif "site-packages" not in filename and any(f"/{folder}" in filename for folder in PROJECT_FILES):
            part = "project: vit_locality and callbacks"
        else:
            continue
        shares[part] = shares.get(part, 0.0) + self_time / total
    return dict(sorted(shares.items(), key=lambda item: -item[1]))


class _Clock(Callback):
    """The clock at the start of every training batch; a profile runs between batches `start` and `stop`."""

    def __init__(self, profile: cProfile.Profile | None = None, start: int = 0, stop: int = 0) -> None:
        self.times: list[float] = []
        self.walls: list[float] = []
        self.profile, self.start, self.stop = profile, start, stop

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        self.times.append(CLOCK())
        self.walls.append(time.perf_counter())
        if self.profile is not None and idx == self.start:
            self.profile.enable()
        elif self.profile is not None and idx == self.stop:
            self.profile.disable()
