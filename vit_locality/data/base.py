"""What every datamodule shares: uint8 images in memory, per-sample transforms in workers, plain loaders.

Images stay uint8 from disk to the device: converting every image to float in the workers costs about as much
as augmenting it, and a uint8 batch is a quarter of the bytes to copy. The LightningModule converts and
normalises once per batch.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from vit_locality.domain import DATASET_DEFAULT_POLICY


class DataError(RuntimeError):
    """A data set is missing, corrupted or malformed; the message names the file and what to do."""


@dataclass
class ImageArrays:
    """Both splits of a data set as uint8 (N, 3, H, W) tensors and int64 labels."""

    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor
    class_names: list[str]

    def check(self, source: str, image_size: int, num_classes: int) -> None:
        """Fail loudly on shapes or labels that would otherwise surface deep inside training."""
        for split, images, labels in (
            ("train", self.train_images, self.train_labels),
            ("test", self.test_images, self.test_labels),
        ):
            expected = (3, image_size, image_size)
            if images.dtype != torch.uint8 or images.ndim != 4 or tuple(images.shape[1:]) != expected:
                raise DataError(
                    f"{source}: {split} images have shape {tuple(images.shape)} and dtype {images.dtype}, "
                    f"expected (N, {', '.join(map(str, expected))}) uint8"
                )
            if len(images) != len(labels):
                raise DataError(f"{source}: {split} has {len(images)} images but {len(labels)} labels")
            if len(labels) and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
                raise DataError(
                    f"{source}: {split} labels span [{int(labels.min())}, {int(labels.max())}], "
                    f"expected [0, {num_classes - 1}]"
                )
        if len(self.class_names) != num_classes:
            raise DataError(f"{source}: {len(self.class_names)} class names, expected {num_classes}")


class UInt8ImageDataset(Dataset):
    """Indexes a uint8 image tensor; the optional transform maps a (3, H, W) uint8 tensor to another."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.images = images
        self.labels = labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.labels[index])


class ImageDataModule(L.LightningDataModule):
    """Base datamodule: subclasses only say how to obtain the uint8 arrays (`load_arrays`).

    The evaluation split is the official test set unless `val_size` > 0, in which case that many training
    images (a fixed, seeded choice) are held out and evaluated instead; `test_dataloader` is always the test set.
    """

    name: str = "base"
    image_size: int = 32
    num_classes: int = 10
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.25, 0.25, 0.25)

    def __init__(
        self,
        root: str = "data",
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int = 2,
        val_size: int = 0,
        split_seed: int = 0,
        pin_memory: bool | None = None,
        persistent_workers: bool = True,
        train_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.root = root
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.val_size = val_size
        self.split_seed = split_seed
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.persistent_workers = persistent_workers
        self.train_transform = train_transform
        self.arrays: ImageArrays | None = None
        self._train_index: torch.Tensor | None = None
        self._val_index: torch.Tensor | None = None

    @property
    def default_policy(self) -> str:
        """What `aug.policy=auto` means on this data set, read from the one table of it in vit_locality.domain."""
        return DATASET_DEFAULT_POLICY[self.name]

    @abstractmethod
    def load_arrays(self) -> ImageArrays:
        """Return both splits, downloading or decoding as needed; raise DataError with the file on failure."""

    def setup(self, stage: str | None = None) -> None:
        if self.arrays is not None:
            return
        arrays = self.load_arrays()
        arrays.check(self.name, self.image_size, self.num_classes)
        n_train = len(arrays.train_labels)
        if not 0 <= self.val_size < n_train:
            raise DataError(
                f"data.val_size={self.val_size}: must be in [0, {n_train - 1}] for {self.name} ({n_train} train)"
            )
        order = torch.randperm(n_train, generator=torch.Generator().manual_seed(self.split_seed))
        self._val_index = order[: self.val_size].sort().values
        self._train_index = order[self.val_size :].sort().values if self.val_size else torch.arange(n_train)
        if len(self._train_index) < self.batch_size:
            raise DataError(
                f"data.batch_size={self.batch_size} exceeds the {len(self._train_index)} training images "
                f"of {self.name}: lower the batch size or use more data"
            )
        self.arrays = arrays

    def _loaded_arrays(self) -> ImageArrays:
        """The arrays, loading them first (`setup`) if nothing has yet."""
        if self.arrays is None:
            self.setup()
        assert self.arrays is not None
        return self.arrays

    @property
    def num_train(self) -> int:
        self._loaded_arrays()
        assert self._train_index is not None
        return len(self._train_index)

    def eval_split(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Images and labels of the evaluation split (held-out val when `val_size` > 0, else the test set)."""
        arrays = self._loaded_arrays()
        if self.val_size:
            return arrays.train_images[self._val_index], arrays.train_labels[self._val_index]
        return arrays.test_images, arrays.test_labels

    def probe_images(self, count: int) -> torch.Tensor:
        """The first `count` images of the evaluation split, unaugmented: the same for every protocol cell."""
        images, _ = self.eval_split()
        return images[:count]

    def _loader(self, dataset: Dataset, shuffle: bool, batch_size: int) -> DataLoader:
        workers = self.num_workers
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=shuffle,  # full training batches keep CutMix and the per-step schedule uniform
            num_workers=workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers and workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        arrays = self._loaded_arrays()
        images = arrays.train_images[self._train_index] if self.val_size else arrays.train_images
        labels = arrays.train_labels[self._train_index] if self.val_size else arrays.train_labels
        return self._loader(UInt8ImageDataset(images, labels, self.train_transform), True, self.batch_size)

    def val_dataloader(self) -> DataLoader:
        images, labels = self.eval_split()
        return self._loader(UInt8ImageDataset(images, labels), False, self.eval_batch_size)

    def test_dataloader(self) -> DataLoader:
        arrays = self._loaded_arrays()
        return self._loader(UInt8ImageDataset(arrays.test_images, arrays.test_labels), False, self.eval_batch_size)
