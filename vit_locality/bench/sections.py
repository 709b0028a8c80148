"""The sections other than the framework's. model: our ViT against timm's of the same shape (with the same
arithmetic, a gap is our code, not the architecture). data: can one CPU core of per-sample augmentation keep the
model fed? stats: one attention-statistics probe pass in training steps and in an epoch. flops: FLOPs per image
counted from the model's shapes, checked against torch's FlopCounterMode.

A multiply-add counts 2 FLOPs (FlopCounterMode's convention). Norms, GELU, softmax, residual adds and the
optimizer are left out: they are memory-bound and under 1% of the arithmetic. With g x g patches of P px,
T = 1 + g^2 tokens, width D, MLP hidden H, depth L and C classes, per image and forward:

    patch embed   2 * g^2 * D * 3 P^2          (a P x P stride-P conv = one matmul per patch)
    qkv           2 * T * D * 3D               per block
    attention     2 * T * T * D  (scores QK^T) + 2 * T * T * D (weights @ V), summed over heads, per block
    proj          2 * T * D * D                per block
    MLP           2 * T * D * H * 2            per block (two linears)
    head          2 * D * C                    (CLS token only)

Paper config (g 8, P 4, D 192, H 384, L 8, C 100): 0.334 GFLOP forward. A training step costs about 3 x the
forward (the backward computes a gradient for the input and one for the weights of every matmul).
"""

from __future__ import annotations

import gc
from collections import deque
from functools import partial
from statistics import median

import torch
from torch.utils.data import DataLoader
from torch.utils.flop_counter import FlopCounterMode

from vit_locality.attention.probe import ProbeSettings, probe_attention
from vit_locality.augment.per_sample import build_train_transform
from vit_locality.bench.common import Result, bench_config, build_vit, interleaved, per_round, timed, train_step
from vit_locality.catalog import GRID_SIZE
from vit_locality.data import UInt8ImageDataset
from vit_locality.model.vit import VisionTransformer, count_parameters
from vit_locality.run.builders import build_datamodule


