"""What every datamodule shares: uint8 images in memory (the LightningModule converts and normalises per batch),
per-sample transforms in workers or batched ones on the device, and plain loaders."""

from __future__ import annotations

import logging
import warnings
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, SequentialSampler

from vit_locality.augment.mixing import FIXED_BATCHES_LINE, fixed_batches
from vit_locality.data.fingerprint import data_fingerprint
from vit_locality.data.on_device import BatchAugment, DeviceArrays, DeviceEvalLoader, DeviceTrainLoader
from vit_locality.data.sampling import EpochShardSampler, SampleDraw, transform_seeded
from vit_locality.data.workers import WORKER_START_METHOD, init_data_worker, usable_workers
from vit_locality.errors import VitLocalityError
from vit_locality.upstream import batches_completed_in_epoch, epochs_processed

log = logging.getLogger("vit_locality")
MID_EPOCH_RESUME_WARNING = "You're resuming from a checkpoint that ended before the epoch ended"
Transform = Callable[[torch.Tensor], torch.Tensor]


class DataError(VitLocalityError, RuntimeError):
    """A data set is missing, corrupted or malformed; the message names the file and what to do."""

    exit_code = 2


@dataclass
class ImageArrays:
    """Both splits of a data set as uint8 (N, 3, H, W) tensors and int64 labels."""

    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor
    class_names: list[str]

    @property
    def train(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.train_images, self.train_labels

    @property
    def test(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.test_images, self.test_labels

    def check(self, source: str, image_size: int, num_classes: int) -> None:
        """Fail loudly on shapes or labels that would otherwise surface deep inside training."""
        for split, (images, labels) in (("train", self.train), ("test", self.test)):
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
    """Indexes uint8 images; a `SampleDraw` key (the training sampler's) runs the transform on its own seed."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform: Transform | None = None) -> None:
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: int | SampleDraw) -> tuple[torch.Tensor, int]:
        index, seed = (key.index, key.seed) if isinstance(key, SampleDraw) else (key, None)
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image) if seed is None else transform_seeded(self.transform, image, seed)
        return image, int(self.labels[index])


class ImageDataModule(L.LightningDataModule):
    """Base datamodule: subclasses say how to get the uint8 arrays. Evaluation is on the test set or on `val_size`
    held-out training images; `on_device` augments on the device (`batch_augment`), else `train_transform`."""

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
        train_transform: Transform | None = None,
        seed: int = 0,
        on_device: bool = False,
    ) -> None:
        super().__init__()
        self.root, self.seed, self.on_device = root, seed, on_device
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.val_size, self.split_seed = val_size, split_seed
        self.num_workers, self.persistent_workers = num_workers, persistent_workers
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.train_transform = train_transform
        self.batch_augment: BatchAugment | None = None
        self.step_augment: BatchAugment | None = None  # a compiled step's on-device augmentation (run/builders.py)
        self._device_arrays: DeviceArrays | None = None
        self.start_epoch = 0  # the epoch a resumed fit's first training loader draws (load_state_dict)
        self.start_batches = 0  # the batches of start_epoch a stopped fit trained already (load_state_dict)
        self.arrays: ImageArrays | None = None
        self._train_index: torch.Tensor | None = None
        self._val_index: torch.Tensor | None = None
        self._fingerprint: dict[str, Any] | None = None
        self._workers_said: set[tuple[int, int]] = set()  # worker caps logged already (workers.usable_workers)

    @abstractmethod
    def load_arrays(self) -> ImageArrays:
        """Return both splits, downloading or decoding as needed; raise DataError with the file on failure."""

    def setup(self, stage: str | None = None) -> None:
        if self.arrays is not None:
            return
        arrays = self.load_arrays()
        arrays.check(self.name, self.image_size, self.num_classes)
        n_train = len(arrays.train_labels)
        if not 0 <= self.val_size < n_train:  # the files read may hold fewer images than the official set
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
        if self.arrays is None:
            self.setup()
        assert self.arrays is not None
        return self.arrays

    @property
    def num_train(self) -> int:
        return len(self._loaded_arrays().train_labels) - self.val_size

    def eval_split(self) -> tuple[torch.Tensor, torch.Tensor]:
        arrays = self._loaded_arrays()
        if self.val_size:
            return arrays.train_images[self._val_index], arrays.train_labels[self._val_index]
        return arrays.test

    def fingerprint(self) -> dict[str, Any]:
        """The data fingerprint (fingerprint.py) of the training set as read, the evaluation split and the test set."""
        if self._fingerprint is None:
            arrays = self._loaded_arrays()
            self._fingerprint = data_fingerprint(
                {"train": arrays.train, "eval": self.eval_split(), "test": arrays.test}
            )
        return self._fingerprint

    def probe_images(self, count: int) -> torch.Tensor:
        """The first `count` images of the evaluation split, unaugmented: the same in every protocol cell."""
        images, _ = self.device_arrays().evaluation if self.on_device else self.eval_split()
        return images[:count]

    def _placement(self) -> tuple[torch.device, int, int]:
        """(training device, number of processes, rank); one CPU process without a Trainer."""
        if self.trainer is None:
            return torch.device("cpu"), 1, 0
        return self.trainer.strategy.root_device, self.trainer.world_size, self.trainer.global_rank

    def device_arrays(self, device: torch.device | None = None) -> DeviceArrays:
        """The splits on `device` (default: the training device), copied there on first use and kept."""
        device = self._placement()[0] if device is None else device
        if self._device_arrays is None or self._device_arrays.device != device:
            test = self._loaded_arrays().test
            self._device_arrays = DeviceArrays(device, self._train_split(), self.eval_split(), test)
        return self._device_arrays

    def _train_split(self) -> tuple[torch.Tensor, torch.Tensor]:
        arrays = self._loaded_arrays()
        if self.val_size:
            return arrays.train_images[self._train_index], arrays.train_labels[self._train_index]
        return arrays.train

    def state_dict(self) -> dict[str, Any]:
        """The epoch and batches a resumed fit starts from (Lightning restores its own after building loaders)."""
        if (trainer := self.trainer) is None:
            return {}
        return {"train_epoch": epochs_processed(trainer), "train_batches": batches_completed_in_epoch(trainer)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.start_epoch = int(state_dict.get("train_epoch", 0))
        self.start_batches = int(state_dict.get("train_batches", 0))
        if self.start_batches:
            log.info("resuming epoch %d after its batch %d", self.start_epoch + 1, self.start_batches)
            # Lightning would warn that a mid-epoch resume repeats batches; train_dataloader skips them.
            warnings.filterwarnings("ignore", message=MID_EPOCH_RESUME_WARNING)

    def _loader(self, dataset: Dataset, batch_size: int, sampler: Sampler | None = None) -> DataLoader:
        """A training loader (full batches) given a sampler, else one in order; seeded by its own generator."""
        workers = usable_workers(self.num_workers, self._workers_said)
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            drop_last=sampler is not None,
            num_workers=workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers and workers > 0,
            generator=torch.Generator().manual_seed(self.seed),
            worker_init_fn=init_data_worker,
            multiprocessing_context=WORKER_START_METHOD if workers > 0 else None,
        )

    def train_dataloader(self) -> DataLoader | DeviceTrainLoader:
        """The training loader: the first one skips `start_batches`; fixed batches while Lightning overfits."""
        _, world, rank = self._placement()
        done, self.start_batches = self.start_batches, 0  # a loader built later starts its epoch whole
        fixed = fixed_batches(self.trainer)
        if fixed:
            log.info(FIXED_BATCHES_LINE, self.trainer.overfit_batches)
        if self.on_device:
            augment = None if fixed else self.batch_augment
            train = self.device_arrays().train
            loader = DeviceTrainLoader(
                *train, self.batch_size, self.seed, augment, self.start_epoch, world, rank, shuffle=not fixed
            )
            loader.resume_from(self.start_epoch, done)
            return loader
        if fixed:  # Lightning shards a sequential sampler itself under DDP, in order
            dataset = UInt8ImageDataset(*self._train_split())
            return self._loader(dataset, self.batch_size, SequentialSampler(dataset))
        dataset = UInt8ImageDataset(*self._train_split(), self.train_transform)
        sampler = EpochShardSampler(dataset, self.seed, self.start_epoch, num_replicas=world, rank=rank)
        sampler.resume_from(self.start_epoch, done * self.batch_size * world)
        return self._loader(dataset, self.batch_size, sampler)

    def val_dataloader(self) -> DataLoader | DeviceEvalLoader:
        if self.on_device:
            return DeviceEvalLoader(*self.device_arrays().evaluation, self.eval_batch_size, *self._placement()[1:])
        return self._loader(UInt8ImageDataset(*self.eval_split()), self.eval_batch_size)

    def test_dataloader(self) -> DataLoader | DeviceEvalLoader:
        if self.on_device:
            return DeviceEvalLoader(*self.device_arrays().test, self.eval_batch_size, *self._placement()[1:])
        return self._loader(UInt8ImageDataset(*self._loaded_arrays().test), self.eval_batch_size)


class GeneratedDataModule(ImageDataModule):
    """Arrays from a seeded generator with the settings in `generation`; train and test are its splits 1 and 2."""

    def __init__(self, train_size: int, test_size: int, generation: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_classes = int(generation["num_classes"])
        self.image_size = int(generation["image_size"])
        self.sizes = (train_size, test_size)
        self.generation = generation

    @abstractmethod
    def generate(self, count: int, split_offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`count` uint8 (3, H, W) images and their labels of one split."""

    @abstractmethod
    def class_names(self) -> list[str]:
        """One name per class, in label order."""

    def load_arrays(self) -> ImageArrays:
        train_x, train_y = self.generate(self.sizes[0], 1)
        test_x, test_y = self.generate(self.sizes[1], 2)
        return ImageArrays(train_x, train_y, test_x, test_y, self.class_names())
