"""Training draws as a function of (seed, epoch, sample index): the epoch's order, every sample's augmentation, the
DDP shards, and data workers that change nothing (vit_locality/data/sampling.py)."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
from torch.utils.data import Dataset, DistributedSampler

from vit_locality.augment.mixing import build_train_transform
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.data import SyntheticDataModule
from vit_locality.data.on_device import DeviceTrainLoader
from vit_locality.data.sampling import EpochShardSampler, SampleDraw
from vit_locality.seeding import sample_seed

SIZE = 96


def _order(seed: int, epoch: int, **shard: int) -> list[SampleDraw]:
    return list(EpochShardSampler(range(SIZE), seed, epoch, **shard))


def test_the_order_is_a_function_of_seed_and_epoch_only() -> None:
    sampler = EpochShardSampler(range(SIZE), seed=3)
    for epoch in (4, 0, 2):  # whatever it drew before, whatever the global generator holds
        torch.manual_seed(100 + epoch)
        sampler.set_epoch(epoch)
        assert list(sampler) == list(sampler) == _order(3, epoch)
    draws = _order(3, 1)
    assert sorted(d.index for d in draws) == list(range(SIZE))
    assert all(d.seed == sample_seed(3, 1, d.index) for d in draws)
    assert _order(4, 1) != draws


def test_every_epoch_has_its_own_order_and_sample_seeds() -> None:
    epochs = [_order(0, epoch) for epoch in range(5)]
    orders = {tuple(d.index for d in draws) for draws in epochs}
    assert len(orders) == 5
    seeds = [d.seed for draws in epochs for d in draws]
    assert len(set(seeds)) == len(seeds)


def test_sample_seeds_of_a_run_do_not_repeat() -> None:
    seeds = {sample_seed(7, epoch, index) for epoch in range(40) for index in range(10_000)}
    assert len(seeds) == 40 * 10_000 and max(seeds) < 2**32  # torch keeps 32 bits of a CPU seed


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_shards_partition_the_epoch_and_make_up_the_one_process_batches(world_size: int) -> None:
    whole = _order(5, 2)
    shards = [_order(5, 2, num_replicas=world_size, rank=rank) for rank in range(world_size)]
    assert sorted(d for shard in shards for d in shard) == sorted(whole)
    assert all(len(shard) == SIZE // world_size for shard in shards)
    per_process = 24 // world_size  # a global batch of 24
    for step in range(SIZE // 24):
        step_draws = [d for shard in shards for d in shard[step * per_process : (step + 1) * per_process]]
        assert sorted(step_draws) == sorted(whole[step * 24 : (step + 1) * 24])
    # a DistributedSampler: Lightning keeps it under DDP instead of wrapping it in a reshuffling one
    assert isinstance(shards[0][0], SampleDraw) and issubclass(EpochShardSampler, DistributedSampler)


# The first 8 indices of each epoch for seed 5 and 96 samples, as both data paths draw them: a run resumed from a
# checkpoint written before a change of the order would train on other samples than its unbroken twin.
PINNED_ORDERS = {  # (processes, rank, epoch): indices
    (1, 0, 0): [65, 37, 0, 13, 10, 41, 44, 94],
    (1, 0, 1): [60, 76, 25, 92, 58, 7, 57, 11],
    (1, 0, 2): [29, 10, 80, 22, 74, 20, 18, 1],
    (2, 1, 0): [37, 13, 41, 94, 80, 78, 22, 61],
    (2, 1, 1): [76, 92, 7, 11, 33, 42, 16, 3],
    (2, 1, 2): [10, 22, 20, 1, 32, 17, 60, 63],
}
PATHS = ("workers", "on_device")
BATCH = 4  # per process


def _drawn(path: str, epoch: int, world: int = 1, rank: int = 0, resume: tuple[int, int] | None = None) -> list[int]:
    """The indices one iteration of a fresh training loader of `path` draws in `epoch`; `resume` is (epoch, steps
    all processes completed), told to the loader as base.ImageDataModule.train_dataloader tells it."""
    if path == "workers":
        sampler = EpochShardSampler(range(SIZE), 5, epoch, num_replicas=world, rank=rank)
        if resume is not None:
            sampler.resume_from(resume[0], resume[1] * BATCH * world)
        return [d.index for d in sampler]
    loader = DeviceTrainLoader(torch.zeros(SIZE, 1), torch.arange(SIZE), BATCH, 5, None, epoch, world, rank)
    if resume is not None:
        loader.resume_from(*resume)
    batches = [labels for _, labels in loader]
    assert all(len(labels) == BATCH for labels in batches)  # full batches only, resumed or not
    return torch.cat(batches).tolist()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("world", "rank", "epoch"), list(PINNED_ORDERS))
def test_both_paths_draw_the_recorded_orders(path: str, world: int, rank: int, epoch: int) -> None:
    drawn = _drawn(path, epoch, world, rank)
    assert drawn[:8] == PINNED_ORDERS[world, rank, epoch] and len(drawn) == SIZE // world
    if path == "workers":  # each index with its own sample seed
        sampler = EpochShardSampler(range(SIZE), 5, epoch, num_replicas=world, rank=rank)
        assert [d.seed for d in sampler] == [sample_seed(5, epoch, i) for i in drawn]


def test_both_paths_pad_an_uneven_split_by_wrapping_the_order() -> None:
    """10 samples over 3 processes: 4 each, positions 10 and 11 of the global order being its positions 0 and 1."""
    workers = [[d.index for d in EpochShardSampler(range(10), 5, 0, num_replicas=3, rank=r)] for r in range(3)]
    assert workers[2] == [1, 5, 7, 9] and workers[1][-1] == workers[0][0] and workers[2][-1] == workers[1][0]
    for rank in range(3):
        loader = DeviceTrainLoader(torch.zeros(10, 1), torch.arange(10), 4, 5, None, 0, 3, rank)
        assert torch.cat([labels for _, labels in loader]).tolist() == workers[rank]


@pytest.mark.parametrize("path", PATHS)
def test_both_paths_resume_at_the_same_position_once_and_only_in_its_epoch(path: str) -> None:
    """After 2 steps of 2 processes (16 samples of epoch 1), rank 1 goes on at its shard's 9th index; the skip
    leaves other epochs whole, and the iteration that uses it leaves the next one of that epoch whole."""
    assert _drawn(path, 1, 2, 1, resume=(1, 2)) == _drawn(path, 1, 2, 1)[2 * BATCH :]
    assert _drawn(path, 1, 2, 1, resume=(1, 2))[:6] == [74, 36, 4, 28, 69, 71]
    assert _drawn(path, 0, 2, 1, resume=(1, 2)) == _drawn(path, 0, 2, 1)
    assert _drawn(path, 1, 2, 1, resume=(1, 0)) == _drawn(path, 1, 2, 1)
    if path == "workers":
        loader: EpochShardSampler | DeviceTrainLoader = EpochShardSampler(range(SIZE), 5, 0, num_replicas=2, rank=1)
        loader.resume_from(1, 2 * BATCH * 2)
        first = [d.index for d in loader]
        loader.set_epoch(1)
        second, third = [d.index for d in loader], [d.index for d in loader]
    else:
        loader = DeviceTrainLoader(torch.zeros(SIZE, 1), torch.arange(SIZE), BATCH, 5, None, 0, 2, 1)
        loader.resume_from(1, 2)
        first = torch.cat([labels for _, labels in loader]).tolist()
        loader.set_epoch(1)
        second = torch.cat([labels for _, labels in loader]).tolist()
        third = torch.cat([labels for _, labels in loader]).tolist()
    assert first == _drawn(path, 0, 2, 1) and second == _drawn(path, 1, 2, 1)[2 * BATCH :]
    assert third == _drawn(path, 1, 2, 1)


def _datamodule(num_workers: int, **options: int) -> SyntheticDataModule:
    dm = SyntheticDataModule(train_size=128, test_size=32, batch_size=32, num_workers=num_workers, seed=11, **options)
    dm.setup()
    dm.train_transform = build_train_transform(32, TrainingProtocol(autoaug=True, policy="cifar10"))
    return dm


def _concat(batches: list[list[torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.cat([images for images, _ in batches]), torch.cat([labels for _, labels in batches])


def _epochs(dm: SyntheticDataModule, epochs: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every training batch of these epochs, in order: (images, labels)."""
    loader = dm.train_dataloader()
    batches = []
    for epoch in epochs:
        loader.sampler.set_epoch(epoch)
        batches += list(loader)
    return _concat(batches)


