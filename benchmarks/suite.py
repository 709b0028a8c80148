"""The benchmark suite, every section side by side in one process (`python -m benchmarks`):

- model: our ViT against timm's of the same shape and parameter count (same arithmetic: a gap is our code).
- framework: what `Trainer.fit`, as a user runs it, adds per step over a plain PyTorch loop on the same module,
  optimizer, schedule and in-memory batches; on the tiny model the added time split by cause.
- data: can one CPU core of per-sample augmentation keep one core of model training fed (headroom)?
- stats: one attention-statistics probe pass in training steps and in an epoch.
- flops: FLOPs per image from the model's shapes, checked against torch's FlopCounterMode; a multiply-add is 2 FLOPs,
  norms, GELU, softmax and residual adds (memory-bound, under 1% of the arithmetic) are left out.
- host: host time per step with a near-zero model: the on-device data path, a plain loop and the cell's
  `Trainer.fit` (host_time.py).

The full settings end within about 5 minutes on a 2-core CPU; `--quick` runs every section on the tiny model with a
handful of images (for tests). The targets are set for the CPU: on a GPU they are figures to read, not verdicts.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import warnings
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.common import (
    Report,
    autocast,
    bench_config,
    build_vit,
    optimizer_step,
    ratio_text,
    self_timed,
    side_by_side,
    train_step,
)
from benchmarks.host_time import host
from benchmarks.pack import pack
from vit_locality.attention.probe import probe_attention
from vit_locality.augment.mixing import build_train_transform
from vit_locality.catalog import GRID_SIZE
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.data import UInt8ImageDataset
from vit_locality.model.classifier import ViTClassifier, adamw_with_decay_groups, warmup_cosine_schedule
from vit_locality.model.vit import VisionTransformer, count_parameters
from vit_locality.run.builders import build_datamodule, build_loggers, build_module, build_trainer

MODELS = ("vit_paper", "vit_tiny")  # full, quick
SETTINGS = {  # section: {argument: (full, quick)}
    "model": {"model": MODELS, "batch": (128, 16), "rounds": (5, 2)},
    "framework": {"cases": ((("tiny", "vit_tiny", 32, 3, 30, 5), ("paper", "vit_paper", 128, 2, 5, 3)),
                            (("tiny", "vit_tiny", 16, 1, 3, 2), ("paper", "vit_tiny", 16, 1, 3, 2)))},
    "data": {"model": MODELS, "images": (2048, 64), "loader_images": (2560, 128), "batch": (128, 32),
             "model_batch": (128, 16), "rounds": (3, 2)},
    "stats": {"model": MODELS, "batch": (128, 16), "probe_size": (512, 32), "rounds": (3, 2)},
    "flops": {"model": MODELS},
    "host": {"steps": (150, 4), "rounds": (7, 2)},
    "pack": {"sizes": ((1, 2, 4, 8), (1, 2)), "repeats": (30, 2), "demo_steps": (5, 1), "demo_batch": (32, 8)},
}  # fmt: skip


def model_vs_timm(report: Report, device: torch.device, model: str, batch: int, rounds: int) -> None:
    """Training images/s of ours and of timm's ViT: CLS pooled, pre-norm blocks, qkv bias, no dropout."""
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    cfg = bench_config(model, device)
    torch.manual_seed(0)
    m, size = cfg.model, cfg.data.image_size
    shape = dict(embed_dim=m.dim, depth=m.depth, num_heads=m.heads, mlp_ratio=m.mlp_ratio, patch_size=size // GRID_SIZE)
    layout = dict(global_pool="token", qkv_bias=True, class_token=True, pre_norm=False)
    dropout = dict.fromkeys(("drop_rate", "pos_drop_rate", "attn_drop_rate", "proj_drop_rate", "drop_path_rate"), 0.0)
    ours = build_vit(cfg)
    reference = TimmViT(img_size=size, num_classes=cfg.data.num_classes, **shape, **layout, **dropout)
    params = count_parameters(ours)
    if count_parameters(reference) != params:
        raise AssertionError(f"timm's ViT has {count_parameters(reference):,} parameters, ours {params:,}")
    sides = {name: train_step(net, cfg, batch, device) for name, net in (("ours", ours), ("timm", reference))}
    times = side_by_side("train step: ours vs timm", f"{model} ({params:,} params), batch {batch}", sides, rounds)
    report.measurements += times.values()
    img_s = {name: report.figure(f"{name}_img_s", batch / t.median) for name, t in times.items()}
    ratio = report.figure("ours_over_timm", img_s["ours"] / img_s["timm"])
    report.row(f"ours: train step img/s, {model} ({params:,} params), batch {batch}", f"{img_s['ours']:.1f}")
    report.row("timm VisionTransformer, same config: train step img/s", f"{img_s['timm']:.1f}")
    report.row("ours / timm (images/s)", ratio_text(times["timm"], times["ours"]), "ours_over_timm", ratio)


class LossOnlyClassifier(ViTClassifier):
    """The module with a training step that returns the loss alone (no logging, no metrics)."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.training_loss(*batch)[0]

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        pass


class StepClock(Callback):
    """Reads the clock at the start of batches `first` and `first + steps` of the first epoch, so construction,
    warm-up steps and the epoch's end are not timed."""

    def __init__(self, first: int, steps: int) -> None:
        self.marks, self.times = (first, first + steps), {}

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, idx: int) -> None:
        if trainer.current_epoch == 0:
            self.mark(idx)

    def mark(self, idx: int) -> bool:
        """Read the clock if batch `idx` opens or closes the window; whether the window has closed."""
        if idx in self.marks:
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


