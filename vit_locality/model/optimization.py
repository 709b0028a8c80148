"""The optimiser of a cell: AdamW with weight decay on matrices only, and a warm-up + cosine schedule per batch."""

from __future__ import annotations

import math

import torch


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """LR multiplier: linear from 1/warmup to 1 over `warmup_steps`, then cosine down to `min_ratio`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def adamw_with_decay_groups(
    model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float]
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only: not on biases, norms, nor the model's `no_weight_decay()`."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    exempt = model.no_weight_decay() if hasattr(model, "no_weight_decay") else set()
    groups = [
        {"params": [p for n, p in named if p.ndim >= 2 and n not in exempt], "weight_decay": weight_decay},
        {"params": [p for n, p in named if p.ndim < 2 or n in exempt], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


def warmup_cosine_schedule(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    epochs: int,
    warmup_epochs: float,
    min_lr_ratio: float,
    steps_per_epoch: int | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """`warmup_cosine` stepped per batch, the warm-up in epochs of `steps_per_epoch` (default total_steps / epochs)."""
    per_epoch = steps_per_epoch or max(1, total_steps // max(1, epochs))
    warmup = min(total_steps, max(1, round(warmup_epochs * per_epoch)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup, total_steps, min_lr_ratio))
