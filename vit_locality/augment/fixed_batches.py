"""Fixed training batches while Lightning overfits (`trainer.overfit_batches` > 0): an overfitting check needs the
same pixels every epoch, so both data paths hand out the same images in data set order, unaugmented and unmixed."""

from __future__ import annotations

from typing import Any

FIXED_BATCHES_LINE = (
    "trainer.overfit_batches=%s: the same training images every epoch, in data set order; random crop, flip, "
    "AutoAugment, ColorJitter, CutMix and MixUp are off"
)


def fixed_batches(trainer: Any) -> bool:
    """Whether `trainer` (a Lightning Trainer, or None outside a fit) overfits a few batches."""
    overfit = getattr(trainer, "overfit_batches", 0) if trainer is not None else 0
    return isinstance(overfit, int | float) and overfit > 0
