"""A compiled cell (`model.compile=true`) on on-device data: the whole training step (crop, flip, AutoAugment's
select path, CutMix, the model, the smoothed loss) is one graph and the evaluation forward another, with no graph
break and no recompile over two epochs, their validations, the test and a resume; the resumed cell ends where the
unbroken one ends, bit for bit. Inductor on this CPU (its C++ compiler is a subprocess: the slow tier)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
import torch
import torch._dynamo as dynamo
from helpers import QUICK, InProcessTraining, compose_config, typed

from vit_locality.model.classifier import ViTClassifier, compile_choice
from vit_locality.run.cell import CellInterrupted

NO_COMPILER = shutil.which("cc") is None and shutil.which("gcc") is None  # CPU inductor compiles C++ (CI has one)

NEAR_ZERO = ["model.depth=1", "model.dim=16", "model.heads=2", "model.mlp_ratio=1.0", "stats.early_layers=1"]
MODERN = ["aug.autoaug=true", "aug.cutmix=true", "loss.ls=0.1"]
CELL = [
    *QUICK,
    *NEAR_ZERO,
    *MODERN,
    "data.image_size=16",
    "data.on_device=true",
    "data.train_size=32",  # 4 steps an epoch
    "data.batch_size=8",
    "data.test_size=12",  # a full evaluation batch of 8, then 4 padded to 8
    "data.eval_batch_size=8",
    "stats.probe_size=8",
    "stats.pictures=false",
    "trainer.max_epochs=2",
    "model.compile=true",
]
GRAPHS = 2  # the training step and the evaluation forward


def _compiled_run(trains: InProcessTraining, run_dir: Path) -> dict:
    """One in-process run as a fresh process would compile it: dynamo's caches and counters emptied first, and any
    recompile an error."""
    dynamo.reset()
    dynamo.utils.counters.clear()
    with dynamo.config.patch(error_on_recompile=True):
        return trains.run_cell_as_train(compose_config(CELL), run_dir)


def _graphs() -> tuple[int, int]:
    counters = dynamo.utils.counters
    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def _last_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    state = dict(checkpoint["state_dict"])
    for group, moments in checkpoint["optimizer_states"][0]["state"].items():
        state |= {f"adam.{group}.{name}": value for name, value in moments.items() if torch.is_tensor(value)}
    return state


@pytest.mark.skipif(NO_COMPILER, reason="no C compiler: CPU inductor compiles C++")
def test_a_compiled_cell_is_two_graphs_and_resumes_bit_for_bit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trains: InProcessTraining
) -> None:
    unbroken = _compiled_run(trains, tmp_path / "unbroken")
    assert unbroken["status"] == "complete"
    assert _graphs() == (GRAPHS, 0)

    real = ViTClassifier.training_step

    def terminated_mid_epoch_2(self, batch, batch_idx):  # noqa: ANN001, ANN202 - Lightning's hook
        if self.global_step == 5:
            os.kill(os.getpid(), signal.SIGTERM)  # what a scheduler sends; Lightning checkpoints mid-epoch
        return real(self, batch, batch_idx)

    resumed_dir = tmp_path / "resumed"
    monkeypatch.setattr(ViTClassifier, "training_step", terminated_mid_epoch_2)
    with pytest.raises(CellInterrupted):
        _compiled_run(trains, resumed_dir)
    assert (resumed_dir / "checkpoints" / "interrupted.ckpt").exists()
    monkeypatch.setattr(ViTClassifier, "training_step", real)
    resumed = _compiled_run(trains, resumed_dir)
    assert resumed["status"] == "complete"
    assert _graphs() == (GRAPHS, 0)  # the resumed process compiles the same two graphs, once each

    want, got = _last_weights(tmp_path / "unbroken"), _last_weights(resumed_dir)
    assert want.keys() == got.keys()
    assert all(torch.equal(want[key], got[key]) for key in want), [k for k in want if not torch.equal(want[k], got[k])]
    assert resumed["metrics"]["test/acc1"] == unbroken["metrics"]["test/acc1"]
    assert resumed["metrics"]["test/loss"] == unbroken["metrics"]["test/loss"]


def test_the_compiled_step_draws_what_its_seed_says() -> None:
    """The step's draws come from torch's default generator: the same seed gives the same augmented, mixed batch
    and loss; another seed another one (the cell reseeds before every batch, so a resume repeats the stream)."""
    from vit_locality.config.protocol import TrainingProtocol
    from vit_locality.data.on_device import BatchAugment

    protocol = TrainingProtocol(autoaug=True, cutmix=True, ls=0.1, autoaug_device="data_on_device")
    augment = BatchAugment(16, protocol, grouping="select")
    torch.manual_seed(0)
    module = ViTClassifier(10, 16, [0.5] * 3, [0.25] * 3, dict(depth=1, dim=16, heads=2, mlp_ratio=1.0),
                           protocol=protocol, batch_augment=augment)  # fmt: skip
    images, labels = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8), torch.randint(0, 10, (8,))
    losses = []
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        losses.append(module.augmented_loss(images, labels)[0].detach())
    assert torch.equal(losses[0], losses[1]) and not torch.equal(losses[0], losses[2])


@pytest.mark.parametrize(
    ("device", "world", "mode"),
    [("cuda", 1, "reduce-overhead"), ("cuda", 2, "default"), ("cpu", 1, "default"), ("mps", 1, "default")],
)
def test_cuda_graphs_only_where_the_step_qualifies(device: str, world: int, mode: str) -> None:
    choice = compile_choice(device, world)
    assert choice.mode == mode
    assert f"mode={mode}" in choice.line() and choice.reason in choice.line()


@pytest.mark.parametrize("compile_step", [True, False])
def test_a_compiled_cell_moves_the_loaders_augmentation_into_the_step(compile_step: bool) -> None:
    """Compiled: the loader yields the stored batches and the module augments inside its graph (AutoAugment's
    select path, no host read); eager: the loader augments, as before."""
    from vit_locality.run.builders import build_datamodule, build_module

    settings = typed([*CELL[:-1], f"model.compile={str(compile_step).lower()}"])
    datamodule = build_datamodule(settings)
    module = build_module(settings, datamodule)
    if compile_step:
        assert datamodule.batch_augment is None and module.batch_augment is datamodule.step_augment
        assert module.batch_augment.grouping == "select" and module.batch_augment.policy is not None
    else:
        assert datamodule.batch_augment is not None and module.batch_augment is None


def test_a_compiled_cell_is_its_own_random_stream_in_the_identity() -> None:
    """Compiled draws have eager's distributions but not its values: another identity, so neither resumes or skips
    as the other; `auto` on a CPU is eager and keeps the eager identity."""
    from vit_locality.config.identity import identity_hash

    eager, auto, compiled = (typed([*CELL[:-1], f"model.compile={value}"]) for value in ("false", "auto", "true"))
    assert identity_hash(eager) == identity_hash(auto) != identity_hash(compiled)


CELLS = {  # (protocol, loader's augmentation in the step, world, rank)
    "Modern on the device": (dict(autoaug=True, policy="cifar10", cutmix=True, ls=0.1), True, 1, 0),
    "Modern, rank 1 of 2": (dict(autoaug=True, policy="cifar10", cutmix=True, ls=0.1), True, 2, 1),
    "ColorJitter on the device": (dict(autoaug=True, policy="colorjitter", cutmix=True), True, 1, 0),
    "workers + AutoAugment batched (aug.device=gpu)": (
        dict(autoaug=True, policy="cifar10", autoaug_device="gpu"),
        False,
        1,
        0,
    ),
    "CutMix half the batches, Random Erasing": (dict(cutmix=True, cutmix_prob=0.5, erasing=True), True, 1, 0),
    "MixUp": (dict(mixup=True, ls=0.1), True, 1, 0),
    "Baseline": (dict(), True, 1, 0),
}


@pytest.mark.parametrize("cell", list(CELLS))
def test_every_cells_step_traces_as_one_graph(cell: str) -> None:
    """The step of each kind of cell, as compile_step prepares it (AutoAugment's select path on every device), has
    no graph break: no host read, no untraceable generator."""
    from vit_locality.config.protocol import TrainingProtocol
    from vit_locality.data.on_device import BatchAugment

    fields, in_step, world, rank = CELLS[cell]
    protocol = TrainingProtocol(**{"autoaug_device": "data_on_device", **fields})
    augment = BatchAugment(16, protocol, grouping="select") if in_step else None
    module = ViTClassifier(10, 16, [0.5] * 3, [0.25] * 3, dict(depth=1, dim=16, heads=2, mlp_ratio=1.0),
                           protocol=protocol, batch_augment=augment)  # fmt: skip
    module.on_fit_start()
    module.compile_step()  # sets the graph up; nothing compiles until it is called
    images, labels = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8), torch.randint(0, 10, (8,))
    explained = dynamo.explain(module.augmented_loss)(images, labels, world, rank)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
