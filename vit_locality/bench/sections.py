"""The sections that time a training step against something else: timm's ViT (model), the per-sample data
pipelines and the loader (data), one attention-statistics probe pass (stats)."""

from __future__ import annotations

import gc
from collections.abc import Iterable
from functools import partial
from statistics import median

import torch
from omegaconf import DictConfig
from torch import nn
from torch.utils.data import DataLoader

from ..attention_probe import ProbeSettings, probe_attention
from ..builders import build_datamodule
from ..data import UInt8ImageDataset
from ..domain import GRID_SIZE
from ..model import count_parameters
from ..transforms import build_train_transform
from .common import Result, bench_config, build_vit, model_info, train_step
from .report import spread
from .timing import interleaved, paired_ratios, timed


def timm_vit(cfg: DictConfig) -> nn.Module:
    """timm's ViT with our architecture: CLS token pooled, pre-norm blocks, qkv bias, no dropout, no norm_pre."""
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    m, size = cfg.model, cfg.data.image_size
    return TimmViT(
        img_size=size,
        patch_size=size // GRID_SIZE,
        num_classes=cfg.data.num_classes,
        global_pool="token",
        embed_dim=m.dim,
        depth=m.depth,
        num_heads=m.heads,
        mlp_ratio=m.mlp_ratio,
        qkv_bias=True,
        class_token=True,
        pre_norm=False,
        **dict.fromkeys(("drop_rate", "pos_drop_rate", "attn_drop_rate", "proj_drop_rate", "drop_path_rate"), 0.0),
    )


def model_vs_timm(model: str, batch: int, repeats: int, device: torch.device) -> Result:
    """Training images/s of our ViT and of timm's of the same shape: with the same arithmetic, a gap is our code
    (layout copies, extra kernels), not the architecture."""
    cfg = bench_config(model, device)
    torch.manual_seed(0)
    ours, reference = build_vit(cfg), timm_vit(cfg)
    params = count_parameters(ours)
    if count_parameters(reference) != params:
        raise AssertionError(f"timm's ViT has {count_parameters(reference):,} parameters, ours {params:,}")
    runs = {name: timed(train_step(m, cfg, batch, device), device) for name, m in (("ours", ours), ("timm", reference))}
    samples = interleaved(runs, repeats=repeats)
    img_s = {name: batch / median(s) for name, s in samples.items()}
    ratio = img_s["ours"] / img_s["timm"]
    paired = paired_ratios(samples["timm"], samples["ours"])  # timm's time / ours = our speed / timm's
    figures = {
        "model": model_info(cfg),
        "params": params,
        "img_s": img_s,
        **paired,
        "ratios": {"ours_over_timm": ratio},
    }
    shape = f"{model} ({params:,} params), batch {batch}"
    return {**figures, "samples_s": samples}, [
        (f"ours: train step img/s, {shape}", f"{img_s['ours']:.1f}"),
        ("timm VisionTransformer, same config: train step img/s", f"{img_s['timm']:.1f}"),
        ("ours / timm (images/s)", f"{ratio:.3f} {spread(paired)}", "ours_over_timm", ratio),
    ]


def drain(loader: Iterable) -> None:
    """One pass over a loader; `iter()` restarts persistent workers' prefetch, so each pass is a whole epoch."""
    for _ in loader:
        pass


