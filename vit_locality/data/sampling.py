"""Which training sample comes next, and with which seed its augmentation is drawn.

Every random draw of a training sample is a function of (run seed, epoch, sample index): the epoch's order comes
from a generator seeded by (seed, epoch), and each sample's transform runs on torch's CPU generator seeded by
(seed, epoch, index) (vit_locality/seeding.py derives both). Data workers therefore change nothing: not how many
there are, not which one transforms which sample, not what a persistent worker drew in earlier epochs. A run killed
after an epoch, or stopped by a signal mid-epoch, and resumed ends on the weights of an unbroken run, with or
without workers: the resumed epoch's sampler starts where the stopped one was (`resume_from`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sized
from typing import NamedTuple

import torch
from torch.utils.data import DistributedSampler

from vit_locality.run.seeding import epoch_seed, sample_seed


class SampleDraw(NamedTuple):
    """A training index as the sampler hands it to the dataset: the sample and the seed of its augmentation."""

    index: int
    seed: int


class EpochShardSampler(DistributedSampler):
    """This process's share of the epoch's permutation of the training set, each index with its sample seed.

    Lightning tells the sampler the epoch (`set_epoch`) at every epoch start. A resumed fit builds its first
    loader, and data workers start prefetching from it, before Lightning restores its epoch counter: the
    datamodule passes the epoch to resume at as `epoch` for that reason.

    It is a `DistributedSampler`, so Lightning keeps it under DDP rather than wrapping it in one that reshuffles
    with an epoch it is told only later. Process `rank` of `num_replicas` takes positions rank, rank + W, ...:
    the W per-process batches of one step together hold exactly the samples of the one-process batch.

    `resume_from(epoch, positions)` makes the next iteration of that epoch start after its first `positions`
    positions of the global order (what the steps a stopped run completed consumed), once; `len()` stays the
    epoch's, as Lightning counts the resumed epoch's batches on from the ones done.
    """

    def __init__(self, dataset: Sized, seed: int, epoch: int = 0, num_replicas: int = 1, rank: int = 0) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=False)
        self.epoch = epoch
        self._resume: tuple[int, int] | None = None  # (epoch, global positions already trained)

    def resume_from(self, epoch: int, positions: int) -> None:
        """Skip the first `positions` positions of the global order the next time epoch `epoch` is iterated."""
        self._resume = (epoch, positions) if positions > 0 else None

    def _positions_done(self) -> int:
        """The positions to skip in this iteration; the skip is used up by the epoch it was set for."""
        if self._resume is None or self._resume[0] != self.epoch:
            return 0
        positions, self._resume = self._resume[1], None
        return positions

    def epoch_order(self) -> list[int]:
        """The whole data set's order in the current epoch, the same in every process."""
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
        return torch.randperm(len(self.dataset), generator=generator).tolist()

    def __iter__(self) -> Iterator[SampleDraw]:
        order = self.epoch_order()
        order = (order * math.ceil(self.total_size / len(order)))[: self.total_size]  # every process: num_samples
        start = self._positions_done() + self.rank
        for index in order[start : self.total_size : self.num_replicas]:
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
