"""Datamodules by name, as `data.name` in the config selects them (the names themselves: vit_locality.catalog)."""

from __future__ import annotations

from vit_locality.data.base import DataError, ImageArrays, ImageDataModule, UInt8ImageDataset
from vit_locality.data.cifar import CIFAR10DataModule, CIFAR100DataModule
from vit_locality.data.glyphs import GlyphsDataModule
from vit_locality.data.synthetic import SyntheticDataModule
from vit_locality.data.tiny_imagenet import TinyImageNetDataModule

DATAMODULES: dict[str, type[ImageDataModule]] = {
    cls.name: cls
    for cls in (CIFAR10DataModule, CIFAR100DataModule, TinyImageNetDataModule, SyntheticDataModule, GlyphsDataModule)
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
    "GlyphsDataModule",
    "ImageArrays",
    "ImageDataModule",
    "SyntheticDataModule",
    "UInt8ImageDataset",
    "datamodule_class",
]
