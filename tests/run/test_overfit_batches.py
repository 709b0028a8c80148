"""`debug=overfit` (Lightning's `trainer.overfit_batches`) trains on fixed images: both data paths hand out the same
unaugmented images every epoch and the module mixes nothing (augment/mixing.py); without it, epochs differ."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from helpers import InProcessTraining, typed

from vit_locality.augment.mixing import fixed_batches
from vit_locality.model.classifier import ViTClassifier
from vit_locality.run.builders import build_datamodule, build_module, build_trainer

SMALL = [
    "data=synthetic",
    "model=vit_tiny",
    "data.train_size=96",
    "data.test_size=32",
    "data.batch_size=32",
    "data.num_workers=0",
    "trainer.max_epochs=2",
    "trainer.limit_val_batches=0",
    "trainer.num_sanity_val_steps=0",
    "stats.enabled=false",
    "callbacks.progress_bar=none",
]


def _trained_inputs(overrides: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[int, torch.Tensor]:
    """The pixels the model's forward took in training, per epoch (after the data path and the module's mixing, on
    the 0..255 scale; an epoch's batches concatenated)."""
    seen: dict[int, list[torch.Tensor]] = {}
    forward = ViTClassifier.forward

    def recording(self: ViTClassifier, images: torch.Tensor) -> torch.Tensor:
        if self.training:
            seen.setdefault(self.current_epoch, []).append(images.detach().float().clone())
        return forward(self, images)

    monkeypatch.setattr(ViTClassifier, "forward", recording)
    cfg = typed(overrides)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    trainer = build_trainer(cfg, tmp_path, loggers=[], callbacks=[])
    trainer.fit(module, datamodule=datamodule)
    return {epoch: torch.cat(batches) for epoch, batches in seen.items()}


@pytest.mark.parametrize("on_device", ["false", "true"])
def test_overfitting_sees_the_same_images_every_epoch(
    on_device: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    trains: InProcessTraining,
) -> None:
    """The Modern protocol (crop, flip, AutoAugment, CutMix) under `trainer.overfit_batches=1`: both epochs train on
    identical tensors, the first images of the training set unaugmented; the same cell without it does not."""
    device = f"data.on_device={on_device}"
    with caplog.at_level(logging.INFO, logger="vit_locality"):
        overfit = _trained_inputs(["debug=overfit", *SMALL, device, "protocol=modern"], tmp_path / "a", monkeypatch)
    assert sorted(overfit) == [0, 1] and overfit[0].shape[0] == 32
    assert torch.equal(overfit[0], overfit[1])
    datamodule = build_datamodule(typed([*SMALL, device]))
    datamodule.setup()
    assert torch.equal(overfit[0], datamodule.arrays.train_images[:32].float())  # in order, unaugmented, unmixed
    assert caplog.text.count("trainer.overfit_batches=1: the same training images every epoch") == 1

    plain = _trained_inputs([*SMALL, device, "trainer.limit_train_batches=1"], tmp_path / "b", monkeypatch)
    assert sorted(plain) == [0, 1] and not torch.equal(plain[0], plain[1])


def test_the_switch_is_lightnings_setting_alone() -> None:
    class Trainer:
        def __init__(self, overfit: int | float) -> None:
            self.overfit_batches = overfit

    assert fixed_batches(Trainer(1)) and fixed_batches(Trainer(0.5))
    assert not fixed_batches(Trainer(0)) and not fixed_batches(Trainer(0.0)) and not fixed_batches(None)
