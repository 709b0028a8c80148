"""FLOPs per image counted from the model's shapes, checked against torch's FlopCounterMode.

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

import torch
from torch.utils.flop_counter import FlopCounterMode

from ..model import VisionTransformer
from .common import Result, bench_config, build_vit


def linear_flops(tokens: int, in_features: int, out_features: int) -> int:
    return 2 * tokens * in_features * out_features


def model_flops(model: VisionTransformer) -> dict[str, int]:
    """Forward FLOPs per image by term of the formula above, with the shapes read off a built model (so it
    follows any config), plus their sum `forward` and the 3 x forward estimate `train_step`."""
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
    """FlopCounterMode's count per image on a forward (and backward); `explicit` takes the attention path
    built from plain matmuls, which the counter always sees (it has no formula for CPU's fused SDPA kernel)."""
    size = model.grid_size * model.patch_size
    images = torch.randn(batch, 3, size, size, device=next(model.parameters()).device)
    was_training = model.training
    model.eval()
    try:
        with FlopCounterMode(display=False) as counter:
            logits = model.forward_with_attention(images)[0] if explicit else model(images)
            if backward:
                logits.sum().backward()
    finally:
        model.train(was_training)
        model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch


def run(model: str, train_img_s: float | None = None) -> Result:
    """The formula, FlopCounterMode's counts of the same model (on the CPU), and the FLOP rate a measured
    training step achieved (`train_img_s`, from the model section)."""
    vit = build_vit(bench_config(model, torch.device("cpu")))
    analytic = model_flops(vit)
    forward = analytic["forward"]
    counted = {
        "forward_fused": counted_flops(vit),
        "forward_explicit": counted_flops(vit, explicit=True),
        "train_step_explicit": counted_flops(vit, explicit=True, backward=True),
    }
    agree, fused = counted["forward_explicit"] / forward, counted["forward_fused"] / forward
    ratios = {"counted_explicit_over_analytic": agree, "counted_fused_over_analytic": fused}
    ratios["counted_train_over_forward"] = counted["train_step_explicit"] / forward
    rows = [
        ("analytic forward GFLOP/image", f"{forward / 1e9:.4f}"),
        ("analytic train step GFLOP/image (3 x forward)", f"{analytic['train_step'] / 1e9:.4f}"),
        ("attention matmuls / forward", f"{100 * analytic['attention'] / forward:.1f}%"),
        (
            "FlopCounterMode forward (explicit attention) / analytic",
            f"{agree:.4f}",
            "flops_apart_pct",
            abs(agree - 1) * 100,
        ),
        (
            "FlopCounterMode forward (fused SDPA) / analytic",
            f"{fused:.4f} (gap {100 * (1 - fused):.1f}% = attention matmuls: "
            "the counter has no formula for CPU's fused SDPA kernel)",
        ),
        ("FlopCounterMode train step GFLOP/image", f"{counted['train_step_explicit'] / 1e9:.4f}"),
    ]
    if train_img_s is not None:
        ratios["achieved_gflop_s"] = analytic["train_step"] * train_img_s / 1e9
        rows.append(("achieved GFLOP/s in the measured train step", f"{ratios['achieved_gflop_s']:.1f}"))
    return {"analytic": analytic, "counted": counted, "ratios": ratios}, rows
