"""The datamodule a data section selects, read from its data set's declaration (vit_locality.datasets): only the
chosen data set's module is imported, so a synthetic run never loads the pickle reader, downloader or other readers."""

from __future__ import annotations

from typing import Any

from vit_locality.datasets import spec_of


def datamodule_class(name: str, module: str | None = None) -> Any:
    """The datamodule class of data set `name`, declared in `module` (None: the built-in ones)."""
    return spec_of(name, module).datamodule_class()


def __getattr__(attr: str) -> Any:
    """`from vit_locality.data import ImageDataModule` (or a built-in datamodule), imported on first use."""
    from importlib import import_module

    from vit_locality.datasets import built_in

    if attr in ("DataError", "ImageArrays", "ImageDataModule", "UInt8ImageDataset"):
        return getattr(import_module("vit_locality.data.base"), attr)
    for spec in built_in().values():
        if spec.datamodule == attr:
            return spec.datamodule_class()
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
