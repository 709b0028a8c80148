"""Framework section: what `Trainer.fit`, as a user runs it, adds per step over a plain PyTorch loop.

Both sides train the project's own ViTClassifier (uint8 batch -> normalise -> ViT -> cross-entropy -> AdamW with
the warm-up + cosine schedule stepped per batch) on the same synthetic in-memory data, batch and DataLoader
(num_workers=0, no per-sample transform: the loader then costs the same on both sides and is measured in the
data section). The Lightning side is built by the project's own pipeline functions from the composed Hydra
config: `build_datamodule`, `build_module`, `build_loggers` (CSV), `build_callbacks` (tqdm progress bar; the
attention-statistics callback is off, it has its own section), the pipeline's checkpoint and interrupt
callbacks, and `build_trainer` (precision `auto`, `log_every_n_steps` 50). The bar's output goes to /dev/null
so it does not mix into the bench's table; it is still drawn.

On the tiny model two more Trainers are timed, to attribute the overhead: "bare" (no bar, no logger, no
checkpoint callback; our module) and "loss only" (bare, and a training step that returns the loss alone: no
accuracy metric, no `self.log`, no finiteness check). Their differences split the added time into Lightning's
loop, our module's per-step logging and metrics, and the bar + CSV logger.

Timing: a clock reads the time at the start of batch `first` and of batch `first + steps` (after the batch is
fetched, before the step), on both sides, and divides by `steps`. Trainer construction, the first `first`
steps (warm-up), and the epoch end (validation, checkpoint) lie outside the window; each round builds a new
Trainer and a new optimizer on both sides, and the two sides alternate round by round.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig

from ..module import ViTClassifier, warmup_cosine
from .common import ModelConfig, autocast, compose_config
from .timing import interleaved, paired_ratios, sync


class LossOnlyClassifier(ViTClassifier):
    """Our module with a training step that only returns the loss: no metric, no `self.log`, no finiteness
    check. Separates Lightning's own per-step cost from what our module does in every step."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.training_loss(*batch)[0]

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        pass


