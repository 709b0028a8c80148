"""The GPU bench's measuring sections but packing (gpu_pack.py): model, e2e, probe, overhead, projection. Each
takes the run's Settings, the device and the state earlier sections left, and returns its table rows."""

from __future__ import annotations

import gc
import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from statistics import median
from typing import Any

import torch
from omegaconf import DictConfig

from vit_locality.augment.mixing import mix_batch
from vit_locality.bench.common import (
    autocast,
    bench_config,
    build_vit,
    interleaved,
    per_round,
    timed,
    train_step,
)
from vit_locality.bench.gpu_settings import CIFAR100, Settings, row
from vit_locality.bench.sections import model_flops, probe_cost
from vit_locality.bench.suite import Row
from vit_locality.data.on_device import DeviceTrainLoader
from vit_locality.model.vit import VisionTransformer
from vit_locality.run.builders import build_datamodule, build_module, resolve_precision


def config(settings: Settings, device: torch.device, protocol: str, on_device: bool) -> DictConfig:
    """A CIFAR-100-shaped cell (100 classes, 32 px) on synthetic data with the protocol preset and data path."""
    return bench_config(
        settings.model,
        device,
        [
            f"protocol={protocol}",
            f"data.on_device={str(on_device).lower()}",
            f"data.train_size={settings.train_size}",
            "data.test_size=64",
            f"data.batch_size={settings.batch}",
            f"data.num_workers={settings.workers}",
            "model.compile=false",  # the bench compiles its one model itself, once
        ],
    )


def endless(loader: Any) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """A training loader's batches epoch after epoch, each epoch told to its sampler as Lightning does."""
    epoch = 0
    while True:
        loader.sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


class CellStep:
    """One training step of a cell as its module runs it, minus the Trainer: the next batch from the cell's data path
    (workers or on the device), `training_loss` (CutMix, normalise, forward, loss), backward, AdamW."""

    def __init__(self, cfg: DictConfig, device: torch.device, vit: VisionTransformer | None = None) -> None:
        datamodule = build_datamodule(cfg)
        datamodule.setup("fit")
        self.module = build_module(cfg, datamodule).to(device)
        if vit is not None:  # one (compiled) model for every cell measured, so it compiles once
            self.module.model = vit.to(device)
        self.device = device
        self.on_device = datamodule.on_device
        if self.on_device:
            images, labels = datamodule.device_arrays(device).train
            loader: Any = DeviceTrainLoader(images, labels, datamodule.batch_size, 0, datamodule.batch_augment)
        else:
            datamodule.pin_memory = device.type == "cuda"
            loader = datamodule.train_dataloader()
        self.loader = loader
        self.batches = endless(loader)
        self.optimizer = torch.optim.AdamW(self.module.parameters(), lr=1e-4)
        self.amp = autocast(cfg)
        self.batch = datamodule.batch_size

    def __call__(self) -> torch.Tensor:
        images, labels = next(self.batches)
        images, labels = images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)
        self.optimizer.zero_grad(set_to_none=True)
        with self.amp:
            loss = self.module.training_loss(images, labels)[0]
        loss.backward()
        self.optimizer.step()
        self.module._note_nonfinite(loss)  # what training_step adds per step besides logging (a check on the device)
        return loss

    def close(self) -> None:
        """Stop the loader's workers before the next figure."""
        self.batches.close()
        del self.loader, self.batches
        gc.collect()


