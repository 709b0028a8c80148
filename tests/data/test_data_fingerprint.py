"""A complete cell is reused only on the data it was measured on: pixels and labels of every split, as read.

Fake CIFAR-10 files in the official format (tests/data_fakes.py), read by the real loader with a data worker on.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from data_fakes import write_fake_cifar10
from helpers import InProcessTraining, Spawner, compose_config

from vit_locality.data.fingerprint import data_difference, data_fingerprint
from vit_locality.errors import ConfigError

FAKE = {"n_train_per_batch": 16, "n_test": 16}


def _cell(root: Path) -> list[str]:
    return [
        "data=cifar10",
        "model=vit_tiny",
        "trainer=cpu",
        "trainer.max_epochs=1",
        f"data.root={root}",
        "data.download=false",
        "data.verify=false",  # the fake files are not the official ones
        "data.batch_size=16",
        "data.num_workers=1",
        "stats.probe_size=16",
        "stats.pictures=false",
        "callbacks.progress_bar=none",
    ]


def _rewrite(path: Path, change_pixels: bool = False, change_labels: bool = False) -> None:
    """Rewrite one CIFAR batch file in place of the old one (`os.replace`, as a re-extraction does)."""
    batch = pickle.loads(path.read_bytes())
    if change_pixels:
        batch["data"] = (batch["data"].astype(np.int16) + 1).clip(0, 255).astype(np.uint8) ^ 0x10
    if change_labels:
        batch["labels"] = [(label + 1) % 10 for label in batch["labels"]]
    staged = path.with_suffix(".new")
    staged.write_bytes(pickle.dumps(batch, protocol=2))
    staged.replace(path)


@pytest.fixture
def complete(tmp_path: Path, trains: InProcessTraining) -> tuple[Path, Path, dict]:
    root = tmp_path / "data"
    write_fake_cifar10(root, **FAKE)
    run_dir = tmp_path / "run"
    record = trains.run_cell_as_train(compose_config(_cell(root)), run_dir)
    assert record["status"] == "complete"
    return root, run_dir, record


def test_a_complete_cell_whose_training_pixels_changed_is_refused_saying_so(
    complete: tuple[Path, Path, dict], trains: InProcessTraining
) -> None:
    root, run_dir, record = complete
    before = (run_dir / "results.json").read_bytes()
    assert trains.run_cell_as_train(compose_config(_cell(root)), run_dir)["status"] == "complete"  # same data: skipped
    _rewrite(root / "cifar-10-batches-py" / "data_batch_1", change_pixels=True)  # every image, labels kept
    with pytest.raises(ConfigError) as refused:
        trains.run_cell_as_train(compose_config(_cell(root)), run_dir)
    message = str(refused.value)
    assert "measured on other data (the train split's pixels differ)" in message and "\n" not in message
    assert refused.value.exit_code == 2
    assert (run_dir / "results.json").read_bytes() == before  # the finished result untouched


def test_changed_test_labels_are_named_as_such(complete: tuple[Path, Path, dict], trains: InProcessTraining) -> None:
    root, run_dir, _ = complete
    _rewrite(root / "cifar-10-batches-py" / "test_batch", change_labels=True)
    with pytest.raises(ConfigError, match=r"other data \(the eval split's labels, the test split's labels differ\)"):
        trains.run_cell_as_train(compose_config(_cell(root)), run_dir)


def test_train_refuses_changed_pixels_in_one_line_with_status_2(
    complete: tuple[Path, Path, dict], tmp_path: Path, spawns: Spawner
) -> None:
    root, run_dir, _ = complete
    _rewrite(root / "cifar-10-batches-py" / "data_batch_3", change_pixels=True)
    proc = spawns.run_train([*_cell(root), f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = [line for line in (proc.stdout + proc.stderr).splitlines() if "measured on other data" in line]
    assert "the train split's pixels differ" in line
    assert json.loads((run_dir / "results.json").read_text())["status"] == "complete"


def _splits(pixels: int = 0, labels: int = 0) -> dict:
    images = np.full((4, 3, 2, 2), pixels, dtype=np.uint8)
    return {name: (images, np.arange(4) + labels) for name in ("train", "eval", "test")}


def test_the_fingerprint_hashes_pixels_and_keeps_the_labels_hash_of_older_records() -> None:
    plain = data_fingerprint(_splits())
    assert data_difference(plain, data_fingerprint(_splits())) is None
    assert data_fingerprint(_splits(pixels=1))["labels_sha256"] == plain["labels_sha256"]
    assert data_difference(plain, data_fingerprint(_splits(pixels=1))) == (
        "the train split's pixels, the eval split's pixels, the test split's pixels differ"
    )
    older = {"sizes": plain["sizes"], "labels_sha256": plain["labels_sha256"]}  # a record before pixel hashes
    assert data_difference(older, data_fingerprint(_splits(pixels=1))) is None
    assert (
        data_difference(older, data_fingerprint(_splits(labels=1)))
        == "the labels differ (a record without pixel hashes)"
    )
    assert data_difference(None, plain) == "its data fingerprint (none) differs from this data's"
    fewer = {**plain, "sizes": {**plain["sizes"], "test": 3}}
    assert data_difference(fewer, plain) == "the number of images of the test split differs"


def test_a_labels_hash_of_other_data_is_a_difference_even_when_the_split_hashes_agree() -> None:
    """Every hash a record holds must match: a record whose `labels_sha256` is another data set's is not this data's
    record, whatever its per-split hashes say (re-tagging it would merge tags into another data set's result)."""
    plain = data_fingerprint(_splits())
    forged = {**plain, "labels_sha256": data_fingerprint(_splits(labels=1))["labels_sha256"]}
    assert data_difference(forged, plain) == "the labels of all splits together (labels_sha256) differ"
    assert data_difference(plain, plain) is None
    other_labels = data_fingerprint(_splits(labels=1))  # per-split labels named, not the whole again
    assert data_difference(other_labels, plain) == (
        "the train split's labels, the eval split's labels, the test split's labels differ"
    )
