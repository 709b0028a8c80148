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

from dataclasses import asdict, dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from ..model import VisionTransformer


def linear_flops(tokens: int, in_features: int, out_features: int) -> int:
    return 2 * tokens * in_features * out_features


@dataclass(frozen=True)
class FlopBreakdown:
    """Forward FLOPs per image, by term of the formula in the module docstring."""

    patch_embed: int
    qkv: int
    attention: int
    proj: int
    mlp: int
    head: int

    @property
    def forward(self) -> int:
        return self.patch_embed + self.qkv + self.attention + self.proj + self.mlp + self.head

    @property
    def train_step(self) -> int:
        """The usual 3 x forward estimate of forward + backward (see `counted_flops` for the exact count)."""
        return 3 * self.forward

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "forward": self.forward, "train_step": self.train_step}


def vit_flops(
    grid: int, patch: int, dim: int, depth: int, mlp_hidden: int, num_classes: int, channels: int = 3
) -> FlopBreakdown:
    tokens = 1 + grid * grid
    return FlopBreakdown(
        patch_embed=linear_flops(grid * grid, channels * patch * patch, dim),
        qkv=depth * linear_flops(tokens, dim, 3 * dim),
        attention=depth * 2 * (2 * tokens * tokens * dim),
        proj=depth * linear_flops(tokens, dim, dim),
        mlp=depth * (linear_flops(tokens, dim, mlp_hidden) + linear_flops(tokens, mlp_hidden, dim)),
        head=linear_flops(1, dim, num_classes),
    )


def model_flops(model: VisionTransformer) -> FlopBreakdown:
    """The formula with the shapes read off a built model, so it follows any config."""
    conv = model.patch_embed
    return vit_flops(
        grid=model.grid_size,
        patch=model.patch_size,
        dim=conv.out_channels,
        depth=len(model.blocks),
        mlp_hidden=model.blocks[0].mlp[0].out_features,
        num_classes=model.head.out_features,
        channels=conv.in_channels,
    )


def counted_flops(model: VisionTransformer, batch: int = 2, explicit: bool = False, backward: bool = False) -> float:
    """FlopCounterMode's count per image on a forward (and backward); `explicit` takes the attention path
    built from plain matmuls, which the counter always sees (it has no formula for CPU's fused SDPA kernel)."""
    device = next(model.parameters()).device
    size = model.grid_size * model.patch_size
    images = torch.randn(batch, 3, size, size, device=device)
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


def run(model: VisionTransformer, train_img_s: float | None) -> dict[str, object]:
    """The formula, FlopCounterMode's counts of the same model (CPU), and the achieved rate of a measured step."""
    model = model.cpu()
    analytic = model_flops(model)
    fused = counted_flops(model)
    explicit = counted_flops(model, explicit=True)
    train = counted_flops(model, explicit=True, backward=True)
    result: dict[str, object] = {
        "analytic": analytic.as_dict(),
        "attention_share": analytic.attention / analytic.forward,
        "counted_forward_fused": fused,
        "counted_forward_explicit": explicit,
        "counted_train_step_explicit": train,
        "fused_gap": 1 - fused / analytic.forward,
        "ratios": {
            "counted_explicit_over_analytic": explicit / analytic.forward,
            "counted_fused_over_analytic": fused / analytic.forward,
            "counted_train_over_forward": train / analytic.forward,
        },
    }
    if train_img_s is not None:
        result["train_img_s"] = train_img_s
        result["achieved_flop_s"] = analytic.train_step * train_img_s
        result["ratios"]["achieved_gflop_s"] = analytic.train_step * train_img_s / 1e9
    return result
