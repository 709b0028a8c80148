"""Per-epoch seeding, so that a run resumed from an epoch-boundary checkpoint draws the same random numbers
(shuffle order, AutoAugment, CutMix) as an unbroken run.

Every epoch e starts from `epoch_seed(seed, e)`; when, is the `EpochReseed` callback's (callbacks/seeding.py): a
fresh fit seeds epoch 0, each epoch seeds the next as it ends, a resumed fit the epoch it resumes at. With data workers
(`data.num_workers > 0`) the workers keep their own generators, so exactness holds for `num_workers=0`.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def epoch_seed(seed: int, epoch: int) -> int:
    return (seed * 1_000_003 + epoch) % (2**32)


def reseed_for_epoch(seed: int, epoch: int) -> None:
    value = epoch_seed(seed, epoch)
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)  # CPU and every CUDA device
