"""The seeded synthetic data set: determinism, shapes, balance, local class evidence, the datamodule API; and
the table of datamodules by name, against the names in vit_locality.catalog."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import Spawner
from torchvision.transforms.v2 import functional as TF

from vit_locality.catalog import DATASETS
from vit_locality.data import DataError, SyntheticDataModule, datamodule_class


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


def test_the_sizes_asked_for_are_generated() -> None:
    """(How fast the set is generated is a benchmark's question, not a test's: `make bench`.)"""
    dm = SyntheticDataModule(train_size=5000, test_size=1000, num_workers=0)
    dm.setup()
    assert dm.num_train == 5000 and len(dm.arrays.test_labels) == 1000


# ---- the class lives in shape and scale, everywhere in the image ----------------------------------------------
# A fixed descriptor that knows nothing of the generator: the power spectrum of the image's standardised
# brightness, pooled in (radius, orientation) cells with the orientations sorted, so it ignores colour, polarity,
# position and orientation. A nearest-centroid rule on it classifies. If the classes hid in colour (as colour
# motifs do), the colour operations below would drop it to chance.


def _describe(images: torch.Tensor, radii: int = 8, angles: int = 12) -> torch.Tensor:
    x = images.float() / 255
    grey = 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]
    grey = (grey - grey.mean((1, 2), keepdim=True)) / (grey.std((1, 2), keepdim=True) + 1e-6)
    power = torch.fft.fftshift(torch.fft.fft2(grey).abs() ** 2, dim=(-2, -1))
    size = grey.shape[-1]
    freq = torch.arange(size).float() - size // 2
    fy, fx = torch.meshgrid(freq, freq, indexing="ij")
    ring = (torch.hypot(fx, fy) / (size / 2) * radii).long().clamp(max=radii)  # ring `radii`: past Nyquist
    sector = ((torch.atan2(fy, fx) % math.pi) / math.pi * angles).long().clamp(max=angles - 1)
    pooled = torch.zeros(len(images), (radii + 1) * angles)
    pooled.index_add_(1, (ring * angles + sector).flatten(), power.flatten(1))
    pooled = pooled.view(len(images), radii + 1, angles)[:, :radii].sort(dim=2, descending=True).values
    return (pooled / pooled.sum((1, 2), keepdim=True)).flatten(1).sqrt()


def _nearest_centroid_accuracy(
    train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor, test_y: torch.Tensor, classes: int = 10
) -> float:
    centroids = torch.stack([train_x[train_y == k].mean(0) for k in range(classes)])
    return float((torch.cdist(test_x, centroids).argmin(1) == test_y).float().mean())


@pytest.fixture(scope="module")
def evidence_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    arrays = _module(train_size=1000, test_size=400, num_classes=10, generator_seed=5).arrays
    return arrays.train_images, arrays.train_labels, arrays.test_images, arrays.test_labels


COLOUR_AND_GEOMETRY = {  # AutoAugment's operations at strong magnitudes (CIFAR-10 policy ranges)
    "none": lambda x: x,
    "invert": TF.invert,
    "solarize": lambda x: TF.solarize(x, 128),
    "posterize": lambda x: TF.posterize(x, 2),
    "equalize": TF.equalize,
    "autocontrast": TF.autocontrast,
    "greyscale": lambda x: TF.rgb_to_grayscale(x, 3),
    "rotate": lambda x: TF.rotate(x, 30.0),
    "shear": lambda x: TF.affine(x, angle=0.0, translate=[0, 0], scale=1.0, shear=[16.0, 0.0]),
}


@pytest.mark.parametrize("operation", list(COLOUR_AND_GEOMETRY))
def test_the_protocol_operations_keep_the_label(evidence_split, operation: str) -> None:
    """Learned on clean images, the descriptor still classifies images after each operation (chance 0.1; the
    clean figure measured 0.88, solarize the lowest at 0.74)."""
    train_x, train_y, test_x, test_y = evidence_split
    changed = COLOUR_AND_GEOMETRY[operation](test_x)
    accuracy = _nearest_centroid_accuracy(_describe(train_x), train_y, _describe(changed), test_y)
    assert accuracy > (0.8 if operation == "none" else 0.65), accuracy


def test_every_quadrant_carries_class_evidence(evidence_split) -> None:
    """A 16 x 16 quadrant alone classifies well in each corner: the class fills the image, so a box that CutMix
    pastes carries the other class in proportion to its area."""
    train_x, train_y, test_x, test_y = evidence_split
    for top in (0, 16):
        for left in (0, 16):
            crop = (slice(None), slice(None), slice(top, top + 16), slice(left, left + 16))
            accuracy = _nearest_centroid_accuracy(_describe(train_x[crop]), train_y, _describe(test_x[crop]), test_y)
            assert accuracy > 0.6, (top, left, accuracy)  # measured 0.75-0.80


def test_label_permutation_destroys_the_signal(evidence_split) -> None:
    """Control: the same pipeline with shuffled training labels sits at chance, so the passes above are real."""
    train_x, train_y, test_x, test_y = evidence_split
    shuffled = train_y[torch.randperm(len(train_y), generator=torch.Generator().manual_seed(1))]
    accuracy = _nearest_centroid_accuracy(_describe(train_x), shuffled, _describe(test_x), test_y)
    assert accuracy < 0.25


def test_class_names_say_the_texture() -> None:
    names = _module(num_classes=10).arrays.class_names
    assert names[:5] == ["stripes_fine", "checkerboard_fine", "dots_fine", "grid_fine", "rings_fine"]
    assert names[5:] == ["stripes_coarse", "checkerboard_coarse", "dots_coarse", "grid_coarse", "rings_coarse"]
    assert len(set(_module(num_classes=100, train_size=100, test_size=10).arrays.class_names)) == 100


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


def test_every_data_set_name_has_its_datamodule() -> None:
    for name in DATASETS:
        cls = datamodule_class(name)
        assert cls.name == name
        assert cls().name == name  # constructing one reads no files


def test_a_synthetic_run_imports_no_other_datamodule(spawns: Spawner) -> None:
    """The registry imports a datamodule's module only when its data set is chosen: building and loading the
    synthetic datamodule (as a run does) leaves the file readers and the downloader unimported."""
    code = (
        "import sys\nfrom helpers import QUICK, typed\n"
        "from vit_locality.run.builders import build_datamodule\n"
        "build_datamodule(typed(QUICK)).setup('fit')\n"
        "print(sorted(m for m in sys.modules if m.startswith('vit_locality.data.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    assert "vit_locality.data.synthetic" in loaded
    absent = {f"vit_locality.data.{name}" for name in ("cifar", "download", "tiny_imagenet", "safe_pickle")}
    assert not loaded & absent, sorted(loaded & absent)


def test_unknown_data_set_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"data set 'mnist' declares nothing \(no DatasetSpec\): known data sets are"):
        datamodule_class("mnist")
