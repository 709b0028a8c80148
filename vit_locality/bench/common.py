"""What the sections share: the config composed as `train.py` composes it, the ViT it names, a training step in the
Trainer's precision, and timing that interleaves candidates (A B, then B A, ...) after a warm-up, so that drift in
the machine's load hits all alike: the ratio of medians is steadier than either figure, and the spread of the
per-round ratios says how far the drift moved it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from torch import Tensor, nn
from torch.optim import Optimizer

from vit_locality.config.resolvers import register_resolvers
from vit_locality.config.schema import register_schemas
from vit_locality.model.classifier import adamw_with_decay_groups
from vit_locality.model.vit import VisionTransformer
from vit_locality.paths import CONF_DIR
from vit_locality.run.builders import resolve_precision, uses_cuda

# What a section returns: its figures for the JSON record, and its table rows: (quantity, value) or, for a figure
# with a target, (quantity, value, target name in suite.TARGETS, the measured figure).
Result = tuple[dict[str, Any], list[tuple]]


def bench_config(model: str, device: torch.device, overrides: Sequence[str] = ()) -> DictConfig:
    """`python train.py data=synthetic data.num_classes=100 model=<model> <overrides>` on `device`, composed
    without running Hydra's app: synthetic data (nothing to download) and the paper's 100-class head."""
    trainer = ["trainer=cpu"] if device.type == "cpu" else ["trainer=default", "trainer.accelerator=gpu"]
    register_resolvers()
    register_schemas()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        base = ["data=synthetic", "data.num_classes=100", f"model={model}", *trainer]
        return compose(config_name="train", overrides=[*base, *overrides])


def build_vit(cfg: DictConfig) -> VisionTransformer:
    m = cfg.model
    size, classes = cfg.data.image_size, cfg.data.num_classes
    return VisionTransformer(classes, size, depth=m.depth, dim=m.dim, heads=m.heads, mlp_ratio=m.mlp_ratio)


def autocast(cfg: DictConfig) -> torch.autocast:
    """The precision `build_trainer` gives this config's Trainer, for a hand-written step (bf16-mixed or fp32)."""
    t = cfg.trainer
    bf16 = resolve_precision(t.precision, t.accelerator) == "bf16-mixed"
    return torch.autocast("cuda" if uses_cuda(t.accelerator) else "cpu", dtype=torch.bfloat16, enabled=bf16)


def train_step(model: nn.Module, cfg: DictConfig, batch: int, device: torch.device) -> Callable[[], None]:
    """Forward + cross-entropy + backward + the project's AdamW on a fixed random batch (data cost excluded)."""
    model.to(device).train()
    optimizer = adamw_with_decay_groups(model, cfg.optim.lr, cfg.optim.weight_decay, tuple(cfg.optim.betas))
    generator = torch.Generator().manual_seed(0)
    size = cfg.data.image_size
    images = torch.randn(batch, 3, size, size, generator=generator).to(device)
    labels = torch.randint(cfg.data.num_classes, (batch,), generator=generator).to(device)
    return partial(optimizer_step, model, optimizer, autocast(cfg), images, labels)


def optimizer_step(model: nn.Module, optimizer: Optimizer, amp: torch.autocast, images: Tensor, labels: Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)  # before the forward: last step's gradients freed, as Lightning does
    with amp:
        loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so a clock read after it measures the work and not the launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, threads: int | None = None) -> Callable[[], float]:
    """`fn` as a run that returns its own wall time in seconds, on `threads` intra-op threads (None: as set)."""

    def run() -> float:
        previous = torch.get_num_threads()
        torch.set_num_threads(threads or previous)
        try:
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            return time.perf_counter() - start
        finally:
            torch.set_num_threads(previous)

    return run


def interleaved(runs: dict[str, Callable[[], float]], repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Every run `warmup` times untimed, then `repeats` rounds in alternating order; each run's samples in the
    order taken. A run returns the seconds it measured itself, so it may leave its own set-up out."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats}: at least one timed round is needed")
    names = list(runs)
    for _ in range(warmup):
        for name in names:
            runs[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(repeats):
        for name in names if round_index % 2 == 0 else reversed(names):
            samples[name].append(runs[name]())
    return samples


def per_round(numerator: list[float], denominator: list[float]) -> tuple[list[float], str]:
    """The extremes of the ratios of samples taken in the same round, and as a row's text."""
    ratios = [a / b for a, b in zip(numerator, denominator, strict=True)]
    extremes = [min(ratios), max(ratios)]
    return extremes, "(per-round ratio {:.3f}..{:.3f})".format(*extremes)


def section_parser(sections: Sequence[str]) -> Callable[[str], list[str]]:
    """`--sections a,b`: the named sections in the suite's own order; an unknown name is an argparse error."""

    def parse(text: str) -> list[str]:
        chosen = [s.strip() for s in text.split(",") if s.strip()]
        unknown = [s for s in chosen if s not in sections]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown sections {unknown}: choose from {', '.join(sections)}")
        return [s for s in sections if s in chosen]

    return parse