def steps(fn: Callable[[], object], count: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(count):
            fn()

    return run


def images_per_s(fn: Callable[[], object], batch: int, settings: Settings, device: torch.device) -> tuple[float, float]:
    """(images/s over `settings.steps` timed steps, seconds of the warm-up: the compile, for a compiled model)."""
    warmup = timed(steps(fn, settings.warmup), device)()
    return batch * settings.steps / timed(steps(fn, settings.steps), device)(), warmup


def compiled(vit: VisionTransformer, settings: Settings) -> VisionTransformer:
    mode = {"mode": settings.compile_mode} if settings.compile_backend == "inductor" else {}
    vit.compile(backend=settings.compile_backend, **mode)
    return vit


def matmul_peak(device: torch.device, smoke: bool) -> float:
    """bf16 (CUDA) or fp32 (CPU) dense matmul FLOP/s at a size that saturates the device: the ceiling to read
    the model's achieved rate against."""
    size = 512 if smoke or device.type == "cpu" else 8192
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    run = timed(steps(lambda: a @ b, 3 if smoke else 20), device)
    run()
    return (3 if smoke else 20) * 2 * size**3 / min(run() for _ in range(3))


def model_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    cfg = config(settings, device, "modern", True)
    torch.manual_seed(0)
    eager_rate, _ = images_per_s(
        train_step(build_vit(cfg), cfg, settings.batch, device), settings.batch, settings, device
    )
    vit = compiled(build_vit(cfg), settings)
    rate, compile_s = images_per_s(train_step(vit, cfg, settings.batch, device), settings.batch, settings, device)
    evaluation = torch.randint(0, 256, (settings.eval_batch, 3, 32, 32), device=device).float()

    def forward() -> None:
        with torch.no_grad(), autocast(cfg):
            vit.eval()(evaluation)
        vit.train()

    eval_rate, _ = images_per_s(forward, settings.eval_batch, settings, device)
    flops = model_flops(vit)["train_step"]
    peak = matmul_peak(device, settings.smoke)
    mode = settings.compile_mode if settings.compile_backend == "inductor" else "no mode"
    state.update(vit=vit, train_img_s=rate, eval_img_s=eval_rate, compile_s=compile_s, cfg=cfg)
    precision = resolve_precision(cfg.trainer.precision, cfg.trainer.accelerator)
    where = f"{settings.model}, batch {settings.batch}, {precision}, 100 classes, 32 px"
    return [
        row("model", f"train step img/s, eager ({where})", f"{eager_rate:.0f}"),
        row("model", f"train step img/s, compiled ({settings.compile_backend}, {mode})", f"{rate:.0f}"),
        row("model", "compiled / eager", f"{rate / eager_rate:.2f}x"),
        row("model", "first compiled steps (compile), s", f"{compile_s:.1f}"),
        row("model", f"eval forward img/s, compiled, batch {settings.eval_batch}", f"{eval_rate:.0f}"),
        row("model", "achieved TFLOP/s (analytic 3 x forward FLOPs x img/s)", f"{flops * rate / 1e12:.3f}"),
        row("model", "dense matmul peak TFLOP/s measured here", f"{peak / 1e12:.3g}"),
        row("model", "achieved / peak", f"{100 * flops * rate / peak:.1f}%"),
    ]


def sync_sources(fn: Callable[[], object], count: int) -> tuple[float, list[str]]:
    """Host syncs per call of `fn` on CUDA, with the three most frequent places (file:line) that asked for one."""
    seen: Counter[str] = Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(count):
                fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    for warning in caught:
        if "synchroniz" in str(warning.message):
            seen[f"{Path(warning.filename).name}:{warning.lineno}"] += 1
    return sum(seen.values()) / count, [f"{place} x{n}" for place, n in seen.most_common(3)]


def e2e_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    rows, rates = [], {}
    for protocol in ("baseline", "modern"):
        for on_device in (False, True):
            cfg = config(settings, device, protocol, on_device)
            step = CellStep(cfg, device, state.get("vit"))
            rate, _ = images_per_s(step, step.batch, settings, device)
            path = "on-device data" if on_device else f"{cfg.data.num_workers} CPU workers"
            rates[protocol, on_device] = rate
            rows.append(row("e2e", f"{protocol.capitalize()} cell step img/s, {path}", f"{rate:.0f}"))
            if on_device and device.type == "cuda":
                per_step, places = sync_sources(step, 5)
                where = f" ({'; '.join(places)})" if places else ""
                rows.append(
                    row("e2e", f"{protocol.capitalize()}, on-device: host syncs per step", f"{per_step:g}{where}")
                )
            step.close()
    for protocol in ("baseline", "modern"):
        gain = rates[protocol, True] / rates[protocol, False]
        rows.append(row("e2e", f"{protocol.capitalize()}: on-device / workers", f"{gain:.2f}x"))
    state["e2e_modern_img_s"] = rates["modern", True]
    return rows


def probe_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    figures, rows = probe_cost(settings.model, settings.batch, settings.probe_size, settings.repeats, device)
    state["probe_s"] = figures["probe_s"]
    return [row("probe", *r[:2]) for r in rows[:3]]


def overhead_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    """The Modern cell's on-device step (batch gather, crop, flip, AutoAugment, CutMix, normalise, label-smoothed
    loss) against the model's own step on a fixed batch, same model, interleaved rounds; and the data path alone
    (everything but the model), whose share of the model's step is the judged figure: on a busy machine the ratio
    of two whole steps drifts by more than the few percent it is to show."""
    cfg = config(settings, device, "modern", True)
    torch.manual_seed(0)
    model_alone = train_step(build_vit(cfg), cfg, settings.batch, device)
    cell = CellStep(cfg, device)

    def data_path() -> None:
        images, labels = next(cell.batches)
        module = cell.module
        module.preprocess(mix_batch(images, labels, module.num_classes, module.protocol)[0])

    chosen = {"model": model_alone, "cell": cell, "data": data_path}
    runs = {name: timed(steps(fn, settings.overhead_steps), device) for name, fn in chosen.items()}
    samples = interleaved(runs, repeats=settings.repeats)
    model_s, cell_s, data_s = (median(samples[k]) for k in ("model", "cell", "data"))
    spread = per_round(samples["cell"], samples["model"])[1]
    added = 100 * data_s / model_s
    where = f"{settings.model}, batch {settings.batch}, {device.type}"
    judged = added if not settings.smoke else math.nan  # the target is set at the paper config
    per_step = 1000 / settings.overhead_steps
    return [
        row("overhead", f"model alone ms/step ({where})", f"{per_step * model_s:.1f}"),
        row("overhead", "on-device data path alone ms/batch (gather, crop, flip, AutoAugment, CutMix, normalise)",
            f"{per_step * data_s:.1f}"),
        row("overhead", "whole on-device Modern step / model alone", f"{cell_s / model_s:.3f} {spread}"),
        row("overhead", "added by the on-device data path (data path / model step)", f"{added:+.1f}%",
            "on_device_overhead_pct", judged),
    ]  # fmt: skip


def projection_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    """One 200-epoch CIFAR-100 cell: training at the Modern on-device rate, an evaluation of 10,000 images and a
    probe every epoch, one compile; the grid: 24 cells in waves of the best packing, each cell at its share of the
    aggregate rate. Projections from the figures above, not measured runs."""
    needed = ("e2e_modern_img_s", "eval_img_s", "probe_s", "compile_s")
    if not all(k in state for k in needed):
        return [row("projection", "projected times", "not computed: needs the model, e2e and probe sections")]
    epochs, train, evaluation = CIFAR100["epochs"], CIFAR100["train"], CIFAR100["eval"]
    rate = state["e2e_modern_img_s"]
    work = epochs * (train / rate + evaluation / state["eval_img_s"] + state["probe_s"])
    cell_s = work + state["compile_s"]
    cells = CIFAR100["cells"] * CIFAR100["seeds"]
    packs = state.get("pack_img_s") or {1: rate}
    best = max(packs, key=lambda k: packs[k] / packs[min(packs)])
    slowdown = (packs[min(packs)] / min(packs)) / (packs[best] / best)  # one cell's rate alone / in the pack
    grid_s = math.ceil(cells / best) * (work * slowdown + state["compile_s"])
    scale = "" if not settings.smoke else " (smoke settings: not the paper's model)"
    return [
        row("projection", f"one 200-epoch CIFAR-100 Modern cell, minutes{scale}", f"{cell_s / 60:.1f}", "cell_minutes",
            cell_s / 60 if not settings.smoke and device.type == "cuda" else math.nan),
        row("projection", f"8-cell x 3-seed grid, {best} cells packed, minutes", f"{grid_s / 60:.1f}", "grid_minutes",
            grid_s / 60 if not settings.smoke and device.type == "cuda" else math.nan),
    ]  # fmt: skip
