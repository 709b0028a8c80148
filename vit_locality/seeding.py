"""Seeds derived from the run's seed, so that a run resumed from an epoch-boundary checkpoint draws the same random
numbers (shuffle order, AutoAugment, CutMix) as an unbroken run, whatever the number of data workers.

Two streams, each a pure function of where the run is:
- the main process's global generators start epoch e from `epoch_seed(seed, e)`, and torch's (CutMix, MixUp,
  dropout) start every training batch b of it again from `batch_seed(seed, e, b)`, so a run resumed mid-epoch
  draws from batch b on what an unbroken run drew; when, is the `EpochReseed` callback's
  (vit_locality/callbacks/seeding.py);
- the training data: the epoch's order is drawn from `epoch_seed(seed, e)` and every sample's augmentation from
  `sample_seed(seed, e, index)` (vit_locality/data/sampling.py), so it does not matter which worker process, or
  whether any, transforms a sample, nor what that worker drew before.
"""

from __future__ import annotations

import random

import numpy as np
import torch

# An odd 32-bit multiplier near 2**32 / golden ratio spreads the epochs' blocks of sample seeds: over 1000 epochs any
# two blocks start at least 1.9 million apart, whatever the run's seed, so no two draws of such a run share a seed.
_EPOCH_STRIDE = 0x9E3779B1


def epoch_seed(seed: int, epoch: int) -> int:
    return (seed * 1_000_003 + epoch) % (2**32)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of one training sample's augmentation in one epoch; 32 bits, because torch's CPU generator
    (a Mersenne Twister) keeps only the low 32 bits of its seed. Within an epoch distinct indices get distinct seeds."""
    return (epoch_seed(seed, epoch) * _EPOCH_STRIDE + index) % (2**32)


def batch_seed(seed: int, epoch: int, batch: int) -> int:
    """The seed of the main process's torch generators at training batch `batch` of `epoch`: the sample seed of
    index 2**31 + batch, an index no data set reaches, so within an epoch it never equals a sample's seed."""
    return sample_seed(seed, epoch, 2**31 + batch)


def reseed_for_batch(seed: int, epoch: int, batch: int, device: torch.device) -> None:
    """Seed torch's CPU generator, and the training device's when it is a GPU, for one training batch. Only those
    two: `torch.manual_seed` would queue the seed for every accelerator, too slow to pay at every batch."""
    value = batch_seed(seed, epoch, batch)
    torch.default_generator.manual_seed(value)
    if device.type == "cuda":
        torch.cuda.default_generators[device.index or 0].manual_seed(value)


def reseed_for_epoch(seed: int, epoch: int) -> None:
    value = epoch_seed(seed, epoch)
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)  # CPU and every CUDA device
