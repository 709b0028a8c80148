"""A pack's state, cell by cell: the fused model and its AdamW cut into each cell's own checkpoint and put together
again from them, a pack narrowed to the cells still training, and each cell's evaluation on its own split. Kept per
cell, so a pack whose cells come back at other points (some complete, one failed) resumes each where it stopped."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from vit_locality.model.fused import FusedViT, fused_adamw
from vit_locality.run.checkpoints import IDENTITY_ENTRY, AtomicCheckpointIO
from vit_locality.store.record import CHECKPOINT_DIR

PACK_CHECKPOINT = "pack.ckpt"  # in checkpoints/: the cell's weights, AdamW moments, epoch and step within the pack
PACK_ENTRY = "pack"  # the checkpoint's entry with what only a pack reads (its weights are an ordinary state_dict)


def pack_checkpoint(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / PACK_CHECKPOINT


def build_pack(
    states: Sequence[dict[str, torch.Tensor]], num_classes: int, image_size: int, arch: dict[str, Any], device: Any
) -> FusedViT:
    """The fused model of the cells whose VisionTransformer state dicts are `states`, on `device`."""
    model = FusedViT(len(states), num_classes, image_size, **arch)
    model.load_cells(states)
    return model.to(device)


def pack_optimizer(model: FusedViT, optim: dict[str, Any]) -> torch.optim.AdamW:
    betas = tuple(float(beta) for beta in optim["betas"])
    return fused_adamw(model, float(optim["lr"]), float(optim["weight_decay"]), betas)  # type: ignore[arg-type]


def cell_moments(model: FusedViT, optimizer: torch.optim.Optimizer, cell: int) -> dict[str, Any]:
    """Cell `cell`'s AdamW state: its slice of each moment, by parameter name, and the step count."""
    moments, step = {}, 0.0
    for name, parameter in model.named_parameters():
        state = optimizer.state.get(parameter)
        if state:
            moments[name] = (state["exp_avg"][cell].cpu().clone(), state["exp_avg_sq"][cell].cpu().clone())
            step = float(state["step"])
    return {"moments": moments, "adam_step": step}


def load_moments(model: FusedViT, optimizer: torch.optim.Optimizer, cells: Sequence[dict[str, Any]]) -> None:
    """Stack the cells' AdamW states into the pack's optimizer (cells that have taken no step yet have none)."""
    if not cells or not cells[0]["moments"]:
        return
    for name, parameter in model.named_parameters():
        first = torch.stack([cell["moments"][name][0] for cell in cells]).to(parameter.device)
        second = torch.stack([cell["moments"][name][1] for cell in cells]).to(parameter.device)
        step = torch.tensor(float(cells[0]["adam_step"]), dtype=torch.float32)
        optimizer.state[parameter] = {"step": step, "exp_avg": first, "exp_avg_sq": second}


def narrowed(
    model: FusedViT, optimizer: torch.optim.Optimizer, keep: list[int], shape: dict[str, Any], optim: dict[str, Any]
) -> tuple[FusedViT, torch.optim.AdamW]:
    """The pack without the cells not in `keep` (one failed): the others' weights and moments as they are;
    `shape`: build_pack's num_classes, image_size and arch."""
    states = [model.cell_state_dict(index) for index in keep]
    moments = [cell_moments(model, optimizer, index) for index in keep]
    smaller = build_pack(states, **shape, device=next(model.parameters()).device)
    smaller_optimizer = pack_optimizer(smaller, optim)
    load_moments(smaller, smaller_optimizer, moments)
    return smaller, smaller_optimizer


def save_cell(
    path: Path,
    model: FusedViT,
    optimizer: torch.optim.Optimizer,
    cell: int,
    module_state: dict[str, torch.Tensor],
    progress: dict[str, Any],
) -> None:
    """Cell `cell`'s checkpoint, written whole or not at all: an ordinary `state_dict` (of its ViTClassifier, as a
    lone cell's checkpoint holds it), the epochs done, its identity stamp and the pack's entry."""
    checkpoint = {
        "state_dict": {name: value.detach().cpu() for name, value in module_state.items()},
        "epoch": int(progress["epoch"]),
        "global_step": int(progress["global_step"]),
        IDENTITY_ENTRY: {"identity_hash": progress["identity"], "fit_metrics": progress.get("fit_metrics", {})},
        PACK_ENTRY: {**progress, **cell_moments(model, optimizer, cell)},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    AtomicCheckpointIO().save_checkpoint(checkpoint, path)


def read_cell(path: Path, identities: tuple[str, ...]) -> dict[str, Any] | None:
    """A cell's pack checkpoint if it is this cell's (its identity), else None (train the cell from its start)."""
    if not path.exists():
        return None
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    stamp = (checkpoint.get(IDENTITY_ENTRY) or {}).get("identity_hash")
    if stamp not in identities or PACK_ENTRY not in checkpoint:
        return None
    return checkpoint


@torch.no_grad()
def evaluate_cells(
    model: FusedViT,
    preprocess: Sequence[Any],
    splits: Sequence[tuple[torch.Tensor, torch.Tensor]],
    batch_size: int,
    autocast: Any,
) -> list[dict[str, float]]:
    """Each cell's mean loss, top-1 and top-5 on its own split (uint8 images, labels), in batches of `batch_size`,
    as a lone cell's evaluation figures them (the means weighted by batch size)."""
    model.eval()
    size = len(splits[0][1])
    totals = torch.zeros(len(splits), 3, dtype=torch.float64)
    for start in range(0, size, batch_size):
        rows = slice(start, start + batch_size)
        images = torch.stack([prep(split[0][rows]) for prep, split in zip(preprocess, splits, strict=True)])
        labels = torch.stack([split[1][rows] for split in splits])
        with autocast:
            logits = model(images).float()
        classes = logits.shape[-1]
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view(labels.shape)
        hits = logits.topk(min(5, classes), dim=-1).indices == labels[..., None]
        figures = torch.stack([loss.sum(1), hits[..., 0].float().sum(1), hits.any(-1).float().sum(1)], dim=1)
        totals += figures.double().cpu()
    model.train()
    means = totals / size
    return [{"loss": float(row[0]), "acc1": float(row[1]), "acc5": float(row[2])} for row in means]