def framework(report: Report, device: torch.device, cases: tuple[tuple, ...]) -> None:
    """Per case (label, model, batch, first, steps, rounds): the plain loop against `Trainer.fit` as a user runs it
    (`build_trainer`, a tqdm bar into /dev/null, the CSV log of `build_loggers`); on "tiny" also a bare Trainer (no
    bar, no logger) and a bare one with the loss-only module, which split the added time by cause."""
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="vit-bench-") as run_dir:
            framework_case(report, device, *case, run_dir=Path(run_dir))


def framework_case(report: Report, device: torch.device, label: str, model: str, batch: int, first: int, steps: int,
                   rounds: int, run_dir: Path) -> None:  # fmt: skip
    batches = first + steps + 1
    overrides = [f"trainer.limit_train_batches={batches}", "trainer.max_epochs=1", "trainer.limit_val_batches=0",
                 f"data.batch_size={batch}", "data.num_workers=0", f"data.train_size={batch * batches}",
                 "data.test_size=64", "protocol=baseline", "stats.enabled=false",
                 "callbacks.progress_bar=tqdm"]  # fmt: skip
    cfg = bench_config(model, device, overrides)
    bare_cfg = bench_config(model, device, [*overrides, "callbacks.progress_bar=none"])
    L.seed_everything(0, verbose=False)
    with quiet():
        datamodule = build_datamodule(cfg)
        datamodule.train_transform = None  # in-memory batches: the data section times the pipelines
        datamodule.setup("fit")
        module = build_module(cfg, datamodule)
        loss_only = LossOnlyClassifier(**module.hparams)
    loss_only.load_state_dict(module.state_dict())

    def plain_loop() -> float:
        """The loop a researcher writes by hand: the project's AdamW and warm-up + cosine schedule."""
        clock, optim = StepClock(first, steps), cfg.optim
        module.to(device).train()
        optimizer = adamw_with_decay_groups(module.model, optim.lr, optim.weight_decay, tuple(optim.betas))
        schedule = warmup_cosine_schedule(optimizer, batches, 1, optim.warmup_epochs, optim.min_lr_ratio)
        for idx, (images, labels) in enumerate(datamodule.train_dataloader()):
            if clock.mark(idx):
                break
            optimizer_step(module, optimizer, autocast(cfg), images.to(device), labels.to(device))
            schedule.step()
        return clock.per_step()

    def fit(chosen: ViTClassifier, bare: bool) -> float:
        clock = StepClock(first, steps)
        with quiet():
            loggers = [] if bare else build_loggers(cfg, run_dir)
            trainer = build_trainer(bare_cfg if bare else cfg, run_dir, loggers, [clock], sanity_check=False)
            trainer.fit(chosen, datamodule=datamodule)
        return clock.per_step()

    fit_ = "Trainer.fit"
    sides = {"plain loop": plain_loop, fit_: partial(fit, module, False)}
    if label == "tiny":
        sides |= {
            f"{fit_}, bare": partial(fit, module, True),
            f"{fit_}, bare, loss only": partial(fit, loss_only, True),
        }
    warmup = 1 if label == "tiny" else 0  # one untimed round of each side where a round costs seconds, not minutes
    times = self_timed("framework: per step", f"{label}: {model}, batch {batch}", sides, rounds, warmup)
    report.measurements += times.values()
    ms = {name: 1000 * t.median for name, t in times.items()}
    for name, value in ms.items():
        report.row(f"{label}: {model}, batch {batch}, {steps} steps: {name} ms/step", f"{value:.2f}")
    added, pct = ms[fit_] - ms["plain loop"], 100 * (ms[fit_] / ms["plain loop"] - 1)
    spread = ratio_text(times[fit_], times["plain loop"]).split(" ", 1)[1]
    report.figure(f"{label}_fit_over_plain", ms[fit_] / ms["plain loop"])
    if label == "tiny":
        loss_only_ms, bare_ms = ms[f"{fit_}, bare, loss only"], ms[f"{fit_}, bare"]
        parts = (loss_only_ms - ms["plain loop"], bare_ms - loss_only_ms, ms[fit_] - bare_ms)
        report.row("tiny: added ms per step, by cause",
                   "loop {:+.2f}, module logging/metrics {:+.2f}, bar+logger {:+.2f}".format(*parts))  # fmt: skip
        report.row("tiny: added ms per step", f"{added:+.2f} ms ({pct:+.1f}%) {spread}", "tiny_added_ms", added)
    else:
        report.row(f"{label}: Trainer overhead", f"{pct:+.1f}% ({added:+.1f} ms) {spread}", "paper_overhead_pct", pct)


