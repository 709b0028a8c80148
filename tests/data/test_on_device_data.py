"""On-device data (vit_locality/data/on_device.py), checked on CPU tensors: the batched crop + flip and ColorJitter
against torchvision per image, uniform draws per sample, the worker path's order and shards, draws that do not depend
on the number of processes, exact resume at an epoch boundary, and whole cells that record as the worker path does."""

from __future__ import annotations

import itertools
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from helpers import QUICK, InProcessTraining, Spawner, compose_config, typed
from torchvision.transforms import v2

from vit_locality.config.identity import identity_hash
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.data.on_device import (
    BatchAugment,
    ColorJitterDraws,
    CropFlipDraws,
    DeviceEvalLoader,
    DeviceTrainLoader,
    color_jitter,
    crop_flip,
    draw_color_jitter,
)
from vit_locality.data.sampling import EpochShardSampler, shard_order
from vit_locality.errors import ConfigError
from vit_locality.precheck.gate import settings_from
from vit_locality.run.builders import build_datamodule, build_module

PAD = 4


def _images(count: int, size: int = 32, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (count, 3, size, size), dtype=torch.uint8, generator=generator)


def test_crop_and_flip_match_torchvision_pixel_for_pixel_at_every_draw() -> None:
    """All 9 x 9 corners, flipped and not: the batch against RandomCrop(32, padding=4) + RandomHorizontalFlip."""
    corners = [(top, left) for top in range(2 * PAD + 1) for left in range(2 * PAD + 1)]
    offsets = torch.tensor(corners * 2)
    flip = torch.tensor([False] * len(corners) + [True] * len(corners))
    images = _images(len(offsets))
    out = crop_flip(images, CropFlipDraws(offsets, flip), PAD)
    crop, mirror = v2.RandomCrop(32, padding=PAD), v2.RandomHorizontalFlip(p=1.0)
    for i, image in enumerate(images):
        params = {**crop.make_params([image]), "top": int(offsets[i, 0]), "left": int(offsets[i, 1])}
        expected = crop.transform(image, params)
        expected = mirror(expected) if flip[i] else expected
        assert torch.equal(out[i], expected), (i, offsets[i].tolist(), bool(flip[i]))
    assert out[0, :, :PAD, :].eq(0).all() and out[0, :, :, :PAD].eq(0).all()  # corner (0, 0): zero padding in view


def _chi2(values: torch.Tensor, bins: int) -> float:
    counts = torch.bincount(values, minlength=bins).double()
    expected = len(values) / bins
    return float(((counts - expected) ** 2 / expected).sum())


def _coordinates(count: int) -> torch.Tensor:
    """Images whose pixels name their place: channel 0 = row + 1, channel 1 = column + 1, channel 2 = 255 (padding
    is 0 everywhere), so a crop's corner and flip can be read back from its output."""
    ys, xs = torch.meshgrid(torch.arange(32), torch.arange(32), indexing="ij")
    image = torch.stack([ys + 1, xs + 1, torch.full_like(ys, 255)]).to(torch.uint8)
    return image.expand(count, -1, -1, -1).contiguous()


