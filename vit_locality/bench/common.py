"""What the sections share: the project's config composed as `train.py` composes it, the ViT it names, the
precision the Trainer resolves from it, and one training step on a fixed batch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import nn

from ..builders import resolve_precision, uses_cuda
from ..model import VisionTransformer
from ..module import adamw_with_decay_groups

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
# What a section returns: its figures for the JSON record, and its table rows: (quantity, value) or, for a figure
# with a target, (quantity, value, target name in report.TARGETS, the measured figure).
Result = tuple[dict[str, Any], list[tuple]]


def bench_config(model: str, device: torch.device, overrides: Sequence[str] = ()) -> DictConfig:
    """`python train.py data=synthetic data.num_classes=100 model=<model> <overrides>` on `device`, composed
    without running Hydra's app: synthetic data (nothing to download) and the paper's 100-class head."""
    from hydra import compose, initialize_config_dir

    from ..config import register_resolvers

    if not (CONF_DIR / "train.yaml").exists():
        raise FileNotFoundError(f"{CONF_DIR}/train.yaml not found: run the bench from a checkout of the repository")
    trainer = ["trainer=cpu"] if device.type == "cpu" else ["trainer=default", "trainer.accelerator=gpu"]
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        base = ["data=synthetic", "data.num_classes=100", f"model={model}", *trainer]
        return compose(config_name="train", overrides=[*base, *overrides])


def build_vit(cfg: DictConfig) -> VisionTransformer:
    m = cfg.model
    size, classes = cfg.data.image_size, cfg.data.num_classes
    return VisionTransformer(classes, size, depth=m.depth, dim=m.dim, heads=m.heads, mlp_ratio=m.mlp_ratio)


def model_info(cfg: DictConfig) -> dict[str, Any]:
    """The shape a figure was measured on, for the JSON record."""
    shape = {k: cfg.model[k] for k in ("name", "depth", "dim", "heads", "mlp_ratio")}
    return {**shape, "image_size": cfg.data.image_size, "num_classes": cfg.data.num_classes}


def precision(cfg: DictConfig) -> str:
    """The precision `build_trainer` gives this config's Trainer."""
    return resolve_precision(cfg.trainer.precision, cfg.trainer.accelerator)


def autocast(cfg: DictConfig) -> torch.autocast:
    """That precision in a hand-written step: bf16 autocast iff it resolves to bf16-mixed, else plain fp32."""
    device_type = "cuda" if uses_cuda(cfg.trainer.accelerator) else "cpu"
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision(cfg) == "bf16-mixed")


def train_step(model: nn.Module, cfg: DictConfig, batch: int, device: torch.device) -> Callable[[], None]:
    """Forward + cross-entropy + backward + the project's AdamW on a fixed random batch (data cost excluded)."""
    model.to(device).train()
    optimizer = adamw_with_decay_groups(model, cfg.optim.lr, cfg.optim.weight_decay, tuple(cfg.optim.betas))
    generator = torch.Generator().manual_seed(0)
    size = cfg.data.image_size
    images = torch.randn(batch, 3, size, size, generator=generator).to(device)
    labels = torch.randint(cfg.data.num_classes, (batch,), generator=generator).to(device)
    amp = autocast(cfg)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)  # before the forward: last step's gradients freed, as Lightning does
        with amp:
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()

    return step
