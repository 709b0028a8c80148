"""Host time per step, the work a GPU cannot hide: a near-zero model (depth 1, dim 8, one head) on batches of 8
images of 16 x 16 pixels, so the arithmetic is negligible on any device and what a step costs is the host's dispatch
and bookkeeping (the same ops dispatch for a batch of 128 CIFAR images).

Three sides in one process, on the same Modern cell (crop + flip, AutoAugment, CutMix, label smoothing) and the
same on-device data path (`data.on_device=true`):
- data path: the training loader alone, a batch per step (its ops are the same for a batch of 8 or of 128);
- plain loop: that loader, the protocol's CutMix and smoothed cross-entropy, AdamW and the schedule, written by hand;
- Trainer.fit: the cell as `train.py` runs it (the project's module, callbacks, CSV logger and progress line;
  validation and the attention statistics at the epoch's end, outside the timed window).
`Trainer.fit - plain loop` is what Lightning and the project add per step; the targets (at most 1 ms each for the
data path and for that difference) are those of a 200-epoch CIFAR-100 cell in 3 minutes on one GPU.

The clock is the main thread's CPU time (`time.thread_time`; one torch thread, no data workers, so every op runs on
it): the host work itself, which other processes on a shared machine stretch in wall time but not in CPU time.
"""

from __future__ import annotations

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
from vit_locality.model.optimization import adamw_with_decay_groups, warmup_cosine_schedule
from vit_locality.run.builders import build_datamodule, build_loggers, build_module, build_trainer
from vit_locality.train import cell_callbacks

BATCH, WARMUP = 8, 5
TARGET_MS = 1.0
CLOCK = time.thread_time  # the host's CPU time on this thread (module docstring)
NEAR_ZERO = ["model.depth=1", "model.dim=8", "model.heads=1", "model.mlp_ratio=1.0", "stats.early_layers=1"]


def host_config(device: torch.device, steps: int) -> list[str]:
    """The Modern cell on on-device data with the near-zero model; one epoch of WARMUP + steps + 1 batches."""
    batches = WARMUP + steps + 1
    return [
        *NEAR_ZERO,
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
        "model.compile=false",
    ]


def _window(times: list[float], steps: int) -> float:
    """Seconds per step between the clock at batch WARMUP and at batch WARMUP + steps."""
    return (times[WARMUP + steps] - times[WARMUP]) / steps


def host(report: Report, device: torch.device, steps: int, rounds: int) -> None:
    """Host ms per step of the data path alone, a plain loop and `Trainer.fit`, side by side (module docstring)."""
    settings = bench_config("vit_tiny", device, host_config(device, steps))
    torch.manual_seed(0)
    datamodule = build_datamodule(settings)
    datamodule.batch_augment.grouping = "select"  # AutoAugment as a GPU runs it (a CPU groups: its reads are free)
    datamodule.setup("fit")

    def data_path() -> float:
        times = []
        for _ in datamodule.train_dataloader():
            times.append(CLOCK())
        return _window(times, steps)

    def plain_loop() -> float:
        module = build_module(settings, datamodule).to(device).train()
        optim = settings.optim
        optimizer = adamw_with_decay_groups(module.model, optim.lr, optim.weight_decay, tuple(optim.betas))
        schedule = warmup_cosine_schedule(optimizer, 1000, 1, optim.warmup_epochs, optim.min_lr_ratio)
        times = []
        for images, labels in datamodule.train_dataloader():
            times.append(CLOCK())
            optimizer.zero_grad(set_to_none=True)
            mixed, targets, _ = mix_batch(images, labels, module.num_classes, module.protocol)
            loss = F.cross_entropy(module(mixed), targets, label_smoothing=module.protocol.ls)
            loss.backward()
            optimizer.step()
            schedule.step()
        return _window(times, steps)

    def fit(run_dir: Path) -> float:
        clock = _Clock()
        module = build_module(settings, datamodule)
        callbacks = [*cell_callbacks(settings, run_dir), clock]
        trainer = build_trainer(settings, run_dir, build_loggers(settings, run_dir), callbacks, sanity_check=False)
        trainer.fit(module, datamodule=datamodule)
        return _window(clock.times, steps)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # every op on the clocked thread
    try:
        with tempfile.TemporaryDirectory(prefix="vit-host-") as run_dir:
            sides = {"data path": data_path, "plain loop": plain_loop, "Trainer.fit": partial(fit, Path(run_dir))}
            label = f"near-zero model, batch {BATCH}, Modern, on-device"
            times = self_timed("host: per step", label, sides, rounds, 1)
    finally:
        torch.set_num_threads(threads)
    report.measurements += times.values()
    ms = {name: 1000 * t.median for name, t in times.items()}
    for name, value in ms.items():
        report.row(f"host: near-zero model, batch {BATCH}, Modern on-device: {name} ms/step", f"{value:.2f}")
    added = ms["Trainer.fit"] - ms["plain loop"]
    report.row("host: data path ms/batch", f"{ms['data path']:.2f}", "host_data_ms", ms["data path"])
    report.row("host: Trainer + project over the plain loop, ms/step", f"{added:+.2f}", "host_added_ms", added)
    report.figure("data_ms", ms["data path"])
    report.figure("plain_ms", ms["plain loop"])
    report.figure("fit_ms", ms["Trainer.fit"])


class _Clock(Callback):
    """The clock at the start of every training batch."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        self.times.append(CLOCK())
