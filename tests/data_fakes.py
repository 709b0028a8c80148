"""Small fake data sets in the official on-disk formats, for tests that cannot download the real ones.

The CIFAR writers pickle dicts as the official files do (protocol 2, str keys, uint8 `data` rows of R, G, B
planes); the Tiny-ImageNet writer lays out the official tree, with one solid colour per class so a test can
tell from the pixels which class an image was written for.
"""

from __future__ import annotations

import functools
import http.server
import pickle
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]

# Well separated, saturated colours: a JPEG round trip moves a solid colour by a few levels at most.
PALETTE = [
    (200, 30, 30),
    (30, 200, 30),
    (30, 30, 200),
    (200, 200, 30),
    (200, 30, 200),
    (30, 200, 200),
    (240, 140, 40),
    (120, 40, 220),
]


@dataclass
class FakeCifar:
    """What was written: raw (N, 3072) rows and labels per split, in file order."""

    folder: Path
    train_rows: np.ndarray
    train_labels: np.ndarray
    test_rows: np.ndarray
    test_labels: np.ndarray
    class_names: list[str]
    files: list[Path]


@dataclass
class FakeTiny:
    """What was written: wnids in file order (unsorted) and the colour / grey level used for each class."""

    folder: Path
    wnids: list[str]
    colours: dict[str, tuple[int, int, int]]
    greys: dict[str, int]
    names: dict[str, str]
    n_train: int
    n_val: int
    train_files: list[Path] = field(default_factory=list)
    val_files: list[Path] = field(default_factory=list)
    greyscale_files: list[Path] = field(default_factory=list)


def _dump(path: Path, obj: object) -> None:
    with open(path, "wb") as handle:
        pickle.dump(obj, handle, protocol=2)


def _rows(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)


