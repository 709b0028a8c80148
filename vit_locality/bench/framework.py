"""Framework section: what `Trainer.fit`, as a user runs it, adds per step over a plain PyTorch loop.

Both sides train the ViTClassifier that `build_datamodule` and `build_module` make from the composed config, with
the project's AdamW and warm-up + cosine schedule, on the same in-memory synthetic batches (no workers or per-sample
transform: the data section times those). The user's Trainer is `build_trainer` with a tqdm bar (into /dev/null)
and the CSV log of `build_loggers`; on the tiny model, a "bare" one (no bar, no logger) and a "loss only" one (bare,
and a training step that returns the loss alone) split the added time by cause. Every side reads the clock at the
start of batches `first` and `first + steps`: construction, warm-up steps and the epoch end are not timed.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf

from vit_locality.bench.common import Result, autocast, bench_config, interleaved, optimizer_step, per_round, sync
from vit_locality.data import ImageDataModule
from vit_locality.model.classifier import ViTClassifier, adamw_with_decay_groups, warmup_cosine_schedule
from vit_locality.run.builders import build_datamodule, build_loggers, build_module, build_trainer

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
    target: str  # "tiny_added_ms" (and the added time split by cause) or "paper_overhead_pct"


class LossOnlyClassifier(ViTClassifier):
    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.training_loss(*batch)[0]

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        pass


class StepClock(Callback):
    """Reads the clock at the start of batches `first` and `first + steps` of the first epoch."""

    def __init__(self, first: int, steps: int, device: torch.device) -> None:
        self.marks, self.device = (first, first + steps), device
        self.times: dict[int, float] = {}

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        if trainer.current_epoch == 0:
            self.mark(idx)

    def mark(self, idx: int) -> bool:
        """Read the clock if batch `idx` opens or closes the window; whether the window has closed."""
        if idx in self.marks:
            sync(self.device)
            self.times[idx] = time.perf_counter()
        return idx == self.marks[1]

    def per_step(self) -> float:
        first, last = self.marks
        return (self.times[last] - self.times[first]) / (last - first)


@contextmanager
def quiet() -> Iterator[None]:
    """Lightning's info lines and its warnings about small data and no workers are expected here."""
    log = logging.getLogger("lightning.pytorch")  # its handler holds the real stderr: redirecting does not reach it
    level = log.level
    with warnings.catch_warnings(), open(os.devnull, "w") as null, redirect_stdout(null), redirect_stderr(null):
        warnings.simplefilter("ignore")
        log.setLevel(logging.ERROR)
        try:
            yield
        finally:
            log.setLevel(level)


def plain_loop(cfg: DictConfig, module: ViTClassifier, datamodule: ImageDataModule, clock: StepClock) -> float:
    """The loop a researcher writes by hand; seconds per step over the same window as the Trainer's."""
    optim, epochs = module.optim, cfg.trainer.max_epochs
    module.to(clock.device).train()
    optimizer = adamw_with_decay_groups(module.model, optim.lr, optim.weight_decay, optim.betas)
    total = cfg.trainer.limit_train_batches * epochs  # what the Trainer's estimated_stepping_batches gives
    schedule = warmup_cosine_schedule(optimizer, total, epochs, optim.warmup_epochs, optim.min_lr_ratio)
    amp = autocast(cfg)
    for idx, (images, labels) in enumerate(datamodule.train_dataloader()):
        if clock.mark(idx):
            break
        images, labels = images.to(clock.device, non_blocking=True), labels.to(clock.device, non_blocking=True)
        optimizer_step(module, optimizer, amp, images, labels)
        schedule.step()
    return clock.per_step()


def measure(case: FrameworkCase, device: torch.device, run_dir: Path) -> Result:
    """One case's sides, interleaved; with `target` tiny_added_ms, the added time split by cause."""
    L.seed_everything(0, verbose=False)
    batches, attribute = case.first + case.steps + 1, case.target == "tiny_added_ms"
    trainer = ["trainer.max_epochs=1", f"trainer.limit_train_batches={batches}", "trainer.limit_val_batches=0"]
    data = [f"data.batch_size={case.batch}", "data.num_workers=0", f"data.train_size={case.batch * batches}"]
    rest = ["data.test_size=64", "protocol=baseline", "stats.enabled=false", "callbacks.progress_bar=tqdm"]
    cfg = bench_config(case.model, device, [*trainer, *data, *rest])
    with quiet():
        datamodule = build_datamodule(cfg)
        datamodule.train_transform = None
        datamodule.setup("fit")
        module = build_module(cfg, datamodule)
    bare_cfg = OmegaConf.merge(cfg, {"callbacks": {"progress_bar": "none"}})

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
    if attribute:
        with quiet():
            loss_only = LossOnlyClassifier(**module.hparams)
        loss_only.load_state_dict(module.state_dict())
        runs["lightning_bare"] = lambda: fit(module, bare=True)
        runs["lightning_loss_only"] = lambda: fit(loss_only, bare=True)
    samples = interleaved(runs, repeats=case.repeats, warmup=case.warmup)
    ms = {name: 1000 * median(s) for name, s in samples.items()}
    plain, fit_ms = ms["plain"], ms["lightning"]
    added, pct = fit_ms - plain, 100 * (fit_ms / plain - 1)
    extremes, spread = per_round(samples["lightning"], samples["plain"])
    where = f"{case.label}: {case.model}, batch {case.batch}, {case.steps} steps"
    rows: list[tuple] = [(f"{where}: {TIMED[name]}", f"{value:.2f}") for name, value in ms.items()]
    figures = {"ms_per_step": ms, "added_ms_per_step": added, "overhead_pct": pct, "per_round_ratio": extremes}
    figures["ratios"] = {f"{name}_over_plain": value / plain for name, value in ms.items() if name != "plain"}
    if attribute:
        figures["attribution_ms_per_step"] = parts = {
            "lightning_loop": ms["lightning_loss_only"] - plain,
            "module_step_logging_metrics": ms["lightning_bare"] - ms["lightning_loss_only"],
            "progress_bar_and_csv_logger": fit_ms - ms["lightning_bare"],
        }
        split = "loop {:+.2f}, module logging/metrics {:+.2f}, bar+logger {:+.2f}".format(*parts.values())
        rows.append((f"{case.label}: added ms per step, by cause", split))
        quantity, value, measured = "added ms per step", f"{added:+.2f} ms ({pct:+.1f}%)", added
    else:
        quantity, value, measured = "Trainer overhead", f"{pct:+.1f}% ({added:+.1f} ms)", pct
    rows.append((f"{case.label}: {quantity}", f"{value} {spread}", case.target, measured))
    return figures, rows


def run(cases: tuple[FrameworkCase, ...], device: torch.device) -> Result:
    figures, rows = {}, []
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="vit-bench-") as run_dir:
            figures[case.label], case_rows = measure(case, device, Path(run_dir))
        rows += case_rows
    ratios = {f"{label}_{k}": v for label, c in figures.items() for k, v in c["ratios"].items()}
    return {"cases": figures, "ratios": ratios}, rows
