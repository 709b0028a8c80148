"""Model section: training-step images/s of our ViT against timm's VisionTransformer of the same shape.

timm is the reference a reader would reach for; if ours is slower with the same arithmetic, the difference is
in our code (layout copies, extra kernels), not in the architecture.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch
from torch import nn

from ..model import count_parameters
from .common import ModelConfig, make_train_step
from .timing import interleaved, paired_ratios, timed


def timm_vit(config: ModelConfig) -> nn.Module:
    """timm's ViT with our architecture: CLS token pooled, pre-norm blocks, qkv bias, no dropout, no norm_pre."""
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    return TimmViT(
        img_size=config.image_size,
        patch_size=config.image_size // 8,
        in_chans=3,
        num_classes=config.num_classes,
        global_pool="token",
        embed_dim=config.dim,
        depth=config.depth,
        num_heads=config.heads,
        mlp_ratio=config.mlp_ratio,
        qkv_bias=True,
        class_token=True,
        pre_norm=False,
        drop_rate=0.0,
        pos_drop_rate=0.0,
        attn_drop_rate=0.0,
        proj_drop_rate=0.0,
        drop_path_rate=0.0,
    )


def run(config: ModelConfig, batch: int, repeats: int, warmup: int, device: torch.device) -> dict[str, Any]:
    torch.manual_seed(0)
    ours = config.build()
    reference = timm_vit(config)
    ours_params, timm_params = count_parameters(ours), count_parameters(reference)
    if ours_params != timm_params:
        raise AssertionError(f"timm's ViT has {timm_params:,} parameters, ours {ours_params:,}: not the same model")
    runs = {
        "ours": timed(make_train_step(ours, config, batch, device), device),
        "timm": timed(make_train_step(reference, config, batch, device), device),
    }
    timings = interleaved(runs, repeats=repeats, warmup=warmup)
    ours_s, timm_s = timings["ours"].median, timings["timm"].median
    paired = paired_ratios(timings["timm"], timings["ours"])  # timm time / our time = our speed / timm's
    return {
        "model": config.as_dict(),
        "params": ours_params,
        "batch": batch,
        "repeats": repeats,
        "ours_step_s": ours_s,
        "timm_step_s": timm_s,
        "ours_img_s": batch / ours_s,
        "timm_img_s": batch / timm_s,
        "paired_ratio_min": min(paired),
        "paired_ratio_max": max(paired),
        "paired_ratio_median": statistics.median(paired),
        "ratios": {"ours_over_timm": timm_s / ours_s},
        "samples_s": {name: t.samples for name, t in timings.items()},
    }
