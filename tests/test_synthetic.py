"""The seeded synthetic data set: determinism, shapes, balance, local class evidence, the datamodule API; and
the table of datamodules by name, against the names in vit_locality.domain."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from vit_locality.data import DATAMODULES, DataError, SyntheticDataModule, datamodule_class
from vit_locality.domain import DATASET_DEFAULT_POLICY, DATASETS


def _module(**kwargs) -> SyntheticDataModule:
    kwargs.setdefault("num_workers", 0)
    kwargs.setdefault("batch_size", 32)
    kwargs.setdefault("train_size", 200)
    kwargs.setdefault("test_size", 60)
    dm = SyntheticDataModule(**kwargs)
    dm.setup()
    return dm


def _keys(images: torch.Tensor) -> list[bytes]:
    return [bytes(image.flatten().tolist()) for image in images]


# ---- generation -----------------------------------------------------------------------------------------


def test_same_seed_gives_identical_data_and_another_seed_different_data() -> None:
    a, b, c = (_module(generator_seed=s).arrays for s in (3, 3, 4))
    assert torch.equal(a.train_images, b.train_images) and torch.equal(a.train_labels, b.train_labels)
    assert torch.equal(a.test_images, b.test_images) and torch.equal(a.test_labels, b.test_labels)
    assert not torch.equal(a.train_images, c.train_images)
    assert not torch.equal(a.test_images, c.test_images)
    # the two splits are distinct draws, not the same images twice
    assert not torch.equal(a.train_images[:60], a.test_images)


@pytest.mark.parametrize("train_size, test_size, num_classes", [(200, 60, 10), (130, 47, 7), (90, 33, 100)])
def test_shapes_sizes_and_balanced_labels(train_size: int, test_size: int, num_classes: int) -> None:
    dm = _module(train_size=train_size, test_size=test_size, num_classes=num_classes)
    arrays = dm.arrays
    assert arrays.train_images.shape == (train_size, 3, 32, 32)
    assert arrays.test_images.shape == (test_size, 3, 32, 32)
    assert arrays.train_images.dtype == arrays.test_images.dtype == torch.uint8
    assert arrays.train_labels.dtype == arrays.test_labels.dtype == torch.int64
    assert len(dm.arrays.class_names) == num_classes and dm.num_classes == num_classes
    for labels, size in ((arrays.train_labels, train_size), (arrays.test_labels, test_size)):
        counts = torch.bincount(labels, minlength=num_classes)
        assert len(counts) == num_classes  # no label outside [0, num_classes)
        assert int(counts.max() - counts.min()) <= 1
        assert int(counts.sum()) == size
        assert not torch.equal(labels, torch.arange(size) % num_classes)  # shuffled, not in class order
    # the images use the intensity range rather than sitting at a constant
    assert arrays.train_images.float().std() > 20


def test_five_thousand_images_generate_in_seconds() -> None:
    start = time.perf_counter()
    dm = SyntheticDataModule(train_size=5000, test_size=1000, num_workers=0)
    dm.setup()
    assert time.perf_counter() - start < 5.0
    assert dm.num_train == 5000


# ---- the class evidence is local and spread over the image ----------------------------------------------
# A classic unsupervised-feature pipeline (Coates & Ng): 8 x 8 patches sampled at random from training images
# serve as filters; each image is described by the best normalised match of each filter anywhere in it (max
# over positions), and a nearest-centroid rule classifies. Nothing here knows the generator's motif bank.


def _centred(images: torch.Tensor) -> torch.Tensor:
    x = images.float() / 255
    return x - x.mean(dim=(2, 3), keepdim=True)  # remove each image's colour cast


def _patch_filters(images: torch.Tensor, count: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    index = torch.randint(len(images), (count,), generator=gen)
    corner = torch.randint(images.shape[-1] - 8 + 1, (count, 2), generator=gen)
    places = zip(index.tolist(), corner.tolist(), strict=True)
    filters = torch.stack([images[i, :, r : r + 8, c : c + 8] for i, (r, c) in places])
    filters = filters - filters.mean(dim=(1, 2, 3), keepdim=True)
    return filters / filters.flatten(1).norm(dim=1).clamp_min(1e-6).view(-1, 1, 1, 1)


def _features(images: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    return F.conv2d(images, filters).amax(dim=(2, 3))


def _nearest_centroid_accuracy(
    train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor, test_y: torch.Tensor, classes: int
) -> float:
    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    centroids = torch.stack([train_x[train_y == k].mean(0) for k in range(classes)])
    predicted = torch.cdist(test_x, centroids).argmin(1)
    return float((predicted == test_y).float().mean())


@pytest.fixture(scope="module")
def evidence_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    arrays = _module(train_size=1000, test_size=400, num_classes=10, generator_seed=5).arrays
    return (
        _centred(arrays.train_images),
        arrays.train_labels,
        _centred(arrays.test_images),
        arrays.test_labels,
    )


def test_local_patches_separate_the_classes(evidence_split) -> None:
    train_x, train_y, test_x, test_y = evidence_split
    filters = _patch_filters(train_x, 128)
    train_f, test_f = _features(train_x, filters), _features(test_x, filters)
    accuracy = _nearest_centroid_accuracy(train_f, train_y, test_f, test_y, 10)
    assert accuracy > 0.7  # chance is 0.1


def test_every_quadrant_carries_class_evidence(evidence_split) -> None:
    """A 16 x 16 quadrant alone, classified the same way, is well above chance in each corner."""
    train_x, train_y, test_x, test_y = evidence_split
    filters = _patch_filters(train_x, 128)
    for top in (0, 16):
        for left in (0, 16):
            crop = (slice(None), slice(None), slice(top, top + 16), slice(left, left + 16))
            accuracy = _nearest_centroid_accuracy(
                _features(train_x[crop], filters), train_y, _features(test_x[crop], filters), test_y, 10
            )
            assert accuracy > 0.2, (top, left, accuracy)  # chance 0.1; 400 test images: sd 0.015


def test_label_permutation_destroys_the_signal(evidence_split) -> None:
    """Control: the same pipeline with shuffled training labels sits at chance, so the pass above is real."""
    train_x, train_y, test_x, test_y = evidence_split
    filters = _patch_filters(train_x, 128)
    shuffled = train_y[torch.randperm(len(train_y), generator=torch.Generator().manual_seed(1))]
    train_f, test_f = _features(train_x, filters), _features(test_x, filters)
    accuracy = _nearest_centroid_accuracy(train_f, shuffled, test_f, test_y, 10)
    assert accuracy < 0.25


# ---- datamodule API -------------------------------------------------------------------------------------


def test_train_loader_yields_full_uint8_batches() -> None:
    dm = _module(train_size=200, batch_size=64)
    loader = dm.train_dataloader()
    batches = list(loader)
    assert len(batches) == 3  # 200 // 64, the last partial batch dropped
    for images, labels in batches:
        assert images.shape == (64, 3, 32, 32) and images.dtype == torch.uint8
        assert labels.shape == (64,) and labels.dtype == torch.int64
    # the loader hands out the generated training images with their own labels
    lookup = dict(zip(_keys(dm.arrays.train_images), dm.arrays.train_labels.tolist(), strict=True))
    seen = [key for images, _ in batches for key in _keys(images)]
    assert len(set(seen)) == 192
    for images, labels in batches:
        assert [lookup[k] for k in _keys(images)] == labels.tolist()


def test_val_size_holds_out_a_fixed_seeded_subset() -> None:
    dm = _module(train_size=200, val_size=50, split_seed=3, batch_size=50)
    arrays = dm.arrays
    val_images, val_labels = dm.eval_split()
    assert val_images.shape == (50, 3, 32, 32) and val_labels.shape == (50,)
    assert dm.num_train == 150

    all_keys = _keys(arrays.train_images)
    assert len(set(all_keys)) == 200  # images are distinct, so content identifies them
    val_keys = set(_keys(val_images))
    assert val_keys <= set(all_keys)  # held out from the training split, not the test split
    label_of = dict(zip(all_keys, arrays.train_labels.tolist(), strict=True))
    assert [label_of[k] for k in _keys(val_images)] == val_labels.tolist()

    train_keys = [k for images, _ in dm.train_dataloader() for k in _keys(images)]
    assert len(train_keys) == 150 and len(set(train_keys)) == 150
    assert not val_keys & set(train_keys)
    assert val_keys | set(train_keys) == set(all_keys)

    # the validation loader evaluates the held-out subset, in the same order as eval_split
    loaded = torch.cat([images for images, _ in dm.val_dataloader()])
    assert torch.equal(loaded, val_images)

    same = _module(train_size=200, val_size=50, split_seed=3, batch_size=50).eval_split()[0]
    other = _module(train_size=200, val_size=50, split_seed=4, batch_size=50).eval_split()[0]
    assert torch.equal(same, val_images)
    assert set(_keys(other)) != val_keys


def test_eval_split_is_the_test_set_without_val_size() -> None:
    dm = _module(val_size=0)
    images, labels = dm.eval_split()
    assert torch.equal(images, dm.arrays.test_images) and torch.equal(labels, dm.arrays.test_labels)
    assert dm.num_train == 200


@pytest.mark.parametrize("val_size", [0, 40])
def test_probe_images_are_the_first_eval_images(val_size: int) -> None:
    dm = _module(val_size=val_size)
    eval_images, _ = dm.eval_split()
    probe = dm.probe_images(16)
    assert probe.shape == (16, 3, 32, 32) and probe.dtype == torch.uint8
    assert torch.equal(probe, eval_images[:16])
    assert torch.equal(dm.probe_images(16), probe)  # the same every time


@pytest.mark.parametrize(
    "train_size, val_size, batch_size",
    [(100, 0, 101), (100, 50, 64)],
    ids=["larger-than-train", "larger-than-train-after-holdout"],
)
def test_batch_larger_than_training_set_is_rejected(train_size: int, val_size: int, batch_size: int) -> None:
    dm = SyntheticDataModule(
        train_size=train_size, test_size=20, val_size=val_size, batch_size=batch_size, num_workers=0
    )
    with pytest.raises(DataError, match=r"data\.batch_size"):
        dm.setup()


def test_batch_equal_to_training_set_is_accepted() -> None:
    dm = _module(train_size=100, batch_size=100)
    assert len(list(dm.train_dataloader())) == 1


# ---- the datamodules by name ----------------------------------------------------------------------------


def test_every_data_set_name_has_its_datamodule_and_policy() -> None:
    assert set(DATAMODULES) == set(DATASETS)
    for name, cls in DATAMODULES.items():
        assert cls.name == name and datamodule_class(name) is cls
        assert cls().default_policy == DATASET_DEFAULT_POLICY[name]  # constructing one reads no files


def test_unknown_data_set_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"data\.name='mnist': allowed values are cifar10, cifar100, tiny_imagenet"):
        datamodule_class("mnist")
