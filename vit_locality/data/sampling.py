"""Which training sample comes next, and its augmentation seed: the epoch's order is drawn from (seed, epoch) and a
sample's transform from (seed, epoch, index), so data workers change nothing and a resumed run (`resume_from`) ends
on the weights of an unbroken one. The on-device path shares the rule (`ResumableEpoch`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sized
from typing import NamedTuple

import torch
from torch.utils.data import DistributedSampler

from vit_locality.seeding import epoch_seed, sample_seed


class SampleDraw(NamedTuple):
    """A training index as the sampler hands it to the dataset, with the seed of its augmentation."""

    index: int
    seed: int


def shard_order(size: int, seed: int, epoch: int, world: int = 1, rank: int = 0, start: int = 0) -> torch.Tensor:
    """Process `rank`'s indices from position `start` of the global order, padded to a multiple of `world` as
    DistributedSampler pads it: positions rank, rank + world, ..."""
    total = math.ceil(size / world) * world
    order = torch.randperm(size, generator=torch.Generator().manual_seed(epoch_seed(seed, epoch)))
    order = order.repeat(math.ceil(total / size))[:total]
    return order[start + rank : total : world]


class ResumableEpoch:
    """The epoch a loader's next iteration draws and where it starts, for both data paths: a resumed fit builds
    its first loader before Lightning restores the epoch, so the loader gets it; `resume_from` skips once."""

    seed: int
    epoch: int
    num_replicas: int
    rank: int
    _resume: tuple[int, int] | None = None  # (epoch, global positions already trained)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume_from(self, epoch: int, positions: int) -> None:
        """Skip the first `positions` of the global order the next time epoch `epoch` is iterated."""
        self._resume = (epoch, positions) if positions > 0 else None

    def next_shard(self, size: int) -> tuple[int, torch.Tensor]:
        """(global positions skipped, this process's sample indices left) for one iteration of the current epoch."""
        start = 0
        if self._resume is not None and self._resume[0] == self.epoch:
            start, self._resume = self._resume[1], None
        return start, shard_order(size, self.seed, self.epoch, self.num_replicas, self.rank, start)


class EpochShardSampler(ResumableEpoch, DistributedSampler):
    """This process's share of the epoch's order with sample seeds; a DistributedSampler, so DDP keeps it."""

    def __init__(self, dataset: Sized, seed: int, epoch: int = 0, num_replicas: int = 1, rank: int = 0) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=False)
        self.epoch = epoch

    def __iter__(self) -> Iterator[SampleDraw]:
        for index in self.next_shard(len(self.dataset))[1].tolist():
            yield SampleDraw(index, sample_seed(self.seed, self.epoch, index))


def transform_seeded(transform: Callable[[torch.Tensor], torch.Tensor], image: torch.Tensor, seed: int) -> torch.Tensor:
    """`transform(image)` with torch's CPU generator seeded to `seed`, then restored (it also draws CutMix and
    dropout without workers); `torch.manual_seed` would seed every accelerator too, ~100 times slower."""
    generator = torch.default_generator
    state = generator.get_state()
    generator.manual_seed(seed)
    try:
        return transform(image)
    finally:
        generator.set_state(state)
