"""Framework section: what `Trainer.fit`, as a user runs it, adds per step over a plain PyTorch loop.

Both sides train the project's ViTClassifier, built by `build_datamodule` and `build_module` from the composed
config, on the same synthetic in-memory batches (no workers, no per-sample transform: the data section measures
those); the plain loop's AdamW and warm-up + cosine schedule come from `adamw_with_decay_groups` and
`warmup_cosine_schedule`, as in `configure_optimizers`. The Trainer as a user runs it is `build_loggers` (CSV) +
`build_trainer` with `callbacks.progress_bar=tqdm`, so Lightning adds its TQDMProgressBar (drawn into /dev/null),
+ the StepClock. A run's other callbacks (`callbacks.build_callbacks`: last.ckpt, interrupt checkpoint, per-epoch
reseeding) act at the start of the fit, at epoch ends and on exceptions, outside the timed window; the attention
statistics have their own section.

On the tiny model two more Trainers split the added time by cause: "bare" (no bar, no logger) and "loss only"
(bare, and a training step that returns the loss alone: no accuracy, no `self.log`, no finiteness check).

The clock reads the time at the start of batch `first` and of batch `first + steps` (batch fetched, step not yet
run) on every side: Trainer construction, the warm-up steps and the epoch end lie outside that window. Every
round builds a new Trainer or optimizer, and the sides alternate round by round.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig

from ..builders import build_datamodule, build_loggers, build_module, build_trainer
from ..data import ImageDataModule
from ..module import ViTClassifier, adamw_with_decay_groups, warmup_cosine_schedule
from .common import Result, autocast, bench_config, model_info
from .report import spread
from .timing import interleaved, paired_ratios, sync

TIMED = {
    "plain": "plain loop ms/step",
    "lightning": "Trainer.fit ms/step (bar + CSV log)",
    "lightning_bare": "Trainer.fit ms/step (no bar, no logger)",
    "lightning_loss_only": "Trainer.fit ms/step (bare, loss-only training_step)",
}


@dataclass(frozen=True)
class FrameworkCase:
    label: str
    model: str  # conf/model/<model>.yaml
    batch: int
    first: int  # warm-up steps before the timed window
    steps: int
    repeats: int
    warmup: int  # untimed rounds
    target: str  # report.TARGETS: "tiny_added_ms" (and the added time split by cause) or "paper_overhead_pct"

    @property
    def attribute(self) -> bool:
        return self.target == "tiny_added_ms"


class LossOnlyClassifier(ViTClassifier):
    """Our module with a training step that only returns the loss."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.training_loss(*batch)[0]

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        pass


class StepClock(Callback):
    """Reads the clock at the start of batches `first` and `first + steps` of the first epoch."""

    def __init__(self, first: int, steps: int, device: torch.device) -> None:
        self.marks, self.steps, self.device = (first, first + steps), steps, device
        self.times: dict[int, float] = {}

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        if idx in self.marks and trainer.current_epoch == 0:
            self.mark(idx)

    def mark(self, idx: int) -> None:
        sync(self.device)
        self.times[idx] = time.perf_counter()

    def per_step(self) -> float:
        first, last = self.marks
        if last not in self.times:
            raise RuntimeError(f"the fit ended before batch {last}: raise trainer.limit_train_batches")
        return (self.times[last] - self.times[first]) / self.steps


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Lightning's info lines and its warnings about small data and no workers are expected here."""
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    lightning_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), open(os.devnull, "w") as null:
            warnings.simplefilter("ignore")
            with contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
                yield
    finally:
        lightning_log.setLevel(level)


