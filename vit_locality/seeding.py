"""Seeds derived from the run's seed and where the run is (epoch, batch, sample index), so a resumed run draws the
same random numbers as an unbroken one, whatever the number of data workers."""

from __future__ import annotations

import random

import numpy as np
import torch

# An odd multiplier near 2**32 / golden ratio: over 1000 epochs any two epochs' blocks of sample seeds start at least
# 1.9 million apart, whatever the run's seed, so no two draws of such a run share a seed.
_EPOCH_STRIDE = 0x9E3779B1


def epoch_seed(seed: int, epoch: int) -> int:
    return (seed * 1_000_003 + epoch) % (2**32)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """One sample's augmentation seed in one epoch, distinct per index; 32 bits, all torch's CPU generator keeps."""
    return (epoch_seed(seed, epoch) * _EPOCH_STRIDE + index) % (2**32)


def batch_seed(seed: int, epoch: int, batch: int) -> int:
    """The seed of torch's generators at a training batch: sample index 2**31 + batch, which no data set reaches."""
    return sample_seed(seed, epoch, 2**31 + batch)


def reseed_for_batch(seed: int, epoch: int, batch: int, device: torch.device) -> None:
    """Seed torch's CPU generator and the training GPU's: `torch.manual_seed` seeds every device, too slow per batch."""
    value = batch_seed(seed, epoch, batch)
    torch.default_generator.manual_seed(value)
    if device.type == "cuda":
        torch.cuda.default_generators[device.index or 0].manual_seed(value)


def reseed_for_epoch(seed: int, epoch: int) -> None:
    value = epoch_seed(seed, epoch)
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)  # CPU and every CUDA device
