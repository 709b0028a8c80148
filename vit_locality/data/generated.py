"""What the two built-in generated data sets share: no files, both splits drawn from the data's own seed.

A subclass names its generator (`generate(count, split_offset=..., **generation)`) and its class names; the train
split is split 1 and the test split split 2 of the same seed, so every cell and every run seed sees the same images.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch

from vit_locality.data.base import ImageArrays, ImageDataModule

TRAIN_SPLIT, TEST_SPLIT = 1, 2


class GeneratedDataModule(ImageDataModule):
    """An ImageDataModule whose arrays come from a seeded generator with the settings in `generation`."""

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
        train_x, train_y = self.generate(self.sizes[0], TRAIN_SPLIT)
        test_x, test_y = self.generate(self.sizes[1], TEST_SPLIT)
        return ImageArrays(train_x, train_y, test_x, test_y, self.class_names())