def plain_loop(cfg: DictConfig, module: ViTClassifier, datamodule: ImageDataModule, clock: StepClock) -> float:
    """The loop a researcher writes by hand; seconds per step over the same window as the Trainer's."""
    hp, epochs = module.hparams, cfg.trainer.max_epochs
    module.to(clock.device).train()
    optimizer = adamw_with_decay_groups(module.model, hp.lr, hp.weight_decay, tuple(hp.betas))
    total = cfg.trainer.limit_train_batches * epochs  # what the Trainer's estimated_stepping_batches gives
    schedule = warmup_cosine_schedule(optimizer, total, epochs, hp.warmup_epochs, hp.min_lr_ratio)
    amp = autocast(cfg)
    for idx, (images, labels) in enumerate(datamodule.train_dataloader()):
        if idx in clock.marks:
            clock.mark(idx)
            if idx == clock.marks[1]:
                break
        images, labels = images.to(clock.device, non_blocking=True), labels.to(clock.device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with amp:
            loss = F.cross_entropy(module(images), labels)
        loss.backward()
        optimizer.step()
        schedule.step()
    return clock.per_step()


def measure(case: FrameworkCase, device: torch.device, run_dir: Path) -> Result:
    L.seed_everything(0, verbose=False)
    batches = case.first + case.steps + 1
    trainer = ["trainer.max_epochs=1", f"trainer.limit_train_batches={batches}", "trainer.limit_val_batches=0"]
    data = [f"data.batch_size={case.batch}", "data.num_workers=0", f"data.train_size={case.batch * batches}"]
    rest = ["data.test_size=64", "protocol=baseline", "stats.enabled=false", "callbacks.progress_bar=tqdm"]
    cfg = bench_config(case.model, device, [*trainer, *data, *rest])
    with quiet():
        datamodule, _ = build_datamodule(cfg)
        datamodule.train_transform = None
        datamodule.setup("fit")
        module = build_module(cfg, datamodule)

    bare_cfg = copy.deepcopy(cfg)
    bare_cfg.callbacks.progress_bar = "none"

    def fit(chosen: ViTClassifier, bare: bool) -> float:
        """One `Trainer.fit` as a user runs it, or `bare`: no progress bar, no logger."""
        clock = StepClock(case.first, case.steps, device)
        loggers = [] if bare else build_loggers(cfg, run_dir)
        with quiet():
            trainer = build_trainer(bare_cfg if bare else cfg, run_dir, loggers, [clock], sanity_check=False)
            trainer.fit(chosen, datamodule=datamodule)
        return clock.per_step()

    runs = {
        "plain": lambda: plain_loop(cfg, module, datamodule, StepClock(case.first, case.steps, device)),
        "lightning": lambda: fit(module, bare=False),
    }
    if case.attribute:
        with quiet():
            loss_only = LossOnlyClassifier(**module.hparams)
        loss_only.load_state_dict(module.state_dict())
        runs |= {
            "lightning_bare": lambda: fit(module, bare=True),
            "lightning_loss_only": lambda: fit(loss_only, bare=True),
        }
    samples = interleaved(runs, repeats=case.repeats, warmup=case.warmup)
    ms = {name: 1000 * median(s) for name, s in samples.items()}
    plain, fit_ms = ms["plain"], ms["lightning"]
    added, pct = fit_ms - plain, 100 * (fit_ms / plain - 1)
    paired = paired_ratios(samples["lightning"], samples["plain"])
    where = f"{case.label}: {case.model}, batch {case.batch}, {case.steps} steps"
    rows: list[tuple] = [(f"{where}: {TIMED[name]}", f"{value:.2f}") for name, value in ms.items()]
    figures = {"model": model_info(cfg), "ms_per_step": ms, "added_ms_per_step": added, "overhead_pct": pct, **paired}
    figures["ratios"] = {f"{name}_over_plain": value / plain for name, value in ms.items() if name != "plain"}
    if case.attribute:
        bare_ms, loss_only_ms = ms["lightning_bare"], ms["lightning_loss_only"]
        figures["attribution_ms_per_step"] = parts = {
            "lightning_loop": loss_only_ms - plain,
            "module_step_logging_metrics": bare_ms - loss_only_ms,
            "progress_bar_and_csv_logger": fit_ms - bare_ms,
        }
        split = "loop {:+.2f}, module logging/metrics {:+.2f}, bar+logger {:+.2f}".format(*parts.values())
        rows.append((f"{case.label}: added ms per step, by cause", split))
    quantity, value, measured = (
        ("added ms per step", f"{added:+.2f} ms ({pct:+.1f}%)", added)
        if case.target == "tiny_added_ms"
        else ("Trainer overhead", f"{pct:+.1f}% ({added:+.1f} ms)", pct)
    )
    rows.append((f"{case.label}: {quantity}", f"{value} {spread(paired)}", case.target, measured))
    return {**figures, "samples_ms": {name: [1000 * x for x in s] for name, s in samples.items()}}, rows


def run(cases: tuple[FrameworkCase, ...], device: torch.device) -> Result:
    figures, rows = {}, []
    with tempfile.TemporaryDirectory(prefix="vit-bench-") as tmp:
        for case in cases:
            figures[case.label], case_rows = measure(case, device, Path(tmp, case.label))
            rows += case_rows
    ratios = {f"{label}_{k}": v for label, c in figures.items() for k, v in c["ratios"].items()}
    return {"cases": figures, "ratios": ratios}, rows
