"""A user's data set is two files: `conf/data/<name>.yaml` (found through `hydra.searchpath`) naming its module, and
that module (importable), which declares it (a DatasetSpec) and holds its datamodule; nothing in the package lists
it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import QUICK, Spawner

from vit_locality.store.record import read_record

TOY_MODULE = '''
"""Two classes of noise, one darker than the other."""

import torch

from vit_locality.data.base import GeneratedDataModule
from vit_locality.datasets import DatasetSpec

TOY = DatasetSpec(
    name="toy",
    default_policy="cifar10",
    config="vit_locality.config.schema:GeneratedDataConfig",
    datamodule="ToyDataModule",
)


class ToyDataModule(GeneratedDataModule):
    name = "toy"

    def __init__(self, train_size, test_size, num_classes, image_size, noise, generator_seed, **kwargs):
        generation = dict(num_classes=num_classes, image_size=image_size, noise=noise, seed=generator_seed)
        super().__init__(train_size, test_size, generation, **kwargs)

    def generate(self, count, split_offset):
        gen = torch.Generator().manual_seed(self.generation["seed"] * 10 + split_offset)
        labels = torch.arange(count) % self.num_classes
        size = self.image_size
        noise = self.generation["noise"] * torch.randn(count, 3, size, size, generator=gen)
        images = 0.2 + 0.6 * labels.view(-1, 1, 1, 1) / (self.num_classes - 1) + noise
        return (images.clamp(0, 1) * 255).round().to(torch.uint8), labels

    def class_names(self):
        return [f"level_{k}" for k in range(self.num_classes)]
'''

TOY_YAML = """
defaults:
  - _shared@_here_
  - _self_

name: toy
module: toy
num_workers: 0
train_size: 256
test_size: 64
num_classes: 2
image_size: 32
noise: 0.1
generator_seed: 0
"""


def user_dataset(root: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """conf/data/toy.yaml and toy.py under `root`, the module on PYTHONPATH; the searchpath override."""
    (root / "conf" / "data").mkdir(parents=True)
    (root / "conf" / "data" / "toy.yaml").write_text(TOY_YAML)
    (root / "toy.py").write_text(TOY_MODULE)
    monkeypatch.setenv("PYTHONPATH", str(root))
    return f"hydra.searchpath=[file://{root / 'conf'}]"


def test_a_data_set_in_two_files_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawns: Spawner) -> None:
    searchpath = user_dataset(tmp_path, monkeypatch)
    run_dir = tmp_path / "run"
    quick = [arg for arg in QUICK if not arg.startswith("data.") and arg != "data=synthetic"]
    args = [*quick, "data=toy", "data.batch_size=64", searchpath, "stats.probe_size=32", f"hydra.run.dir={run_dir}"]
    done = spawns.run_train(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = read_record(run_dir)
    assert record is not None and record.complete
    assert record.data["config"]["data"]["name"] == "toy" and record.data["config"]["data"]["module"] == "toy"


def test_a_user_data_set_without_its_declaration_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawns: Spawner
) -> None:
    searchpath = user_dataset(tmp_path, monkeypatch)
    source = (tmp_path / "toy.py").read_text()
    (tmp_path / "toy.py").write_text(source.replace('name="toy"', 'name="toy_renamed"'))
    quick = [arg for arg in QUICK if arg != "data=synthetic" and not arg.startswith("data.")]
    done = spawns.run_train([*quick, "data=toy", searchpath, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "data.name='toy' is not allowed: one of toy_renamed (declared in data.module=toy)" in done.stderr
    assert not (tmp_path / "run").exists()