def data(report: Report, device: torch.device, model: str, images: int, loader_images: int, batch: int,
         model_batch: int, rounds: int) -> None:  # fmt: skip
    """Baseline (crop + flip) and Modern (+ AutoAugment) per-sample pipelines on one thread, as one loader worker
    runs them; the Modern train loader at 1 and 2 workers; one core of model training (the device's, on a GPU).
    Headroom = pipeline images/s / model images/s."""
    torch.manual_seed(0)
    sizes = [f"data.train_size={loader_images}", "data.test_size=64", f"data.batch_size={batch}"]
    cfg = bench_config(model, device, ["protocol=modern", *sizes])
    datamodule = build_datamodule(cfg)
    datamodule.setup("fit")
    policy = datamodule.batch_augment.policy
    arrays = datamodule.arrays.train_images[:images], datamodule.arrays.train_labels[:images]
    pipelines = {"baseline": build_train_transform(cfg.data.image_size, TrainingProtocol()),
                 "modern": datamodule.train_transform}  # fmt: skip
    sides = {name: partial(deque, DataLoader(UInt8ImageDataset(*arrays, t), batch), maxlen=0)
             for name, t in pipelines.items()}  # fmt: skip
    sides["model"] = train_step(build_vit(cfg), cfg, model_batch, device)
    loaders = {}
    for workers in (1, 2):
        datamodule.num_workers = workers
        loaders[workers] = datamodule.train_dataloader()  # a pass drains one epoch into a deque that keeps nothing
        sides[f"loader, {workers} worker{'s' * (workers > 1)}"] = partial(deque, loaders[workers], maxlen=0)
    one_core = {"baseline": 1, "modern": 1} | ({"model": 1} if device.type == "cpu" else {})
    times = side_by_side("data: one pass", model, sides, rounds, threads=one_core)
    del sides, loaders  # shuts the persistent workers down before the next section
    report.measurements += times.values()
    epoch = loader_images // batch * batch
    counts = {"baseline": len(arrays[1]), "modern": len(arrays[1]), "model": model_batch}
    img_s = {name: counts.get(name, epoch) / t.median for name, t in times.items()}
    where = f"{model}, batch {model_batch}, {'1 thread' if device.type == 'cpu' else 'on the device'}"
    report.row("Baseline per-sample pipeline (crop+flip), one core: img/s", f"{img_s['baseline']:.0f}")
    report.row(f"Modern per-sample pipeline (+AutoAugment {policy}), one core: img/s", f"{img_s['modern']:.0f}")
    report.row("DataModule train loader (Modern), 1 worker: img/s", f"{img_s['loader, 1 worker']:.0f}")
    report.row("DataModule train loader (Modern), 2 workers: img/s", f"{img_s['loader, 2 workers']:.0f}")
    report.row(f"model training img/s, {where}", f"{img_s['model']:.1f}")
    for name in pipelines:
        headroom = report.figure(f"headroom_{name}", img_s[name] / img_s["model"])
        report.row(f"headroom, {name.capitalize()} (pipeline / model, one core each)", f"{headroom:.1f}x",
                   "headroom", headroom)  # fmt: skip


