"""What the bench sections share: the model configurations, precision per device, and one training step."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import nn

from ..model import VisionTransformer


@dataclass(frozen=True)
class ModelConfig:
    """A ViT shape as the bench names it; `name` matches conf/model/<name>.yaml."""

    name: str
    depth: int
    dim: int
    heads: int
    mlp_ratio: float = 2.0
    image_size: int = 32
    num_classes: int = 100

    def build(self) -> VisionTransformer:
        return VisionTransformer(
            num_classes=self.num_classes,
            image_size=self.image_size,
            depth=self.depth,
            dim=self.dim,
            heads=self.heads,
            mlp_ratio=self.mlp_ratio,
        )

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


PAPER = ModelConfig("vit_paper", depth=8, dim=192, heads=8)
TINY = ModelConfig("vit_tiny", depth=4, dim=64, heads=4)


def precision_name(device: torch.device) -> str:
    """The precision the project trains in on this device (pipeline.resolve_precision's `auto`)."""
    return "bf16 autocast" if device.type == "cuda" else "fp32"


def autocast(device: torch.device) -> AbstractContextManager:
    """bf16 autocast on CUDA; nothing on CPU, where bf16 autocast is about 3x slower than fp32."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def make_train_step(model: nn.Module, config: ModelConfig, batch: int, device: torch.device) -> Callable[[], None]:
    """Forward + cross-entropy + backward + AdamW step on a fixed random batch (data cost excluded)."""
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    generator = torch.Generator().manual_seed(0)
    size = config.image_size
    images = torch.randn(batch, 3, size, size, generator=generator).to(device)
    labels = torch.randint(config.num_classes, (batch,), generator=generator).to(device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)  # before the forward: last step's gradients freed, as Lightning does
        with autocast(device):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()

    return step


def conf_dir() -> Path:
    """The project's Hydra configs (next to the package in a checkout; the bench is a development tool)."""
    path = Path(__file__).resolve().parents[2] / "conf"
    if not (path / "train.yaml").exists():
        raise FileNotFoundError(f"{path}/train.yaml not found: run the bench from a checkout of the repository")
    return path


def compose_config(overrides: list[str]) -> DictConfig:
    """The config a user gets from `python train.py <overrides>`, composed without running Hydra's app."""
    from hydra import compose, initialize_config_dir

    from ..config import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)