def write_fake_cifar10(root: str | Path, n_train_per_batch: int = 4, n_test: int = 4, seed: int = 0) -> FakeCifar:
    """Write `<root>/cifar-10-batches-py/` with five train batches, a test batch and batches.meta."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    files, train_rows, train_labels = [], [], []
    for number in range(1, 6):
        rows = _rows(rng, n_train_per_batch)
        labels = rng.integers(0, 10, size=n_train_per_batch).tolist()
        path = folder / f"data_batch_{number}"
        _dump(
            path,
            {
                "batch_label": f"training batch {number} of 5",
                "labels": labels,
                "data": rows,
                "filenames": [f"img_{number}_{i}.png" for i in range(n_train_per_batch)],
            },
        )
        files.append(path)
        train_rows.append(rows)
        train_labels += labels
    test_rows = _rows(rng, n_test)
    test_labels = rng.integers(0, 10, size=n_test).tolist()
    _dump(
        folder / "test_batch",
        {"batch_label": "testing batch 1 of 1", "labels": test_labels, "data": test_rows, "filenames": []},
    )
    _dump(folder / "batches.meta", {"num_cases_per_batch": n_train_per_batch, "label_names": CIFAR10_NAMES})
    files += [folder / "test_batch", folder / "batches.meta"]
    return FakeCifar(
        folder=folder,
        train_rows=np.concatenate(train_rows),
        train_labels=np.array(train_labels, dtype=np.int64),
        test_rows=test_rows,
        test_labels=np.array(test_labels, dtype=np.int64),
        class_names=list(CIFAR10_NAMES),
        files=files,
    )


def write_fake_cifar100(root: str | Path, n_train: int = 10, n_test: int = 5, seed: int = 0) -> FakeCifar:
    """Write `<root>/cifar-100-python/` with train, test and meta (fine and coarse labels)."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    splits = {}
    for split, n in (("train", n_train), ("test", n_test)):
        rows = _rows(rng, n)
        fine = rng.integers(0, 100, size=n).tolist()
        _dump(
            folder / split,
            {
                "filenames": [f"{split}_{i}.png" for i in range(n)],
                "batch_label": f"{split} batch 1 of 1",
                "fine_labels": fine,
                "coarse_labels": [label // 5 for label in fine],
                "data": rows,
            },
        )
        splits[split] = (rows, np.array(fine, dtype=np.int64))
    names = [f"fine_{i}" for i in range(100)]
    _dump(folder / "meta", {"fine_label_names": names, "coarse_label_names": [f"coarse_{i}" for i in range(20)]})
    return FakeCifar(
        folder=folder,
        train_rows=splits["train"][0],
        train_labels=splits["train"][1],
        test_rows=splits["test"][0],
        test_labels=splits["test"][1],
        class_names=names,
        files=[folder / "train", folder / "test", folder / "meta"],
    )


def _save_image(path: Path, colour: tuple[int, int, int], grey: int, greyscale: bool) -> None:
    if greyscale:
        Image.new("L", (64, 64), grey).save(path, quality=95)
    else:
        Image.new("RGB", (64, 64), colour).save(path, quality=95)


def write_fake_tiny_imagenet(
    root: str | Path,
    n_classes: int = 4,
    n_train_per_class: int = 3,
    n_val_per_class: int = 2,
    seed: int = 0,
    greyscale_fraction: float = 0.2,
) -> FakeTiny:
    """Write the official `<root>/tiny-imagenet-200/` tree for `n_classes` (at most 8) made-up wnids.

    wnids.txt is left unsorted, and the colour of a class follows the file order, so a loader that numbers
    classes in file order rather than sorted order gets the colours wrong. The last wnid (file order) has no
    words.txt entry. About `greyscale_fraction` of the images (at least one if > 0) are single-channel JPEGs
    drawn at the class's grey level.
    """
    if not 1 <= n_classes <= len(PALETTE):
        raise ValueError(f"n_classes must be in [1, {len(PALETTE)}]")
    rng = np.random.default_rng(seed)
    folder = Path(root) / "tiny-imagenet-200"
    numbers = rng.choice(np.arange(1_000_000, 10_000_000), size=n_classes, replace=False)
    wnids = [f"n0{number:07d}" for number in numbers]
    if n_classes > 1 and wnids == sorted(wnids):
        wnids.reverse()
    colours = {wnid: PALETTE[k] for k, wnid in enumerate(wnids)}
    greys = {wnid: 40 + 25 * k for k, wnid in enumerate(wnids)}
    names = {wnid: f"thing {k}" for k, wnid in enumerate(wnids[:-1])}
    fake = FakeTiny(folder, wnids, colours, greys, names, n_classes * n_train_per_class, n_classes * n_val_per_class)

    n_images = fake.n_train + fake.n_val
    n_grey = max(1, round(greyscale_fraction * n_images)) if greyscale_fraction > 0 else 0
    grey_slots = set(rng.choice(n_images, size=min(n_grey, n_images), replace=False).tolist())

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wnids.txt").write_text("".join(f"{wnid}\n" for wnid in wnids))
    words = ["n00000001\tentity\n"] + [f"{wnid}\t{name}, synonym\n" for wnid, name in names.items()]
    (folder / "words.txt").write_text("".join(words))

    slot = 0
    for wnid in wnids:
        images = folder / "train" / wnid / "images"
        images.mkdir(parents=True)
        boxes = []
        for i in range(n_train_per_class):
            path = images / f"{wnid}_{i}.JPEG"
            _save_image(path, colours[wnid], greys[wnid], slot in grey_slots)
            fake.train_files.append(path)
            if slot in grey_slots:
                fake.greyscale_files.append(path)
            boxes.append(f"{path.name}\t0\t0\t63\t63\n")
            slot += 1
        (folder / "train" / wnid / f"{wnid}_boxes.txt").write_text("".join(boxes))

    val_images = folder / "val" / "images"
    val_images.mkdir(parents=True)
    val_wnids = [wnid for wnid in wnids for _ in range(n_val_per_class)]
    rng.shuffle(val_wnids)
    annotations = []
    for k, wnid in enumerate(val_wnids):
        path = val_images / f"val_{k}.JPEG"
        _save_image(path, colours[wnid], greys[wnid], slot in grey_slots)
        fake.val_files.append(path)
        if slot in grey_slots:
            fake.greyscale_files.append(path)
        annotations.append(f"{path.name}\t{wnid}\t0\t0\t63\t63\n")
        slot += 1
    (folder / "val" / "val_annotations.txt").write_text("".join(annotations))

    test_images = folder / "test" / "images"
    test_images.mkdir(parents=True)
    for k in range(2):
        Image.new("RGB", (64, 64), (128, 128, 128)).save(test_images / f"test_{k}.JPEG")
    return fake


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """Serve `folder` over HTTP on localhost while the block runs: the URL its files lie under."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_port}"
        finally:
            server.shutdown()
            thread.join()


def redeclare(monkeypatch: pytest.MonkeyPatch, name: str, **changes: object) -> None:
    """Data set `name` declared with `changes` where every reader reads declarations (datasets.declared_in), for
    this test only."""
    from vit_locality import datasets

    read = datasets.declared_in

    def changed(module: str) -> tuple[datasets.DatasetSpec, ...]:
        return tuple(replace(spec, **changes) if spec.name == name else spec for spec in read(module))

    monkeypatch.setattr(datasets, "declared_in", changed)


def undeclare(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Data set `name`'s declaration removed from its module, for this test only."""
    from vit_locality import datasets

    read = datasets.declared_in
    monkeypatch.setattr(datasets, "declared_in", lambda module: tuple(s for s in read(module) if s.name != name))
