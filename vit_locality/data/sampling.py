"""Which training sample comes next, and with which seed its augmentation is drawn.

Every random draw of a training sample is a function of (run seed, epoch, sample index): the epoch's order comes
from a generator seeded by (seed, epoch), and each sample's transform runs on torch's CPU generator seeded by
(seed, epoch, index) (vit_locality/seeding.py derives both). Data workers therefore change nothing: not how many
there are, not which one transforms which sample, not what a persistent worker drew in earlier epochs. A run killed
after an epoch, or stopped by a signal mid-epoch, and resumed ends on the weights of an unbroken run, with or
without workers: the resumed epoch's sampler starts where the stopped one was (`resume_from`). The on-device
path (on_device.py) draws the same order and resumes by the same rule (`ResumableEpoch`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sized
from typing import NamedTuple

import torch
from torch.utils.data import DistributedSampler

from vit_locality.seeding import epoch_seed, sample_seed


class SampleDraw(NamedTuple):
    """A training index as the sampler hands it to the dataset: the sample and the seed of its augmentation."""

    index: int
    seed: int


def epoch_order(size: int, seed: int, epoch: int) -> torch.Tensor:
    """The whole data set's order in epoch `epoch`: a permutation drawn from (seed, epoch) alone, the same in every
    process and whatever the global generators hold."""
    return torch.randperm(size, generator=torch.Generator().manual_seed(epoch_seed(seed, epoch)))


def shard_order(size: int, seed: int, epoch: int, world: int = 1, rank: int = 0, start: int = 0) -> torch.Tensor:
    """Process `rank`'s sample indices in the epoch from position `start` of the global order on.

    The order is wrapped round to a multiple of `world` positions, as DistributedSampler pads it, so every process
    gets as many; process `rank` takes positions rank, rank + world, ...: the `world` per-process batches of one
    step together hold exactly the samples of the one-process batch."""
    total = math.ceil(size / world) * world
    order = epoch_order(size, seed, epoch).repeat(math.ceil(total / size))[:total]
    return order[start + rank : total : world]


class ResumableEpoch:
    """The epoch a training loader's next iteration draws and where in its order it starts: the one rule of both
    data paths (EpochShardSampler for DataLoader workers, on_device.DeviceTrainLoader).

    Lightning calls `set_epoch` at every epoch start. A resumed fit builds its first loader, and data workers start
    prefetching from it, before Lightning restores its epoch counter: the loader is built with the epoch to resume.
    `resume_from(epoch, positions)` makes the next iteration of that epoch start after its first `positions`
    positions of the global order (what the steps all processes completed consumed), once: that iteration uses the
    skip up, and an iteration of another epoch ignores it. `len()` stays the epoch's, as Lightning counts the
    resumed epoch's batches on from the ones done."""

    seed: int
    epoch: int
    num_replicas: int
    rank: int
    _resume: tuple[int, int] | None = None  # (epoch, global positions already trained)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume_from(self, epoch: int, positions: int) -> None:
        """Skip the first `positions` positions of the global order the next time epoch `epoch` is iterated."""
        self._resume = (epoch, positions) if positions > 0 else None

    def next_shard(self, size: int) -> tuple[int, torch.Tensor]:
        """(global positions skipped, this process's sample indices left) for one iteration of the current epoch."""
        start = 0
        if self._resume is not None and self._resume[0] == self.epoch:
            start, self._resume = self._resume[1], None
        return start, shard_order(size, self.seed, self.epoch, self.num_replicas, self.rank, start)


class EpochShardSampler(ResumableEpoch, DistributedSampler):
    """This process's share of the epoch's order of the training set, each index with its sample seed.

    It is a `DistributedSampler`, so Lightning keeps it under DDP rather than wrapping it in one that reshuffles
    with an epoch it is told only later. `epoch` is the one a first iteration draws (ResumableEpoch)."""

    def __init__(self, dataset: Sized, seed: int, epoch: int = 0, num_replicas: int = 1, rank: int = 0) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=False)
        self.epoch = epoch

    def __iter__(self) -> Iterator[SampleDraw]:
        for index in self.next_shard(len(self.dataset))[1].tolist():
            yield SampleDraw(index, sample_seed(self.seed, self.epoch, index))


def transform_seeded(transform: Callable[[torch.Tensor], torch.Tensor], image: torch.Tensor, seed: int) -> torch.Tensor:
    """`transform(image)` with torch's CPU generator seeded to `seed`, leaving that generator as it found it.

    torchvision's transforms take no generator; they draw from the global one, so that one is seeded. Restoring it
    matters without workers, where the main process transforms and its generator also draws CutMix and dropout.
    Seeding the CPU generator alone costs about 1 us; `torch.manual_seed` would also queue the seed for every
    accelerator, about 100 times that, on the order of the whole AutoAugment transform of a 32 px image."""
    generator = torch.default_generator
    state = generator.get_state()
    generator.manual_seed(seed)
    try:
        return transform(image)
    finally:
        generator.set_state(state)
