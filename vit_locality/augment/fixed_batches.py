"""Fixed training batches while Lightning overfits (`trainer.overfit_batches` > 0).

An overfitting check asks whether the model, the loss and the optimiser can drive the loss of the same few images
towards 0. A random crop, flip, AutoAugment, CutMix or MixUp would show it other pixels every epoch, so both data
paths (data/base.py, data/on_device.py) hand out the same images in data set order, unaugmented, and the
LightningModule mixes nothing. The switch is Lightning's own setting, which is part of every run's identity already.
"""

from __future__ import annotations

from typing import Any

FIXED_BATCHES_LINE = (
    "trainer.overfit_batches=%s: the same training images every epoch, in data set order; random crop, flip, "
    "AutoAugment, ColorJitter, CutMix and MixUp are off"
)


def fixed_batches(trainer: Any) -> bool:
    """Whether `trainer` (a Lightning Trainer, or None outside a fit) overfits a few batches: then every training
    batch is the same images, unaugmented and unmixed."""
    overfit = getattr(trainer, "overfit_batches", 0) if trainer is not None else 0
    return isinstance(overfit, int | float) and overfit > 0
