"""Datamodules by `data.name` (the names: vit_locality.catalog), each module imported only when its data set is
chosen, so a synthetic run never loads the pickle reader, the downloader or the Tiny-ImageNet reader."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from vit_locality.data.base import DataError, ImageArrays, ImageDataModule, UInt8ImageDataset

# data.name -> "module:class"
DATAMODULES: dict[str, str] = {
    "cifar10": "vit_locality.data.cifar:CIFAR10DataModule",
    "cifar100": "vit_locality.data.cifar:CIFAR100DataModule",
    "tiny_imagenet": "vit_locality.data.tiny_imagenet:TinyImageNetDataModule",
    "synthetic": "vit_locality.data.synthetic:SyntheticDataModule",
    "glyphs": "vit_locality.data.glyphs:GlyphsDataModule",
}


def _load(path: str) -> type[ImageDataModule]:
    module, name = path.split(":")
    return getattr(import_module(module), name)


def datamodule_class(name: str) -> type[ImageDataModule]:
    """The datamodule class `data.name` selects; an unknown name is a ValueError listing the known ones."""
    if name not in DATAMODULES:
        raise ValueError(f"data.name={name!r}: allowed values are {', '.join(DATAMODULES)}")
    return _load(DATAMODULES[name])


def __getattr__(attr: str) -> Any:
    """`from vit_locality.data import SyntheticDataModule` and the like, imported on first use."""
    for path in DATAMODULES.values():
        if path.endswith(f":{attr}"):
            return _load(path)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


__all__ = ["DATAMODULES", "DataError", "ImageArrays", "ImageDataModule", "UInt8ImageDataset", "datamodule_class"]
