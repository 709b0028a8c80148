"""Datamodules by name, as `data.name` in the config selects them."""

from __future__ import annotations

from .base import DataError, ImageArrays, ImageDataModule, UInt8ImageDataset
from .synthetic import SyntheticDataModule


def datamodule_class(name: str) -> type[ImageDataModule]:
    """Look up a datamodule; the real data sets are imported lazily so the synthetic path stays light."""
    if name == "synthetic":
        return SyntheticDataModule
    if name in ("cifar10", "cifar100"):
        from .cifar import CIFAR10DataModule, CIFAR100DataModule

        return CIFAR10DataModule if name == "cifar10" else CIFAR100DataModule
    if name == "tiny_imagenet":
        from .tiny_imagenet import TinyImageNetDataModule

        return TinyImageNetDataModule
    raise ValueError(f"data.name={name!r}: allowed values are {', '.join(DATASETS)}")


DATASETS = ("cifar10", "cifar100", "tiny_imagenet", "synthetic")

__all__ = [
    "DATASETS",
    "DataError",
    "ImageArrays",
    "ImageDataModule",
    "SyntheticDataModule",
    "UInt8ImageDataset",
    "datamodule_class",
]