class StepClock(Callback):
    """Reads the clock at the start of two batches of the first epoch."""

    def __init__(self, first: int, steps: int, device: torch.device) -> None:
        self.marks = (first, first + steps)
        self.steps = steps
        self.device = device
        self.times: dict[int, float] = {}

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        if idx in self.marks and trainer.current_epoch == 0:
            sync(self.device)
            self.times[idx] = time.perf_counter()

    def per_step(self) -> float:
        first, last = self.marks
        if first not in self.times or last not in self.times:
            raise RuntimeError(f"the fit ended before batch {last}: raise trainer.limit_train_batches")
        return (self.times[last] - self.times[first]) / self.steps


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Lightning's info lines and its warnings about small data and no workers are expected here; the tqdm bar
    (which Lightning draws on stdout) still renders, into /dev/null."""
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


def bench_config(config: ModelConfig, batch: int, first: int, steps: int, device: torch.device) -> DictConfig:
    trainer = ["trainer=cpu"] if device.type == "cpu" else ["trainer=default", "trainer.accelerator=gpu"]
    return compose_config(
        [
            "data=synthetic",
            f"model={config.name}",
            "protocol=baseline",
            *trainer,
            "trainer.max_epochs=1",
            f"trainer.limit_train_batches={first + steps + 1}",
            "trainer.limit_val_batches=0",
            f"data.batch_size={batch}",
            "data.num_workers=0",
            f"data.train_size={batch * (first + steps + 1)}",
            "data.test_size=64",
            f"data.num_classes={config.num_classes}",
            "stats.enabled=false",
            "callbacks.progress_bar=tqdm",
        ]
    )


def plain_optimizer(module: ViTClassifier, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
    """The optimizer and schedule of `ViTClassifier.configure_optimizers`, built without a Trainer."""
    hp = module.hparams
    named = [(n, p) for n, p in module.model.named_parameters() if p.requires_grad]
    exempt = {"cls_token", "pos_embed"}
    groups = [
        {"params": [p for n, p in named if p.ndim >= 2 and n not in exempt], "weight_decay": hp.weight_decay},
        {"params": [p for n, p in named if p.ndim < 2 or n in exempt], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=hp.lr, betas=tuple(hp.betas))
    warmup = max(1, total_steps // 4)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, warmup, total_steps, hp.min_lr_ratio)
    )
    return optimizer, schedule


def plain_loop(module: ViTClassifier, datamodule: Any, first: int, steps: int, device: torch.device) -> float:
    """The loop a researcher writes by hand; returns seconds per step over the same window as `StepClock`."""
    module.to(device).train()
    optimizer, schedule = plain_optimizer(module, first + steps + 1)
    times: dict[int, float] = {}
    for idx, (images, labels) in enumerate(datamodule.train_dataloader()):
        if idx in (first, first + steps):
            sync(device)
            times[idx] = time.perf_counter()
            if idx == first + steps:
                break
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with autocast(device):
            loss = F.cross_entropy(module(images), labels)
        loss.backward()
        optimizer.step()
        schedule.step()
    return (times[first + steps] - times[first]) / steps


def lightning_fit(
    cfg: DictConfig,
    module: ViTClassifier,
    datamodule: Any,
    run_dir: Path,
    first: int,
    steps: int,
    device: torch.device,
    as_user: bool = True,
) -> float:
    """One `Trainer.fit` as `pipeline.run_cell` builds it (`as_user`), or bare: no bar, no logger, no checkpoint."""
    from callbacks import build_callbacks

    from ..pipeline import (
        INTERRUPTED_CHECKPOINT,
        InterruptCheckpoint,
        build_loggers,
        build_trainer,
        checkpoint_callback,
    )

    clock = StepClock(first, steps, device)
    if as_user:
        loggers = build_loggers(cfg, run_dir)
        chosen = [*build_callbacks(cfg, run_dir), InterruptCheckpoint(run_dir / INTERRUPTED_CHECKPOINT)]
        chosen += [checkpoint_callback(cfg, run_dir), clock]
    else:
        loggers, chosen = [], [clock]
        cfg = copy.deepcopy(cfg)
        cfg.callbacks.progress_bar = "none"
    with quiet():
        trainer = build_trainer(cfg, run_dir, loggers, chosen, sanity_check=False)
        trainer.fit(module, datamodule=datamodule)
    return clock.per_step()


def measure(
    config: ModelConfig,
    batch: int,
    first: int,
    steps: int,
    repeats: int,
    warmup: int,
    device: torch.device,
    bare: bool,
) -> dict[str, Any]:
    from ..pipeline import build_datamodule, build_module

    L.seed_everything(0, verbose=False)
    cfg = bench_config(config, batch, first, steps, device)
    with quiet():
        datamodule, _ = build_datamodule(cfg)
        datamodule.train_transform = None
        datamodule.prepare_data()
        datamodule.setup("fit")
        module = build_module(cfg, datamodule)
    with tempfile.TemporaryDirectory(prefix="vit-bench-") as tmp:
        run_dir = Path(tmp)
        runs: dict[str, Callable[[], float]] = {
            "plain": lambda: plain_loop(module, datamodule, first, steps, device),
            "lightning": lambda: lightning_fit(cfg, module, datamodule, run_dir / "user", first, steps, device),
        }
        if bare:
            with quiet():
                loss_only = LossOnlyClassifier(**module.hparams)
            loss_only.load_state_dict(module.state_dict())
            runs["lightning_bare"] = lambda: lightning_fit(
                cfg, module, datamodule, run_dir / "bare", first, steps, device, as_user=False
            )
            runs["lightning_loss_only"] = lambda: lightning_fit(
                cfg, loss_only, datamodule, run_dir / "loss_only", first, steps, device, as_user=False
            )
        timings = interleaved(runs, repeats=repeats, warmup=warmup)
    plain_s, fit_s = timings["plain"].median, timings["lightning"].median
    paired = paired_ratios(timings["lightning"], timings["plain"])
    result: dict[str, Any] = {
        "model": config.as_dict(),
        "batch": batch,
        "warmup_steps": first,
        "timed_steps": steps,
        "repeats": repeats,
        "plain_ms_per_step": 1000 * plain_s,
        "lightning_ms_per_step": 1000 * fit_s,
        "added_ms_per_step": 1000 * (fit_s - plain_s),
        "overhead_pct": 100 * (fit_s / plain_s - 1),
        "paired_ratio_min": min(paired),
        "paired_ratio_max": max(paired),
        "paired_ratio_median": statistics.median(paired),
        "ratios": {"lightning_over_plain": fit_s / plain_s},
        "samples_ms": {name: [1000 * s for s in t.samples] for name, t in timings.items()},
    }
    if bare:
        bare_s, loss_only_s = timings["lightning_bare"].median, timings["lightning_loss_only"].median
        result["lightning_bare_ms_per_step"] = 1000 * bare_s
        result["lightning_loss_only_ms_per_step"] = 1000 * loss_only_s
        result["attribution_ms_per_step"] = {
            "lightning_loop": 1000 * (loss_only_s - plain_s),
            "module_step_logging_metrics": 1000 * (bare_s - loss_only_s),
            "progress_bar_and_csv_logger": 1000 * (fit_s - bare_s),
        }
        result["ratios"]["lightning_bare_over_plain"] = bare_s / plain_s
        result["ratios"]["lightning_loss_only_over_plain"] = loss_only_s / plain_s
    return result