def data_headroom(
    model: str, samples: int, loader_images: int, batch: int, model_batch: int, repeats: int, device: torch.device
) -> Result:
    """Can one CPU core of per-sample augmentation keep the model fed? The Baseline (crop + flip) and Modern
    (+ AutoAugment) pipelines on one thread (`__getitem__` + collate, what one loader worker does), the Modern
    DataModule train loader at 1 and 2 persistent workers, and the model's training images/s on one core (CPU)
    or on the device (CUDA); headroom = pipeline / model."""
    torch.manual_seed(0)
    sizes = [f"data.train_size={loader_images}", "data.test_size=64", f"data.batch_size={batch}"]
    cfg = bench_config(model, device, ["protocol=modern", *sizes])
    datamodule, policy = build_datamodule(cfg)
    datamodule.setup("fit")
    images, labels = datamodule.arrays.train_images[:samples], datamodule.arrays.train_labels[:samples]
    pipelines = {
        "baseline": build_train_transform(cfg.data.image_size, False, policy),
        "modern": datamodule.train_transform,
    }
    loaders = {name: DataLoader(UInt8ImageDataset(images, labels, t), batch) for name, t in pipelines.items()}
    runs = {name: timed(partial(drain, loader), device, threads=1) for name, loader in loaders.items()}
    threads = 1 if device.type == "cpu" else None
    runs["model_one_core"] = timed(train_step(build_vit(cfg), cfg, model_batch, device), device, threads)
    for workers in (1, 2):
        datamodule.num_workers = workers
        loaders[f"loader_{workers}w"] = loader = datamodule.train_dataloader()
        runs[f"loader_{workers}w"] = timed(partial(drain, loader), device)
    timings = interleaved(runs, repeats=repeats)
    del runs, loaders, loader
    gc.collect()  # shuts the persistent workers down before the next section
    epoch = loader_images // batch * batch
    counts = {"baseline": len(labels), "modern": len(labels), "model_one_core": model_batch}
    img_s = {name: counts.get(name, epoch) / median(s) for name, s in timings.items()}
    headroom = {name: img_s[name] / img_s["model_one_core"] for name in pipelines}
    ratios = {f"headroom_{name}": value for name, value in headroom.items()}
    ratios["loader_2w_over_1w"] = img_s["loader_2w"] / img_s["loader_1w"]
    figures = {"model": model_info(cfg), "policy": policy, "img_s": img_s, "ratios": ratios, "samples_s": timings}
    rows = [
        ("Baseline per-sample pipeline (crop+flip), one core: img/s", f"{img_s['baseline']:.0f}"),
        (f"Modern per-sample pipeline (+AutoAugment {policy}), one core: img/s", f"{img_s['modern']:.0f}"),
        ("DataModule train loader (Modern), 1 worker: img/s", f"{img_s['loader_1w']:.0f}"),
        ("DataModule train loader (Modern), 2 workers: img/s", f"{img_s['loader_2w']:.0f}"),
        (
            f"model training img/s, {model}, batch {model_batch}, {'1 thread' if threads else 'on the device'}",
            f"{img_s['model_one_core']:.1f}",
        ),
    ]
    for name, value in headroom.items():
        rows.append(
            (f"headroom, {name.capitalize()} (pipeline / model, one core each)", f"{value:.1f}x", "headroom", value)
        )
    return figures, rows


def probe_cost(
    model: str, batch: int, probe_size: int, repeats: int, device: torch.device, train_images: int = 50_000
) -> Result:
    """One training step (fused attention, the Trainer's precision) against one probe pass as the statistics
    callback runs it (explicit fp32 attention, per-head MAD and entropy, no gradients), and the probe's share of
    an epoch of `train_images` (CIFAR's). The callback's CSV write and log call are not timed."""
    cfg = bench_config(model, device, [f"stats.probe_size={probe_size}"])
    torch.manual_seed(0)
    vit = build_vit(cfg)
    step = train_step(vit, cfg, batch, device)
    size = cfg.data.image_size
    probe = torch.randn(probe_size, 3, size, size, generator=torch.Generator().manual_seed(1)).to(device)
    settings = ProbeSettings.from_mapping(cfg.stats)
    runs = {"train_step": timed(step, device), "probe": timed(lambda: probe_attention(vit, probe, settings), device)}
    samples = interleaved(runs, repeats=repeats)
    step_s, probe_s = median(samples["train_step"]), median(samples["probe"])
    steps_per_epoch = train_images // batch
    in_steps, pct_of_epoch = probe_s / step_s, 100 * probe_s / (step_s * steps_per_epoch)
    ratios = {"probe_over_step": in_steps, "probe_over_epoch": pct_of_epoch / 100}
    figures = {"model": model_info(cfg), "train_step_s": step_s, "probe_s": probe_s, "ratios": ratios}
    return {**figures, "samples_s": samples}, [
        (f"train step ms, {model}, batch {batch}", f"{1000 * step_s:.1f}"),
        (f"probe pass ms ({probe_size} images, explicit fp32)", f"{1000 * probe_s:.1f}"),
        ("probe / training step", f"{in_steps:.2f} steps", "probe_in_steps", in_steps),
        (
            f"probe / epoch of {train_images:,} images ({steps_per_epoch} steps)",
            f"{pct_of_epoch:.3f}%",
            "probe_pct_of_epoch",
            pct_of_epoch,
        ),
    ]
