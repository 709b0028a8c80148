"""A run's trained model and probe images without Lightning or Hydra, from its last checkpoint and recorded config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vit_locality.model.vit import VisionTransformer
from vit_locality.run.checkpoints import last_checkpoint, load_checkpoint_bytes
from vit_locality.store.file_read import CHECKPOINT_SIZE_LIMIT, read_regular_file

MODEL_ENTRIES = ("state_dict", "hyper_parameters")  # what rebuilding the model needs from a checkpoint


def read_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    """The run's last checkpoint, read through the bounded reader of run files; None when it has none."""
    path = last_checkpoint(run_dir)
    if not path.exists() and not path.is_symlink():
        return None
    return load_checkpoint_bytes(read_regular_file(path, CHECKPOINT_SIZE_LIMIT), path, MODEL_ENTRIES)


def model_from_checkpoint(checkpoint: dict[str, Any]) -> VisionTransformer:
    """The ViT the checkpoint's LightningModule held, weights loaded, in eval mode."""
    hparams = checkpoint["hyper_parameters"]
    size, classes = int(hparams["image_size"]), int(hparams["num_classes"])
    model = VisionTransformer(num_classes=classes, image_size=size, **hparams["model"])
    weights = checkpoint["state_dict"].items()
    model.load_state_dict({k.removeprefix("model."): v for k, v in weights if k.startswith("model.")})
    return model.eval()


def position_embedding(checkpoint: dict[str, Any]) -> torch.Tensor:
    """The learned (1, 1 + g*g, dim) position embedding, straight from the weights."""
    return checkpoint["state_dict"]["model.pos_embed"].float()


def normalise(images: torch.Tensor, checkpoint: dict[str, Any]) -> torch.Tensor:
    """uint8 (N, 3, H, W) -> the float input the model was trained on (the module's per-channel mean and std)."""
    hparams = checkpoint["hyper_parameters"]
    mean = torch.tensor(hparams["mean"]).view(1, 3, 1, 1) * 255.0
    std = torch.tensor(hparams["std"]).view(1, 3, 1, 1) * 255.0
    return (images.float() - mean) / std


def probe_images(config: dict[str, Any], count: int) -> torch.Tensor:
    """The run's probe set (its first `count` evaluation images, unaugmented), rebuilt from its recorded config."""
    from vit_locality.config.settings import RunSettings
    from vit_locality.run.builders import build_datamodule

    settings = RunSettings.from_record(config)
    local = {"num_workers": 0} | ({"download": False} if "download" in type(settings.data).model_fields else {})
    datamodule = build_datamodule(settings.model_copy(update={"data": settings.data.model_copy(update=local)}))
    datamodule.setup("validate")
    return datamodule.probe_images(count).cpu()