def _read_back(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(top, left) of each crop and whether it was flipped, from the images of `_coordinates`."""
    centre = out[:, :, 16, 16].long()
    top = centre[:, 0] - 1 - 16 + PAD
    flipped = out[:, 1, 16, 17].long() < out[:, 1, 16, 16].long()
    left = torch.where(flipped, centre[:, 1] - 1 - (31 - 16), centre[:, 1] - 1 - 16) + PAD
    return torch.stack([top, left], 1), flipped


def test_random_corners_and_flips_are_uniform_and_drawn_per_sample() -> None:
    """Read back from the augmented images themselves: chi-square over the 81 corners and the 2 flips, far beyond any
    plausible statistic (p < 1e-6) if a bias existed; and the samples of one batch do not share their draws."""
    generator = torch.Generator().manual_seed(1)
    augment = BatchAugment(32, TrainingProtocol(autoaug=False, policy="cifar10"))
    images = _coordinates(512)
    corners, flips = [], []
    for _ in range(60):  # 30,720 samples, about 380 per corner
        offsets, flipped = _read_back(augment(images, generator))
        corners.append(offsets[:, 0] * (2 * PAD + 1) + offsets[:, 1])
        flips.append(flipped)
    corner, flip = torch.cat(corners), torch.cat(flips)
    assert corner.min() >= 0 and corner.max() < 81
    chi2 = _chi2(corner, 81)
    assert chi2 < 80 + 6 * (2 * 80) ** 0.5, chi2  # df 80: mean 80, sd 12.6
    share = flip.double().mean().item()
    assert abs(share - 0.5) < 5 * (0.25 / len(flip)) ** 0.5, share
    first = corners[0]
    assert len(first.unique()) > 60 and 0.3 < flips[0].double().mean() < 0.7  # per sample, not per batch
    # independence of the two axes and the flip: the joint (corner, flip) table is uniform too
    chi2_joint = _chi2(corner * 2 + flip.long(), 162)
    assert chi2_joint < 161 + 6 * (2 * 161) ** 0.5, chi2_joint


def test_colorjitter_matches_torchvision_per_image() -> None:
    """Drawn orders and factors applied batched against the functional ops called image by image in that order."""
    images = _images(96, size=64)
    draws = draw_color_jitter(len(images), torch.Generator().manual_seed(2))
    assert draws.factors.dtype == torch.float32 and draws.factors.min() >= 0.6 and draws.factors.max() <= 1.4
    assert {tuple(row) for row in draws.order.tolist()} == set(itertools.permutations(range(3)))  # all 6 orders
    out = color_jitter(images, draws)
    ops = (v2.functional.adjust_brightness, v2.functional.adjust_contrast, v2.functional.adjust_saturation)
    for i, image in enumerate(images):
        expected = image
        for op in draws.order[i].tolist():
            expected = ops[op](expected, float(draws.factors[i, op]))
        assert torch.equal(out[i], expected), i
    fixed = ColorJitterDraws(torch.tensor([[0, 1, 2]]), torch.ones(1, 3))
    assert torch.equal(color_jitter(images[:1], fixed), images[:1])  # factor 1 everywhere: the identity


def test_colorjitter_draws_are_uniform() -> None:
    """The 6 orders equally likely, each factor uniform on [0.6, 1.4] (10 bins), far beyond chance if biased."""
    draws = draw_color_jitter(60_000, torch.Generator().manual_seed(3))
    orders = draws.order[:, 0] * 9 + draws.order[:, 1] * 3 + draws.order[:, 2]  # 6 of the 27 codes occur
    codes = torch.unique(orders, return_inverse=True)[1]
    assert codes.max() == 5 and _chi2(codes, 6) < 5 + 6 * 10**0.5
    for op in range(3):
        bins = ((draws.factors[:, op] - 0.6) / 0.08).long().clamp(0, 9)
        assert _chi2(bins, 10) < 9 + 6 * 18**0.5, op


def test_order_and_shards_are_the_worker_paths() -> None:
    for world in (1, 2, 3):
        for rank in range(world):
            sampler = EpochShardSampler(range(100), seed=5, epoch=3, num_replicas=world, rank=rank)
            assert shard_order(100, 5, 3, world, rank).tolist() == [d.index for d in sampler]


def _epoch(loader: DeviceTrainLoader, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
    loader.set_epoch(epoch)
    batches = list(loader)
    return torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])


@pytest.mark.parametrize("policy", ["cifar10", "colorjitter"])
def test_ddp_ranks_together_hold_the_one_process_batches_augmented_alike(policy: str) -> None:
    """Each step's per-rank batches are the one-process batch split, every sample with the same pixels: the draws
    come per global batch and position, not per process."""
    images, labels = _images(96), torch.arange(96)
    augment = BatchAugment(32, TrainingProtocol(autoaug=True, policy=policy))
    one = DeviceTrainLoader(images, labels, 24, seed=7, augment=augment)
    ranks = [DeviceTrainLoader(images, labels, 12, 7, augment, world=2, rank=r) for r in (0, 1)]
    assert len(one) == len(ranks[0]) == len(ranks[1]) == 4
    for epoch in (0, 1):
        one.set_epoch(epoch)
        for r in ranks:
            r.set_epoch(epoch)
        for (x, y), (x0, y0), (x1, y1) in zip(one, *ranks, strict=True):
            assert torch.equal(y[0::2], y0) and torch.equal(y[1::2], y1)
            assert torch.equal(x[0::2], x0) and torch.equal(x[1::2], x1)


def test_an_epoch_draws_the_same_whatever_came_before() -> None:
    """Resume at an epoch boundary: a fresh loader told epoch 1 gives what an unbroken one gives in its epoch 1."""
    images, labels = _images(64), torch.arange(64)
    augment = BatchAugment(32, TrainingProtocol(autoaug=True, policy="cifar10"))
    unbroken = DeviceTrainLoader(images, labels, 16, seed=3, augment=augment)
    _epoch(unbroken, 0)
    second = _epoch(unbroken, 1)
    torch.manual_seed(123)  # the global generators (CutMix's) are not the loader's
    resumed = _epoch(DeviceTrainLoader(images, labels, 16, 3, augment, epoch=1), 1)
    assert torch.equal(second[0], resumed[0]) and torch.equal(second[1], resumed[1])
    first = _epoch(DeviceTrainLoader(images, labels, 16, 3, augment), 0)
    assert not torch.equal(first[1], second[1])  # another order
    assert sorted(second[1].tolist()) == list(range(64))  # every sample once
    assert not torch.equal(_epoch(DeviceTrainLoader(images, labels, 16, 4, augment), 1)[0], second[0])  # seed


@pytest.mark.parametrize("world", [1, 2])
def test_a_loader_resumed_mid_epoch_gives_the_rest_of_the_unbroken_epoch(world: int) -> None:
    """Resume after step 2 of 4 (a signal mid-epoch): the same images, augmented alike, for the steps left; the
    length stays the epoch's, and the next epoch is whole."""
    images, labels = _images(96), torch.arange(96)
    augment = BatchAugment(32, TrainingProtocol(autoaug=True, policy="cifar10"))
    for rank in range(world):
        unbroken = list(DeviceTrainLoader(images, labels, 24 // world, 3, augment, 1, world, rank))
        resumed = DeviceTrainLoader(images, labels, 24 // world, 3, augment, 1, world, rank)
        resumed.resume_from(1, 2)
        torch.manual_seed(123)  # the global generators (CutMix's) are not the loader's
        tail = list(resumed)
        assert len(resumed) == len(unbroken) == 4 and len(tail) == 2
        for (x, y), (x_resumed, y_resumed) in zip(unbroken[2:], tail, strict=True):
            assert torch.equal(x, x_resumed) and torch.equal(y, y_resumed)
        assert len(_epoch(resumed, 2)[1]) == 96 // world


def test_eval_shards_cover_the_split_with_equal_counts() -> None:
    images, labels = _images(10), torch.arange(10)
    shards = [list(DeviceEvalLoader(images, labels, 4, world=3, rank=r)) for r in range(3)]
    seen = [torch.cat([b[1] for b in shard]) for shard in shards]
    assert [len(s) for s in seen] == [4, 4, 4] and set(torch.cat(seen).tolist()) == set(range(10))
    (whole,) = [list(DeviceEvalLoader(images, labels, 16))]
    assert torch.equal(whole[0][0], images) and torch.equal(whole[0][1], labels)


def test_setting_is_checked_resolved_and_part_of_the_identity() -> None:
    with pytest.raises(ConfigError, match=r"data.on_device='yes' is not allowed: auto \(on with CUDA\), true or false"):
        settings_from(compose_config([*QUICK, "data.on_device=yes"]))
    on, off = typed([*QUICK, "data.on_device=true"]), typed([*QUICK, "data.on_device=false"])
    assert identity_hash(on) != identity_hash(off) and on.data_on_device and not off.data_on_device
    auto = typed(QUICK)
    assert auto.data.on_device == "auto" and not auto.data_on_device  # trainer=cpu: no CUDA


def test_on_device_data_moves_autoaugment_out_of_the_module() -> None:
    """With on-device data the loader augments; the module must not run AutoAugment a second time."""
    cfg = typed([*QUICK, "data.on_device=true", "aug.device=gpu", "protocol=modern"])
    datamodule = build_datamodule(cfg)
    assert datamodule.on_device and datamodule.batch_augment.policy == "cifar10"
    assert build_module(cfg, datamodule).device_autoaugment is None
    worker = typed([*QUICK, "data.on_device=false", "aug.device=gpu", "protocol=modern"])
    assert build_module(worker, build_datamodule(worker)).device_autoaugment is not None
    loader = datamodule.train_dataloader()
    assert isinstance(loader, DeviceTrainLoader) and len(loader) == 256 // 64
    images, labels = next(iter(loader))
    assert images.dtype == torch.uint8 and images.shape == (64, 3, 32, 32) and labels.shape == (64,)
    assert torch.equal(datamodule.probe_images(8), datamodule.eval_split()[0][:8])


ON_DEVICE = [*QUICK, "data.on_device=true", "trainer.max_epochs=2", "stats.pictures=false"]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]


def test_a_cell_records_like_the_worker_path_and_resumes_exactly(
    tmp_path: Path, caplog, trains: InProcessTraining
) -> None:
    """A whole Modern cell on CPU tensors: a complete record with the worker path's sections; then a run resumed
    from the end of its first epoch (the `.prev` copy of last.ckpt) ends on the unbroken run's weights."""
    cfg = compose_config(ON_DEVICE)
    unbroken = tmp_path / "unbroken"
    record = trains.run_cell_as_train(cfg, unbroken)
    stored = json.loads((unbroken / "results.json").read_text())
    assert stored["status"] == "complete" and record["status"] == "complete"
    assert 0 <= stored["metrics"]["test/acc1"] <= 1 and stored["attention"]
    worker = trains.run_cell_as_train(compose_config([*ON_DEVICE, "data.on_device=false"]), tmp_path / "worker")
    assert set(worker) == set(stored) and set(worker["metrics"]) == set(stored["metrics"])
    assert (stored["protocol"]["autoaug_device"], worker["protocol"]["autoaug_device"]) == ("data_on_device", "cpu")
    assert "autoaugment(cifar10, batched on the device)" in stored["protocol"]["description"]

    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(unbroken / "checkpoints" / "last.prev.ckpt", resumed / "checkpoints" / "last.ckpt")
    assert torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0  # epoch 0 finished
    with caplog.at_level(logging.INFO, logger="vit_locality"):
        trains.run_cell_as_train(compose_config(ON_DEVICE), resumed)
    assert "(1 epochs done)" in caplog.text  # it did resume, rather than train both epochs again
    first, second = _weights(unbroken), _weights(resumed)
    assert [k for k in first if not torch.equal(first[k], second[k])] == []
    assert json.loads((resumed / "results.json").read_text())["metrics"]["test/acc1"] == stored["metrics"]["test/acc1"]


def test_ddp_with_on_device_data_trains_as_one_process(
    tmp_path: Path, trains: InProcessTraining, spawns: Spawner
) -> None:
    """2 gloo processes, each with its shard and its rows of the global batch's draws: without CutMix (drawn per
    process) the averaged gradients are the one-process batch's, so the weights agree up to float summation order."""
    same = [*ON_DEVICE, "aug.cutmix=false", "trainer.deterministic=true", "stats.probe_size=64"]
    ddp_dir = tmp_path / "ddp"
    ddp = [*[a for a in same if a != "trainer=cpu"], "trainer=ddp_cpu"]
    proc = spawns.run_train([*ddp, f"hydra.run.dir={ddp_dir}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((ddp_dir / "results.json").read_text())
    assert record["status"] == "complete" and record["batch"]["world_size"] == 2 and record["steps"] == 2 * 256 // 64
    one = tmp_path / "one"
    trains.run_cell_as_train(compose_config(same), one)
    first, second = _weights(ddp_dir), _weights(one)
    assert first.keys() == second.keys()
    for key in first:
        torch.testing.assert_close(first[key], second[key], rtol=1e-3, atol=1e-4, msg=key)