def _same(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_augmented_batches_do_not_depend_on_the_number_of_workers() -> None:
    global_state = torch.get_rng_state()
    in_process = _epochs(_datamodule(0), [0, 1])
    assert torch.equal(torch.get_rng_state(), global_state)  # CutMix's and dropout's generator is left alone
    for workers in (1, 2):  # persistent workers, each with its own history
        assert _same(in_process, _epochs(_datamodule(workers), [0, 1]))
    images, labels = in_process
    assert not torch.equal(labels[:128], labels[128:])  # epoch 1 is not epoch 0 again
    plain = _datamodule(0)
    plain.train_transform = None
    raw_images, raw_labels = _epochs(plain, [0])  # the same samples in the same order, unaugmented
    assert torch.equal(raw_labels, labels[:128])
    assert sum(torch.equal(raw, augmented) for raw, augmented in zip(raw_images, images, strict=False)) < 16


def test_a_resumed_fit_first_loader_draws_the_saved_epoch() -> None:
    """Lightning builds that loader, and its workers prefetch, before it restores its epoch counter."""
    images, labels = _epochs(_datamodule(0), [0, 1])
    resumed = _datamodule(0)
    resumed.load_state_dict({"train_epoch": 1})
    assert _same(_concat(list(resumed.train_dataloader())), (images[128:], labels[128:]))


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("steps_done", [0, 1, 3, 7])
def test_a_sampler_resumed_mid_epoch_yields_the_tail_of_the_unbroken_epoch(world_size: int, steps_done: int) -> None:
    """Every process skips the positions of the steps all processes trained (steps x per-process batch x world)
    and goes on with what it would have drawn; its length stays the epoch's, and the skip is used up by it."""
    batch = 4
    for rank in range(world_size):
        unbroken = _order(5, 2, num_replicas=world_size, rank=rank)
        resumed = EpochShardSampler(range(SIZE), 5, 2, num_replicas=world_size, rank=rank)
        resumed.resume_from(2, steps_done * batch * world_size)
        assert list(resumed) == unbroken[steps_done * batch :]
        assert len(resumed) == len(unbroken) and list(resumed) == unbroken  # the next iteration: the whole epoch


def test_a_sampler_skips_only_in_the_epoch_it_resumes() -> None:
    sampler = EpochShardSampler(range(SIZE), 5, 1)
    sampler.resume_from(2, 8)
    assert list(sampler) == _order(5, 1)
    sampler.set_epoch(2)
    assert list(sampler) == _order(5, 2)[8:]


def test_a_fit_resumed_mid_epoch_first_loader_draws_the_rest_of_the_epoch() -> None:
    """The datamodule's saved position (epoch, batches trained): its first loader gives the epoch's last batches,
    each sample augmented as in the unbroken epoch; the next loader it builds starts an epoch whole."""
    images, labels = _epochs(_datamodule(0), [0, 1])
    resumed = _datamodule(0)
    resumed.load_state_dict({"train_epoch": 1, "train_batches": 1})
    loader, batch = resumed.train_dataloader(), resumed.batch_size
    assert len(loader) * batch == 128  # Lightning counts the resumed epoch's batches on from the one done
    assert _same(_concat(list(loader)), (images[128 + batch :], labels[128 + batch :]))
    assert _same(_concat(list(resumed.train_dataloader())), (images[128:], labels[128:]))


def test_evaluation_loaders_stay_in_order_and_unaugmented() -> None:
    dm = _datamodule(0)
    assert _same(_concat(list(dm.val_dataloader())), dm.eval_split())


class _SignalsFromElsewhere(Dataset):
    """Sends its own worker SIGTERM and SIGINT, as a group-wide `kill` would, and reports the worker still there."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            os.kill(os.getpid(), sig)
        time.sleep(0.2)  # time for a signal that would end the process to do so
        return os.getpid()


def test_workers_leave_sigterm_and_sigint_to_the_main_process() -> None:
    loader = _datamodule(1)._loader(_SignalsFromElsewhere(), batch_size=1)
    (worker_pid,) = [int(pid) for pid in next(iter(loader))]
    assert worker_pid != os.getpid()  # it ran in the worker, which lived on to return it
