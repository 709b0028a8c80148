"""Datamodules by `data.name`, read from each data set's declaration (vit_locality.datasets), each module imported
only when its data set is chosen, so a synthetic run never loads the pickle reader, the downloader or the
Tiny-ImageNet reader, and the pre-check reads the declarations without torch."""

from __future__ import annotations

from typing import Any

from vit_locality.datasets import BUILT_IN, load

# data.name -> "module:class": a view of the declarations, kept for callers that list them.
DATAMODULES: dict[str, str] = {name: spec.datamodule for name, spec in BUILT_IN.items()}
_BASE = ("DataError", "ImageArrays", "ImageDataModule", "UInt8ImageDataset")


def datamodule_class(name: str) -> Any:
    """The datamodule class `data.name` selects; an unknown name is a ValueError listing the known ones."""
    if name not in BUILT_IN:
        raise ValueError(f"data.name={name!r}: allowed values are {', '.join(BUILT_IN)}")
    return BUILT_IN[name].datamodule_class()


def __getattr__(attr: str) -> Any:
    """`from vit_locality.data import SyntheticDataModule` (or DataError, ...) and the like, imported on first use."""
    if attr in _BASE:
        return load(f"vit_locality.data.base:{attr}")
    for path in DATAMODULES.values():
        if path.endswith(f":{attr}"):
            return load(path)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


__all__ = ["DATAMODULES", "DataError", "ImageArrays", "ImageDataModule", "UInt8ImageDataset", "datamodule_class"]
