"""Datamodules by name, as `data.name` in the config selects them (the names themselves: vit_locality.domain)."""

from __future__ import annotations

from .base import DataError, ImageArrays, ImageDataModule, UInt8ImageDataset
from .cifar import CIFAR10DataModule, CIFAR100DataModule
from .synthetic import SyntheticDataModule
from .tiny_imagenet import TinyImageNetDataModule

DATAMODULES: dict[str, type[ImageDataModule]] = {
    cls.name: cls for cls in (CIFAR10DataModule, CIFAR100DataModule, TinyImageNetDataModule, SyntheticDataModule)
}


def datamodule_class(name: str) -> type[ImageDataModule]:
    """The datamodule class `data.name` selects; an unknown name is a ValueError listing the known ones."""
    try:
        return DATAMODULES[name]
    except KeyError:
        raise ValueError(f"data.name={name!r}: allowed values are {', '.join(DATAMODULES)}") from None


__all__ = [
    "DATAMODULES",
    "DataError",
    "ImageArrays",
    "ImageDataModule",
    "SyntheticDataModule",
    "UInt8ImageDataset",
    "datamodule_class",
]
