"""Cells trained as one pack (vit_locality/model/fused.py) against the same cells one after another, per cell-step.

Two measures, side by side in one run, on a near-zero model (`TINY_ARCH`, 8 x 8 px) where the arithmetic is negligible
and what is left is the host's dispatch, what a GPU's host pays per kernel:
- aten ops dispatched per cell-step (benchmarks.host_work.DispatchCount), deterministic;
- host time per cell-step (median wall time of a step / cells).
A step is the cell's whole training step: its protocol's draws (augmentation on the device, CutMix), the model's
forward and backward and AdamW (trainer.gradient_clip_val is null by default: no clipping). Then the demo's model
at the demo's batch: wall time of the 8 grid cells' steps packed against one after another (training steps only:
no loader, probe or Lightning)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from benchmarks.common import Report
from benchmarks.host_work import DispatchCount
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.data.on_device import BatchAugment
from vit_locality.model.classifier import ViTClassifier, adamw_with_decay_groups
from vit_locality.model.fused import FusedViT, fused_adamw, pack_loss
from vit_locality.seeding import reseed_for_batch

TINY_ARCH = {"depth": 2, "dim": 16, "heads": 2, "mlp_ratio": 2.0}
DEMO_ARCH = {"depth": 4, "dim": 64, "heads": 4, "mlp_ratio": 2.0}  # conf/model/vit_tiny_sincos.yaml, the demo's
GRID = [{"autoaug": aa, "cutmix": cm, "ls": ls} for aa in (False, True) for cm in (False, True) for ls in (0.0, 0.1)]
CLASSES, MEAN, STD = 10, [0.5] * 3, [0.25] * 3


def cells_of(protocols: Sequence[dict], size: int, arch: dict) -> list[ViTClassifier]:
    cells = []
    for seed, protocol in enumerate(protocols):
        trained = TrainingProtocol(**{"policy": "cifar10", **protocol})
        torch.manual_seed(seed)
        augment = BatchAugment(size, trained, grouping="select")
        cells.append(ViTClassifier(CLASSES, size, MEAN, STD, arch, trained, batch_augment=augment))
    return cells


def lone_steps(protocols: Sequence[dict], size: int, batch: int, arch: dict) -> Callable[[int], None]:
    """`step -> None`: one training step of every cell, one cell after another."""
    cells = cells_of(protocols, size, arch)
    optimizers = [adamw_with_decay_groups(cell.model, 1e-3, 0.05, (0.9, 0.999)) for cell in cells]
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8)
    labels = torch.randint(0, CLASSES, (batch,))

    def step(index: int) -> None:
        for seed, (cell, optimizer) in enumerate(zip(cells, optimizers, strict=True)):
            reseed_for_batch(seed, 0, index, torch.device("cpu"))
            loss = cell.augmented_loss(images, labels)[0]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return step


def pack_steps(protocols: Sequence[dict], size: int, batch: int, arch: dict) -> Callable[[int], None]:
    """`step -> None`: one training step of all cells as one pack."""
    cells = cells_of(protocols, size, arch)
    model = FusedViT(len(cells), CLASSES, size, **arch)
    model.load_cells([cell.model.state_dict() for cell in cells])
    optimizer = fused_adamw(model, 1e-3, 0.05, (0.9, 0.999))
    smoothing = torch.tensor([cell.protocol.ls for cell in cells])
    images = torch.randint(0, 256, (len(cells), batch, 3, size, size), dtype=torch.uint8)
    labels = torch.randint(0, CLASSES, (len(cells), batch))

    def step(index: int) -> None:
        def reseed(cell: int) -> None:
            reseed_for_batch(cell, 0, index, torch.device("cpu"))

        losses = pack_loss(model, cells, images, labels, smoothing, reseed)[0]
        optimizer.zero_grad()
        losses.sum().backward()
        optimizer.step()

    return step


def ops_and_seconds(step: Callable[[int], None], repeats: int) -> tuple[int, float]:
    """(aten ops of one step, median seconds of a step), after two warm-up steps."""
    step(0)
    step(1)
    with DispatchCount() as counted:
        step(2)
    times = []
    for index in range(repeats):
        start = time.perf_counter()
        step(3 + index)
        times.append(time.perf_counter() - start)
    return counted.total, sorted(times)[len(times) // 2]


def pack(
    report: Report, device: torch.device, sizes: tuple[int, ...], repeats: int, demo_steps: int, demo_batch: int
) -> None:
    if device.type != "cpu":
        report.row("pack", "measured on the CPU only (dispatch counts and host time); the GPU rows: make bench-gpu")
        return
    torch.set_num_threads(1)
    for name, protocols in (("Baseline", [{}]), ("Modern", [{"autoaug": True, "cutmix": True, "ls": 0.1}])):
        lone_ops, lone_time = ops_and_seconds(lone_steps(protocols, 8, 8, TINY_ARCH), repeats)
        report.row(f"{name}, 1 cell unpacked: ops, host ms per cell-step", f"{lone_ops}, {lone_time * 1e3:.2f}")
        for cells in sizes:
            ops, seconds = ops_and_seconds(pack_steps(protocols * cells, 8, 8, TINY_ARCH), repeats)
            ops_ratio = report.figure(f"{name}.ops_ratio_{cells}", ops / cells / lone_ops)
            time_ratio = report.figure(f"{name}.time_ratio_{cells}", seconds / cells / lone_time)
            target = "pack_per_cell" if cells == max(sizes) else None
            report.row(
                f"{name}, pack of {cells}: ops, host ms per cell-step (/ unpacked)",
                f"{ops / cells:.0f} ({ops_ratio:.3f}), {seconds / cells * 1e3:.2f} ({time_ratio:.3f})",
                target,
                max(ops_ratio, time_ratio),
            )
    lone = ops_and_seconds(lone_steps(GRID, 32, demo_batch, DEMO_ARCH), demo_steps)[1]
    packed = ops_and_seconds(pack_steps(GRID, 32, demo_batch, DEMO_ARCH), demo_steps)[1]
    report.figure("demo_grid_ratio", packed / lone)
    report.row(
        f"the 8 grid cells, demo model (depth 4, dim 64), batch {demo_batch} of 32 px, 1 thread: ms per step of all 8",
        f"packed {packed * 1e3:.0f}, one after another {lone * 1e3:.0f} (packed / unpacked {packed / lone:.3f})",
        "pack_demo_ratio",
        packed / lone,
    )