def model_vs_timm(model: str, batch: int, repeats: int, device: torch.device) -> Result:
    """Training images/s of ours and of timm's ViT, same config and parameter count."""
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    cfg = bench_config(model, device)
    torch.manual_seed(0)
    m, size = cfg.model, cfg.data.image_size
    # timm's ViT with our architecture: CLS token pooled, pre-norm blocks, qkv bias, no dropout, no norm_pre
    shape = dict(embed_dim=m.dim, depth=m.depth, num_heads=m.heads, mlp_ratio=m.mlp_ratio, patch_size=size // GRID_SIZE)
    layout = dict(global_pool="token", qkv_bias=True, class_token=True, pre_norm=False)
    dropout = dict.fromkeys(("drop_rate", "pos_drop_rate", "attn_drop_rate", "proj_drop_rate", "drop_path_rate"), 0.0)
    ours = build_vit(cfg)
    reference = TimmViT(img_size=size, num_classes=cfg.data.num_classes, **shape, **layout, **dropout)
    params = count_parameters(ours)
    if count_parameters(reference) != params:
        raise AssertionError(f"timm's ViT has {count_parameters(reference):,} parameters, ours {params:,}")
    runs = {k: timed(train_step(net, cfg, batch, device), device) for k, net in (("ours", ours), ("timm", reference))}
    samples = interleaved(runs, repeats=repeats)
    img_s = {name: batch / median(s) for name, s in samples.items()}
    ratio = img_s["ours"] / img_s["timm"]
    extremes, spread = per_round(samples["timm"], samples["ours"])  # timm's time / ours = our speed / timm's
    figures = {"params": params, "img_s": img_s, "per_round_ratio": extremes, "ratios": {"ours_over_timm": ratio}}
    return figures, [
        (f"ours: train step img/s, {model} ({params:,} params), batch {batch}", f"{img_s['ours']:.1f}"),
        ("timm VisionTransformer, same config: train step img/s", f"{img_s['timm']:.1f}"),
        ("ours / timm (images/s)", f"{ratio:.3f} {spread}", "ours_over_timm", ratio),
    ]


def data_headroom(
    model: str, samples: int, loader_images: int, batch: int, model_batch: int, repeats: int, device: torch.device
) -> Result:
    """Baseline (crop + flip) and Modern (+ AutoAugment) on one thread, as one loader worker runs them; the Modern
    train loader at 1 and 2 workers; training on one core (CPU) or the device. Headroom = pipeline / model."""
    torch.manual_seed(0)
    sizes = [f"data.train_size={loader_images}", "data.test_size=64", f"data.batch_size={batch}"]
    cfg = bench_config(model, device, ["protocol=modern", *sizes])
    datamodule = build_datamodule(cfg)
    datamodule.setup("fit")
    policy = datamodule.batch_augment.policy
    images, labels = datamodule.arrays.train_images[:samples], datamodule.arrays.train_labels[:samples]
    baseline = build_train_transform(cfg.data.image_size, False, policy)
    pipelines = {"baseline": baseline, "modern": datamodule.train_transform}
    loaders = {name: DataLoader(UInt8ImageDataset(images, labels, t), batch) for name, t in pipelines.items()}
    # A pass drains a loader (into a deque that keeps nothing); `iter()` restarts persistent workers' prefetch, so
    # each pass is a whole epoch.
    runs = {name: timed(partial(deque, loader, maxlen=0), device, threads=1) for name, loader in loaders.items()}
    threads = 1 if device.type == "cpu" else None
    runs["model_one_core"] = timed(train_step(build_vit(cfg), cfg, model_batch, device), device, threads)
    for workers in (1, 2):
        datamodule.num_workers = workers
        loaders[f"loader_{workers}w"] = loader = datamodule.train_dataloader()
        runs[f"loader_{workers}w"] = timed(partial(deque, loader, maxlen=0), device)
    timings = interleaved(runs, repeats=repeats)
    del runs, loaders, loader
    gc.collect()  # shuts the persistent workers down before the next section
    epoch = loader_images // batch * batch
    counts = {"baseline": len(labels), "modern": len(labels), "model_one_core": model_batch}
    img_s = {name: counts.get(name, epoch) / median(s) for name, s in timings.items()}
    headroom = {name: img_s[name] / img_s["model_one_core"] for name in pipelines}
    ratios = {f"headroom_{name}": value for name, value in headroom.items()}
    ratios["loader_2w_over_1w"] = img_s["loader_2w"] / img_s["loader_1w"]
    where = f"{model}, batch {model_batch}, {'1 thread' if threads else 'on the device'}"
    rows = [
        ("Baseline per-sample pipeline (crop+flip), one core: img/s", f"{img_s['baseline']:.0f}"),
        (f"Modern per-sample pipeline (+AutoAugment {policy}), one core: img/s", f"{img_s['modern']:.0f}"),
        ("DataModule train loader (Modern), 1 worker: img/s", f"{img_s['loader_1w']:.0f}"),
        ("DataModule train loader (Modern), 2 workers: img/s", f"{img_s['loader_2w']:.0f}"),
        (f"model training img/s, {where}", f"{img_s['model_one_core']:.1f}"),
    ]
    for name, value in headroom.items():
        quantity = f"headroom, {name.capitalize()} (pipeline / model, one core each)"
        rows.append((quantity, f"{value:.1f}x", "headroom", value))
    return {"policy": policy, "img_s": img_s, "ratios": ratios}, rows


def probe_cost(
    model: str, batch: int, probe_size: int, repeats: int, device: torch.device, train_images: int = 50_000
) -> Result:
    """A training step (fused attention, the Trainer's precision) against a probe pass as the statistics callback
    runs it (explicit fp32 attention, per-head MAD and entropy, no gradients; its CSV write and log not timed)."""
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
    epoch = f"epoch of {train_images:,} images ({steps_per_epoch} steps)"
    return {"train_step_s": step_s, "probe_s": probe_s, "ratios": ratios}, [
        (f"train step ms, {model}, batch {batch}", f"{1000 * step_s:.1f}"),
        (f"probe pass ms ({probe_size} images, explicit fp32)", f"{1000 * probe_s:.1f}"),
        ("probe / training step", f"{in_steps:.2f} steps", "probe_in_steps", in_steps),
        (f"probe / {epoch}", f"{pct_of_epoch:.3f}%", "probe_pct_of_epoch", pct_of_epoch),
    ]


def linear_flops(tokens: int, in_features: int, out_features: int) -> int:
    return 2 * tokens * in_features * out_features


def model_flops(model: VisionTransformer) -> dict[str, int]:
    """Forward FLOPs per image by term, with the shapes read off a built model; their sum; 3 x the sum."""
    grid, conv, depth, tokens = model.grid_size, model.patch_embed, len(model.blocks), model.num_tokens
    dim, hidden = conv.out_channels, model.blocks[0].mlp[0].out_features
    terms = {
        "patch_embed": linear_flops(grid * grid, conv.in_channels * model.patch_size**2, dim),
        "qkv": depth * linear_flops(tokens, dim, 3 * dim),
        "attention": depth * 2 * (2 * tokens * tokens * dim),
        "proj": depth * linear_flops(tokens, dim, dim),
        "mlp": depth * (linear_flops(tokens, dim, hidden) + linear_flops(tokens, hidden, dim)),
        "head": linear_flops(1, dim, model.head.out_features),
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
    model.zero_grad(set_to_none=True)  # the counting backward's gradients are no one's
    return counter.get_total_flops() / batch


def flops_check(model: str, train_img_s: float | None = None) -> Result:
    """Counted on the CPU; `train_img_s` (the model section's) gives the FLOP rate a training step achieved."""
    vit = build_vit(bench_config(model, torch.device("cpu")))
    analytic = model_flops(vit)
    forward, train = analytic["forward"], analytic["train_step"]
    counted = {
        "forward_fused": counted_flops(vit),
        "forward_explicit": counted_flops(vit, explicit=True),
        "train_step_explicit": counted_flops(vit, explicit=True, backward=True),
    }
    agree, fused = counted["forward_explicit"] / forward, counted["forward_fused"] / forward
    ratios = {"counted_explicit_over_analytic": agree, "counted_fused_over_analytic": fused}
    ratios["counted_train_over_forward"] = counted["train_step_explicit"] / forward
    apart = 100 * abs(agree - 1)
    gap = f"gap {100 * (1 - fused):.1f}% = attention matmuls: the counter has no formula for CPU's fused SDPA kernel"
    rows = [
        ("analytic forward GFLOP/image", f"{forward / 1e9:.4f}"),
        ("analytic train step GFLOP/image (3 x forward)", f"{train / 1e9:.4f}"),
        ("attention matmuls / forward", f"{100 * analytic['attention'] / forward:.1f}%"),
        ("FlopCounterMode forward (explicit attention) / analytic", f"{agree:.4f}", "flops_apart_pct", apart),
        ("FlopCounterMode forward (fused SDPA) / analytic", f"{fused:.4f} ({gap})"),
        ("FlopCounterMode train step GFLOP/image", f"{counted['train_step_explicit'] / 1e9:.4f}"),
    ]
    if train_img_s is not None:
        ratios["achieved_gflop_s"] = train * train_img_s / 1e9
        rows.append(("achieved GFLOP/s in the measured train step", f"{ratios['achieved_gflop_s']:.1f}"))
    return {"analytic": analytic, "counted": counted, "ratios": ratios}, rows