def stats(report: Report, device: torch.device, model: str, batch: int, probe_size: int, rounds: int,
          train_images: int = 50_000) -> None:  # fmt: skip
    """A training step (fused attention, the Trainer's precision) against a probe pass as the statistics callback
    runs it (explicit fp32 attention, per-head MAD and entropy, no gradients; its CSV write and log not timed)."""
    cfg = bench_config(model, device, [f"stats.probe_size={probe_size}"])
    torch.manual_seed(0)
    vit = build_vit(cfg)
    size = cfg.data.image_size
    probe = torch.randn(probe_size, 3, size, size, generator=torch.Generator().manual_seed(1)).to(device)
    settings = cfg.stats
    sides = {"train step": train_step(vit, cfg, batch, device), "probe": partial(probe_attention, vit, probe, settings)}
    times = side_by_side("stats: probe vs training step", f"{model}, batch {batch}", sides, rounds)
    report.measurements += times.values()
    step_s, probe_s = times["train step"].median, report.figure("probe_s", times["probe"].median)
    steps_per_epoch = train_images // batch
    in_steps = report.figure("probe_over_step", probe_s / step_s)
    pct = 100 * report.figure("probe_over_epoch", probe_s / (step_s * steps_per_epoch))
    report.row(f"train step ms, {model}, batch {batch}", f"{1000 * step_s:.1f}")
    report.row(f"probe pass ms ({probe_size} images, explicit fp32)", f"{1000 * probe_s:.1f}")
    report.row("probe / training step", f"{in_steps:.2f} steps", "probe_in_steps", in_steps)
    report.row(f"probe / epoch of {train_images:,} images ({steps_per_epoch} steps)", f"{pct:.3f}%",
               "probe_pct_of_epoch", pct)  # fmt: skip


def linear_flops(tokens: int, in_features: int, out_features: int) -> int:
    return 2 * tokens * in_features * out_features


def model_flops(model: VisionTransformer) -> dict[str, int]:
    """Forward FLOPs per image by term, with the shapes read off a built model; their sum; a training step as 3 x
    the forward (the backward computes a gradient for the input and one for the weights of every matmul)."""
    grid, conv, depth, tokens = model.grid_size, model.patch_embed, len(model.blocks), model.num_tokens
    dim, hidden = conv.out_channels, model.blocks[0].mlp[0].out_features
    terms = {
        "patch_embed": linear_flops(grid * grid, conv.in_channels * model.patch_size**2, dim),  # one matmul a patch
        "qkv": depth * linear_flops(tokens, dim, 3 * dim),
        "attention": depth * 2 * (2 * tokens * tokens * dim),  # scores QK^T and weights @ V
        "proj": depth * linear_flops(tokens, dim, dim),
        "mlp": depth * (linear_flops(tokens, dim, hidden) + linear_flops(tokens, hidden, dim)),
        "head": linear_flops(1, dim, model.head.out_features),  # the CLS token only
    }
    forward = sum(terms.values())
    return {**terms, "forward": forward, "train_step": 3 * forward}


def counted_flops(model: VisionTransformer, batch: int = 2, explicit: bool = False, backward: bool = False) -> float:
    """FlopCounterMode's count per image; `explicit`: attention by plain matmuls, which the counter always sees."""
    size = model.grid_size * model.patch_size
    images = torch.randn(batch, 3, size, size, device=next(model.parameters()).device)
    with FlopCounterMode(display=False) as counter:
        logits = model.forward_with_attention(images)[0] if explicit else model(images)
        if backward:
            logits.sum().backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch


def flops(report: Report, device: torch.device, model: str) -> None:
    """Counted on the CPU; the model section's images/s (when it ran) gives the FLOP rate a training step reached."""
    vit = build_vit(bench_config(model, torch.device("cpu")))
    analytic = model_flops(vit)
    forward, train = analytic["forward"], analytic["train_step"]
    agree = report.figure("explicit_over_analytic", counted_flops(vit, explicit=True) / forward)
    fused = report.figure("fused_over_analytic", counted_flops(vit) / forward)
    gap = f"gap {100 * (1 - fused):.1f}% = attention matmuls: the counter has no formula for CPU's fused SDPA kernel"
    report.row("analytic forward GFLOP/image", f"{forward / 1e9:.4f}")
    report.row("analytic train step GFLOP/image (3 x forward)", f"{train / 1e9:.4f}")
    report.row("attention matmuls / forward", f"{100 * analytic['attention'] / forward:.1f}%")
    report.row("FlopCounterMode forward (explicit attention) / analytic", f"{agree:.4f}", "flops_apart_pct",
               100 * abs(agree - 1))  # fmt: skip
    report.row("FlopCounterMode forward (fused SDPA) / analytic", f"{fused:.4f} ({gap})")
    report.row("FlopCounterMode train step GFLOP/image",
               f"{counted_flops(vit, explicit=True, backward=True) / 1e9:.4f}")  # fmt: skip
    if "model.ours_img_s" in report.figures:
        achieved = report.figure("achieved_gflop_s", train * report.figures["model.ours_img_s"] / 1e9)
        report.row("achieved GFLOP/s in the measured train step", f"{achieved:.1f}")


SECTIONS = {
    "model": model_vs_timm,
    "framework": framework,
    "data": data,
    "stats": stats,
    "flops": flops,
    "host": host,
    "pack": pack,
}
