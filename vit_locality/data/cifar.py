"""CIFAR-10 and CIFAR-100 from the official python pickles, with torchvision's file lists but not its loader: every
pickle goes through the restricted unpickler, and `verify=False` loads files whose md5s are not official (tests)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torchvision import datasets as torchvision_sets

from vit_locality.data.base import DataError, ImageArrays
from vit_locality.data.download import DownloadableDataModule, check_file
from vit_locality.data.safe_pickle import load_pickle
from vit_locality.datasets import Archive, DatasetSpec

_PIXELS = 3 * 32 * 32

# Archive names and md5s as torchvision's CIFAR10 and CIFAR100 (tests/data/test_dataset_declaration.py).
CIFAR10 = DatasetSpec(
    name="cifar10",
    default_policy="cifar10",
    config="vit_locality.config.schema:DownloadableDataConfig",
    datamodule="CIFAR10DataModule",
    archives=(
        Archive(
            "cifar-10-batches-py",
            "cifar-10-python.tar.gz",
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
            170_498_071,
            "c58f30108f718f92721af3b95e74349a",
        ),
    ),
    train_images=50_000,
    num_classes=10,
    image_size=32,
)
CIFAR100 = DatasetSpec(
    name="cifar100",
    default_policy="cifar10",
    config="vit_locality.config.schema:DownloadableDataConfig",
    datamodule="CIFAR100DataModule",
    archives=(
        Archive(
            "cifar-100-python",
            "cifar-100-python.tar.gz",
            "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
            169_001_437,
            "eb9058c3a382ffc7106e4002c42a8d85",
        ),
    ),
    train_images=50_000,
    num_classes=100,
    image_size=32,
)


@dataclass(frozen=True)
class CifarLayout:
    """What one CIFAR variant's extracted files are called, which keys they use, and their official md5s."""

    train: tuple[str, ...]
    test: tuple[str, ...]
    meta: str
    md5: dict[str, str]  # per extracted file
    label_key: str
    names_key: str


class _CifarDataModule(DownloadableDataModule):
    """Shared loader; subclasses name their archive, layout and statistics. `verify` checks every file's md5 too."""

    layout: ClassVar[CifarLayout]
    image_size = 32

    def required_files(self) -> tuple[Path, ...]:
        return tuple(self.folder / name for name in (*self.layout.train, *self.layout.test, self.layout.meta))

    def load_arrays(self) -> ImageArrays:
        self.ensure_extracted()
        if self.verify:
            for path in self.required_files():
                hint = f"the file is corrupted or incomplete: {self.redo_hint(path)}"
                check_file(path, md5=self.layout.md5[path.name], hint=hint)
        class_names = self._read_names(self.folder / self.layout.meta)
        train, test = self._read_split(self.layout.train), self._read_split(self.layout.test)
        return ImageArrays(*train, *test, class_names=class_names)

    def _read_split(self, names: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = zip(*(self._read_batch(self.folder / name) for name in names), strict=True)
        return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))

    def _load(self, path: Path, kind: str) -> tuple[Any, str]:
        """The unpickled `kind` file, and the hint that says how to replace it."""
        redo = self.redo_hint(path)
        if not path.is_file():
            raise DataError(f"{self.name}: {kind} file {path} is missing; {redo}")
        return load_pickle(path, hint=redo), redo

    def _read_names(self, path: Path) -> list[str]:
        meta, redo = self._load(path, "meta")
        key = self.layout.names_key
        names = meta.get(key) if isinstance(meta, dict) else None
        if not isinstance(names, list) or len(names) != self.num_classes:
            found = len(names) if isinstance(names, list) else "no"
            raise DataError(
                f"{path}: expected a dict whose {key!r} lists {self.num_classes} class names, found {found}; {redo}"
            )
        return [str(name) for name in names]

    def _read_batch(self, path: Path) -> tuple[np.ndarray, np.ndarray]:
        """One batch file as uint8 (N, 3, 32, 32) images (rows hold the R, G, B planes) and int64 labels."""
        batch, redo = self._load(path, "batch")
        key = self.layout.label_key
        if not isinstance(batch, dict) or "data" not in batch or key not in batch:
            raise DataError(f"{path}: expected a dict with 'data' and {key!r}; {redo}")
        data = batch["data"]
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != _PIXELS:
            shape = getattr(data, "shape", type(data).__name__)
            dtype = getattr(data, "dtype", "?")
            raise DataError(
                f"{path}: 'data' has shape {shape} and dtype {dtype}, expected (N, {_PIXELS}) uint8; {redo}"
            )
        labels = np.asarray(batch[key])
        if labels.ndim != 1 or len(labels) != len(data) or (len(labels) and labels.dtype.kind not in "iu"):
            raise DataError(
                f"{path}: {key!r} should hold {len(data)} integer labels, found shape {labels.shape} of "
                f"{labels.dtype}; {redo}"
            )
        if len(labels) and (labels.min() < 0 or labels.max() >= self.num_classes):
            raise DataError(
                f"{path}: labels span [{labels.min()}, {labels.max()}], expected [0, {self.num_classes - 1}]; {redo}"
            )
        return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def _official(dataset: type[torchvision_sets.CIFAR10], label_key: str) -> CifarLayout:
    """The extracted files torchvision's class lists, with their md5s (the archive is the data set's declaration)."""
    meta = dataset.meta
    return CifarLayout(
        train=tuple(name for name, _ in dataset.train_list),
        test=tuple(name for name, _ in dataset.test_list),
        meta=meta["filename"],
        md5=dict(dataset.train_list + dataset.test_list + [[meta["filename"], meta["md5"]]]),
        label_key=label_key,
        names_key=meta["key"],
    )


class CIFAR10DataModule(_CifarDataModule):
    """CIFAR-10: 50k train / 10k test, 32 px, 10 classes."""

    name = "cifar10"
    num_classes = 10
    mean = (0.4914, 0.4822, 0.4465)
    std = (0.2470, 0.2435, 0.2616)
    archive = CIFAR10.archive()
    layout = _official(torchvision_sets.CIFAR10, label_key="labels")


class CIFAR100DataModule(_CifarDataModule):
    """CIFAR-100 (fine labels): 50k train / 10k test, 32 px, 100 classes."""

    name = "cifar100"
    num_classes = 100
    mean = (0.5071, 0.4865, 0.4409)
    std = (0.2673, 0.2564, 0.2762)
    archive = CIFAR100.archive()
    layout = _official(torchvision_sets.CIFAR100, label_key="fine_labels")
