"""The on-device Modern data path's host work per batch (benchmarks/host_work.py): a bounded number of
dispatched ops whatever the batch size, no host reads, no tensors made from Python values, and still torchvision's
per-image pixels for every op of the policy."""

from __future__ import annotations

import pytest
import torch
from host_syncs import HostSyncCounter
from torchvision.transforms import v2

import vit_locality.augment.batched_autoaugment as batched
from benchmarks import host_work
from vit_locality.augment.batched_autoaugment import AutoAugmentDraws, apply, draw
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.data.on_device import BatchAugment, CropFlipDraws, crop_flip, draw_crop_flip
from vit_locality.upstream import apply_autoaugment_op, autoaugment_space, autoaugment_sub_policies

# Measured: 199 ops per Modern batch (crop + flip, AutoAugment `select`, CutMix); 1,163 before the batched tables.
MAX_OPS = 205
SPACE = autoaugment_space()


def _sub_policies(policy: str) -> list:
    return autoaugment_sub_policies(v2.AutoAugment(v2.AutoAugmentPolicy(policy)))


def test_a_modern_batch_dispatches_a_bounded_number_of_ops_whatever_its_size() -> None:
    """The count is what the host spends per batch on a GPU (about 5 us an op): bounded, and the same for 8 and
    for 128 images, so nothing loops over the samples."""
    work = host_work.count(host_work.BATCH, host_work.SIZE)
    assert work.ops <= MAX_OPS, dict(work.by_op.most_common(15))
    assert host_work.count(8, host_work.SIZE).ops == work.ops
    assert host_work.count(host_work.BATCH, 64).ops == work.ops


def test_a_modern_batch_reads_nothing_back_and_makes_no_tensor_from_python_values() -> None:
    """On a GPU each would be a stream sync: a read (item, nonzero, tolist, ...) or a copy from pageable memory
    (`torch.tensor(values, device=...)`, seen on a CPU as `aten.lift_fresh`)."""
    run = host_work.modern_step(host_work.BATCH, host_work.SIZE)
    torch.manual_seed(0)
    run(0)  # the first batch builds the per-device tables
    with HostSyncCounter() as syncs, host_work.DispatchCount() as counted:
        for step in range(1, 4):
            run(step)
    assert syncs.events == []
    assert counted.reads == {} and counted.from_data == {}


def _every_op_draws(policy: str, batch: int) -> AutoAugmentDraws:
    """Image i takes sub-policy i mod P with both ops applied, the signs alternating every P images; the last
    images apply nothing."""
    count = len(_sub_policies(policy))
    rows = torch.arange(batch)
    applied = torch.ones(batch, 2, dtype=torch.bool)
    applied[-3:] = False
    negative = torch.stack([(rows // count) % 2 == 1, (rows // count) % 2 == 0], 1)
    return AutoAugmentDraws(policy, rows % count, applied, negative)


def _torchvision(images: torch.Tensor, draws: AutoAugmentDraws) -> torch.Tensor:
    """Each image through torchvision's own ops, one image at a time, as the drawn sub-policy names them."""
    augment = v2.AutoAugment(v2.AutoAugmentPolicy(draws.policy))
    height, width = images.shape[-2:]
    out = []
    for i, image in enumerate(images):
        for k, (name, _, bin_) in enumerate(_sub_policies(draws.policy)[int(draws.sub_policy[i])]):
            if not draws.applied[i, k]:
                continue
            magnitudes_fn, signed = SPACE[name]
            magnitudes = magnitudes_fn(10, height, width)
            magnitude = 0.0 if magnitudes is None else float(magnitudes[bin_])
            magnitude = -magnitude if signed and draws.negative[i, k] else magnitude
            image = apply_autoaugment_op(augment, image, name, magnitude)
        out.append(image)
    return torch.stack(out)


@pytest.mark.parametrize("policy", ["cifar10", "svhn", "imagenet"])
def test_every_op_of_the_policy_is_torchvisions_per_image(policy: str) -> None:
    """A batch of 128 that forces every sub-policy, both ops, both signs: `select` gives torchvision's pixels."""
    draws = _every_op_draws(policy, host_work.BATCH)
    generator = torch.Generator().manual_seed(3)
    images = torch.randint(0, 256, (host_work.BATCH, 3, 32, 32), dtype=torch.uint8, generator=generator)
    images[0] = 91  # a flat image: AutoContrast and Equalize leave it as it is
    images[1] = torch.randint(120, 124, (3, 32, 32), dtype=torch.uint8, generator=generator)
    out = apply(images, draws, "select")
    expected = _torchvision(images, draws)
    assert [i for i in range(len(images)) if not torch.equal(out[i], expected[i])] == []
    assert torch.equal(out[-3:], images[-3:])


def test_the_modern_augmentation_is_crop_flip_then_torchvision_per_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's augmentation, as a GPU runs it, against torchvision image by image under the same draws
    (crop + flip, then AutoAugment, drawn in that order from the step's generator)."""
    monkeypatch.setitem(batched.GROUPING_BY_DEVICE, "cpu", "select")
    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(4))
    out = BatchAugment(32, TrainingProtocol(autoaug=True, policy="cifar10"))(images, torch.Generator().manual_seed(5))
    generator = torch.Generator().manual_seed(5)
    crop = draw_crop_flip(64, 4, generator)
    drawn = draw(64, generator)
    crop_transform = v2.RandomCrop(32, padding=4)
    cropped = []
    for i, image in enumerate(images):
        params = {
            **crop_transform.make_params([image]),
            "top": int(crop.offsets[i, 0]),
            "left": int(crop.offsets[i, 1]),
        }
        image = crop_transform.transform(image, params)
        cropped.append(image.flip(-1) if crop.flip[i] else image)
    assert torch.equal(crop_flip(images, CropFlipDraws(crop.offsets, crop.flip), 4), torch.stack(cropped))
    assert torch.equal(out, _torchvision(torch.stack(cropped), drawn))
    assert torch.equal(out, apply(torch.stack(cropped), drawn, "grouped"))
