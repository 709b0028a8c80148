"""CIFAR-10 and CIFAR-100 from the official python pickles, without torchvision's loader.

torchvision's CIFAR classes unpickle with plain `pickle` and refuse any file whose md5 is not the official
one, which rules out fake files in tests. Here `verify=True` keeps the md5 checks for real data,
`verify=False` loads files as they are, and every pickle goes through the restricted unpickler.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from vit_locality.data.base import DataError, ImageArrays
from vit_locality.data.download import ArchiveSpec, check_file
from vit_locality.data.downloadable import DownloadableDataModule
from vit_locality.data.safe_pickle import load_pickle

_PIXELS = 3 * 32 * 32


@dataclass(frozen=True)
class CifarLayout:
    """What one CIFAR variant's extracted files are called, which keys they use, and their official md5s."""

    train: tuple[str, ...]
    test: tuple[str, ...]
    meta: str
    md5: dict[str, str]  # per extracted file
    label_key: str
    names_key: str

    @property
    def files(self) -> tuple[str, ...]:
        return (*self.train, *self.test, self.meta)


class _CifarDataModule(DownloadableDataModule):
    """Shared loader; subclasses only name their archive, file layout and statistics.

    With `verify`, every extracted file's md5 is checked as well as the archive's.
    """

    layout: ClassVar[CifarLayout]
    image_size = 32

    def required_files(self) -> tuple[Path, ...]:
        return tuple(self.folder / name for name in self.layout.files)

    def load_arrays(self) -> ImageArrays:
        self.ensure_extracted()
        if self.verify:
            for path in self.required_files():
                check_file(
                    path,
                    md5=self.layout.md5[path.name],
                    hint=f"the file is corrupted or incomplete: {self.redo_hint(path)}",
                )
        class_names = self._read_names(self.folder / self.layout.meta)
        train = [self._read_batch(self.folder / name) for name in self.layout.train]
        test = [self._read_batch(self.folder / name) for name in self.layout.test]
        return ImageArrays(
            train_images=torch.from_numpy(np.concatenate([images for images, _ in train])),
            train_labels=torch.from_numpy(np.concatenate([labels for _, labels in train])),
            test_images=torch.from_numpy(np.concatenate([images for images, _ in test])),
            test_labels=torch.from_numpy(np.concatenate([labels for _, labels in test])),
            class_names=class_names,
        )

    def _read_names(self, path: Path) -> list[str]:
        redo = self.redo_hint(path)
        if not path.is_file():
            raise DataError(f"{self.name}: meta file {path} is missing; {redo}")
        meta = load_pickle(path, hint=redo)
        key = self.layout.names_key
        names = meta.get(key) if isinstance(meta, dict) else None
        if not isinstance(names, list) or len(names) != self.num_classes:
            found = len(names) if isinstance(names, list) else "no"
            raise DataError(
                f"{path}: expected a dict whose {key!r} lists {self.num_classes} class names, found {found}; {redo}"
            )
        return [str(name) for name in names]

    def _read_batch(self, path: Path) -> tuple[np.ndarray, np.ndarray]:
        """One batch file as uint8 (N, 3, 32, 32) images and int64 labels.

        A row is the R plane, then G, then B, each 32 x 32 row-major, so a plain reshape gives (3, 32, 32).
        """
        redo = self.redo_hint(path)
        if not path.is_file():
            raise DataError(f"{self.name}: batch file {path} is missing; {redo}")
        batch = load_pickle(path, hint=redo)
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


class CIFAR10DataModule(_CifarDataModule):
    """CIFAR-10: 50k train / 10k test, 32 px, 10 classes."""

    name = "cifar10"
    num_classes = 10
    mean = (0.4914, 0.4822, 0.4465)
    std = (0.2470, 0.2435, 0.2616)
    archive = ArchiveSpec(
        url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        filename="cifar-10-python.tar.gz",
        size=170_498_071,
        md5="c58f30108f718f92721af3b95e74349a",
        folder="cifar-10-batches-py",
    )
    layout = CifarLayout(
        train=tuple(f"data_batch_{i}" for i in range(1, 6)),
        test=("test_batch",),
        meta="batches.meta",
        md5={
            "data_batch_1": "c99cafc152244af753f735de768cd75f",
            "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
            "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
            "data_batch_4": "634d18415352ddfa80567beed471001a",
            "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
            "test_batch": "40351d587109b95175f43aff81a1287e",
            "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
        },
        label_key="labels",
        names_key="label_names",
    )


class CIFAR100DataModule(_CifarDataModule):
    """CIFAR-100 (fine labels): 50k train / 10k test, 32 px, 100 classes."""

    name = "cifar100"
    num_classes = 100
    mean = (0.5071, 0.4865, 0.4409)
    std = (0.2673, 0.2564, 0.2762)
    archive = ArchiveSpec(
        url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        filename="cifar-100-python.tar.gz",
        size=169_001_437,
        md5="eb9058c3a382ffc7106e4002c42a8d85",
        folder="cifar-100-python",
    )
    layout = CifarLayout(
        train=("train",),
        test=("test",),
        meta="meta",
        md5={
            "train": "16019d7e3df5f24257cddd939b257f8d",
            "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
            "meta": "7973b15100ade9c7d40fb424638fde48",
        },
        label_key="fine_labels",
        names_key="fine_label_names",
    )
