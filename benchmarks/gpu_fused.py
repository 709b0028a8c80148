"""The GPU bench's `fused` section: packs of 1, 8 and 24 cells trained as ONE fused model (vit_locality/model/fused.py).

Each cell is an ordinary ViTClassifier with its own protocol (the 8 grid protocols, Modern first; 24 = 8 protocols x 3
seeds) and its own initialisation; the pack stacks their models into one FusedViT, compiled as the bench compiles a
model (static shapes: one graph per pack size), and trains them with one AdamW. A step is `pack_loss` (each cell's
augmentation on the device and mixing, reseeded as the lone cell is, then one forward) under the bench's autocast,
backward and the fused AdamW, on fixed synthetic CIFAR-100-shaped batches (uint8, 100 classes): the data cost apart
from the augmentation is excluded, as in the model section. The figures: img/s per cell and in all, the first steps'
seconds (the compile) and an eval forward of the largest pack, which the projection turns into the grid's wall time.
gpu.py imports this module when the section runs (it builds on gpu.py's settings and budget)."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.common import Report, autocast, self_timed
from benchmarks.gpu import Settings, clock, compile_text, compile_vit, config, graph_step, left_s, repeat
from benchmarks.pack import GRID
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.config.settings import RunSettings
from vit_locality.data.on_device import BatchAugment
from vit_locality.model.classifier import ViTClassifier
from vit_locality.model.fused import FusedViT, fused_adamw, pack_loss
from vit_locality.run.builders import build_datamodule, resolve_precision
from vit_locality.seeding import reseed_for_batch

PACKS = (1, 8, 24)  # one cell, one seed of the grid, the whole 8 x 3 grid
PROTOCOLS = GRID[::-1]  # Modern (AutoAugment, CutMix, ls 0.1) first: the one-cell pack is the projection's Modern cell


def cells_of(cfg: RunSettings, count: int, device: torch.device) -> list[ViTClassifier]:
    """Cell c: protocol PROTOCOLS[c % 8] on the device (as a cell on on-device data runs it), seed c // 8 (its
    draws), its model initialised from seed c (no two cells alike)."""
    data = build_datamodule(cfg)
    shape = (data.num_classes, data.image_size, list(data.mean), list(data.std), cfg.model.architecture())
    cells = []
    for index in range(count):
        protocol = TrainingProtocol(**{**cfg.protocol.model_dump(), **PROTOCOLS[index % len(PROTOCOLS)]})
        torch.manual_seed(index)
        augment = BatchAugment(data.image_size, protocol, grouping="select")
        cells.append(ViTClassifier(*shape, protocol, batch_augment=augment).to(device))
    return cells


def fused_model(cfg: RunSettings, cells: list[ViTClassifier], s: Settings) -> FusedViT:
    """The cells' models stacked into one FusedViT on their device, compiled as the bench compiles (static shapes)."""
    size, classes = cfg.data.image_size, cfg.data.num_classes
    model = FusedViT(len(cells), classes, size, **cfg.model.architecture()).to(cells[0].device)
    model.load_cells([cell.model.state_dict() for cell in cells])
    compile_vit(model, s, dynamic=False)
    return model


def pack_step(cfg: RunSettings, cells: list[ViTClassifier], model: FusedViT, batch: int) -> Callable[[], None]:
    """One training step of the pack on fixed uint8 batches: each cell reseeded per step as it is alone, the bench's
    autocast, the summed loss's backward, the fused AdamW."""
    device, count = cells[0].device, len(cells)
    images = torch.randint(0, 256, (count, batch, 3, cfg.data.image_size, cfg.data.image_size), device=device,
                           dtype=torch.uint8)  # fmt: skip
    labels = torch.randint(0, cfg.data.num_classes, (count, batch), device=device)
    smoothing = torch.tensor([cell.protocol.ls for cell in cells], device=device)
    optimizer = fused_adamw(model, cfg.optim.lr, cfg.optim.weight_decay, tuple(cfg.optim.betas))
    amp, steps = autocast(cfg), itertools.count()

    def step() -> None:
        index = next(steps)
        optimizer.zero_grad(set_to_none=True)
        with amp:
            losses = pack_loss(model, cells, images, labels, smoothing,
                               lambda cell: reseed_for_batch(cell // len(PROTOCOLS), 0, index, device))[0]  # fmt: skip
        losses.sum().backward()
        optimizer.step()

    return step


def timed(fn: Callable[[], None], count: int) -> Callable[[], float]:
    """`count` calls of `fn`, returning their seconds (on the device's clock: its queued work done)."""

    def run() -> float:
        started = clock()
        repeat(fn, count)()
        return clock() - started

    return run


def eval_rate(cfg: RunSettings, model: FusedViT, batch: int, rounds: int) -> float:
    """Eval forward img/s per cell of the pack (normalised float batches, no gradients, the bench's autocast)."""
    size, device = cfg.data.image_size, next(model.parameters()).device
    images = torch.randn(model.cells, batch, 3, size, size, device=device)

    def forward() -> None:
        with torch.no_grad(), autocast(cfg):
            model(images)

    forward()  # the eval graph's compile
    return batch * rounds / timed(forward, rounds)()


def measure(r: Report, cfg: RunSettings, s: Settings, cells: list[ViTClassifier]) -> dict[str, Any]:
    """A pack's figures: img/s per cell (median of `s.rounds` rounds of `s.steps` steps), the warm-up's seconds
    (the compile) and, for the grid's pack, its eval rate per cell."""
    model = fused_model(cfg, cells, s)
    step = pack_step(cfg, cells, model, s.fused_batch)
    step = graph_step(step) if s.backend == "inductor" and s.compile_mode == "reduce-overhead" else step
    compile_s = timed(step, s.warmup)()
    where = f"{s.model}, batch {s.fused_batch} per cell x {s.steps} steps, {cells[0].device.type}"
    times = self_timed("fused: train steps", where, {f"{len(cells)} cells": timed(step, s.steps)}, s.rounds)
    r.measurements += times.values()
    figures = {"img_s": s.fused_batch * s.steps / next(iter(times.values())).median, "compile_s": compile_s}
    if len(cells) == max(PACKS):
        figures["eval_img_s"] = eval_rate(cfg, model, s.fused_batch, s.rounds)
    return figures


def free(device: torch.device) -> None:
    """Give the pack's memory back (the packed-cell processes of the next section need it)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def rate_text(rate: float) -> str:
    """Whole images/s, with three figures below 100 (a smoke run's rates round to 0 otherwise)."""
    return f"{rate:.0f}" if rate >= 100 else f"{rate:.3g}"


def fused_rows(r: Report, cells: int, figures: dict[str, Any], smallest: float, s: Settings) -> None:
    """A pack's rows; `smallest`: the images/s in all of the smallest pack measured."""
    name = "1 cell (Modern) fused" if cells == 1 else f"{cells} cells fused"
    per_cell, every = figures["img_s"], figures["img_s"] * cells
    r.row(f"{name}: img/s per cell", rate_text(per_cell))
    r.row(f"{name}: img/s in all (cells x per cell)", f"{rate_text(every)} ({every / smallest:.2f}x the smallest pack)")
    r.row(f"{name}: first {s.warmup} steps (the compile), s", f"{figures['compile_s']:.1f}")
    if "eval_img_s" in figures:
        r.row(f"{name}: eval forward img/s per cell, batch {s.fused_batch} per cell", rate_text(figures["eval_img_s"]))


def settings_text(cfg: RunSettings, s: Settings, device: torch.device) -> str:
    """What every pack runs, for the settings row."""
    m, data, precision = cfg.model, cfg.data, resolve_precision(cfg.trainer.precision, cfg.trainer.accelerator)
    return (
        f"{s.model} (depth {m.depth}, dim {m.dim}, {m.heads} heads), {data.image_size} px, {data.num_classes} classes, "
        f"batch {s.fused_batch} per cell, {device.type}, {precision}, {compile_text(s)}, static shapes"
    )


def fused_section(r: Report, s: Settings, device: torch.device, state: dict[str, Any]) -> None:
    """Packs of PACKS cells, smallest first; a pack is skipped when less time is left than the last pack's compile
    and its steps scaled by the cells, and a pack that does not fit the device's memory is a row (the larger ones are
    not tried)."""
    cfg = config(s, device, "modern", True)
    r.row("fused packs' settings", settings_text(cfg, s, device))
    cells = cells_of(cfg, max(PACKS), device)
    measured: dict[int, dict[str, Any]] = {}
    last: tuple[int, float, float] | None = None  # cells, compile s, the rest s
    try:
        for count in PACKS:
            need = last[1] + last[2] * count / last[0] if last else 0.0
            if left_s(state) < need:
                r.row(f"{count} cells fused", f"skipped: time budget ({left_s(state):.0f} s left, about "
                      f"{need:.0f} s needed)")  # fmt: skip
                continue
            began = clock()
            try:
                measured[count] = measure(r, cfg, s, cells[:count])
            except torch.cuda.OutOfMemoryError:
                r.row(f"{count} cells fused", f"does not fit the device's memory (batch {s.fused_batch} per cell); "
                      "larger packs not tried")  # fmt: skip
                break
            finally:
                free(device)
            last = (count, measured[count]["compile_s"], clock() - began - measured[count]["compile_s"])
            fused_rows(r, count, measured[count], measured[min(measured)]["img_s"] * min(measured), s)
    finally:
        state["fused"] = measured
        del cells
        free(device)
