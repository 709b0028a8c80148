"""One compiled graph for the training step: the model, the protocol's batch mixing (CutMix or MixUp, drawn on the
device) and the label-smoothed loss trace with no graph break, compile once with CPU inductor (fullgraph, static
shapes) and give eager's loss and gradients over three epochs of batches without a recompilation. The whole step
with the on-device augmentation in it, in a real cell: tests/model/test_compiled_step.py. Every training batch has
one size on both data paths (the last partial batch is dropped)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch._dynamo as dynamo
import torch.nn.functional as F
from helpers import QUICK, InProcessTraining, Spawner, compose_config, typed

from vit_locality.augment.mixing import mix_batch
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.model.vit import VisionTransformer
from vit_locality.run.builders import build_datamodule

CLASSES, BATCH = 10, 8
PROTOCOLS = {
    "cutmix_ls": TrainingProtocol(cutmix=True, ls=0.1),
    "cutmix_half_ls": TrainingProtocol(cutmix=True, cutmix_prob=0.5, ls=0.1),
    "mixup": TrainingProtocol(mixup=True),
    "plain": TrainingProtocol(),
}


def _step(model: torch.nn.Module, protocol: TrainingProtocol):
    mean, std = torch.full((1, 3, 1, 1), 125.0), torch.full((1, 3, 1, 1), 63.0)

    def loss(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        images, targets, _ = mix_batch(images, labels, CLASSES, protocol)
        logits = model((images.float() - mean) / std)
        return F.cross_entropy(logits, targets, label_smoothing=protocol.ls)

    return loss


def _model() -> VisionTransformer:
    torch.manual_seed(0)
    return VisionTransformer(CLASSES, 32, depth=1, dim=32, heads=2, mlp_ratio=2.0)


def _batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randint(0, 256, (BATCH, 3, 32, 32), dtype=torch.uint8, generator=generator),
         torch.randint(0, CLASSES, (BATCH,), generator=generator))
        for _ in range(count)
    ]  # fmt: skip


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_training_loss_traces_without_a_graph_break(name: str) -> None:
    images, labels = _batches(1)[0]
    explained = dynamo.explain(_step(_model(), PROTOCOLS[name]))(images, labels)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


def test_a_host_read_is_a_graph_break() -> None:
    """The check above catches the mutant: CutMix's lambda read as a Python number splits the graph."""
    protocol = PROTOCOLS["cutmix_ls"]
    model = _model()

    def reading(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        mixed, targets, _ = mix_batch(images, labels, CLASSES, protocol)
        scale = float(targets.max())
        return F.cross_entropy(model(mixed.float() * scale), targets)

    assert dynamo.explain(reading)(*_batches(1)[0]).graph_break_count >= 1


# An inductor compile of forward and backward (C++, its compiler a subprocess): about 20-60 s on two busy cores.
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler found: CPU inductor compiles C++ (the CI machine has one)")  # fmt: skip
def test_compiled_step_matches_eager_and_never_recompiles(request: pytest.FixtureRequest, spawns: Spawner) -> None:
    import torch._inductor.config as inductor

    patched = inductor.patch(fallback_random=True)  # compiled draws = eager draws, so results compare
    patched.__enter__()  # inductor's own patch (undone below): a monkeypatch's undo left the option missing
    request.addfinalizer(lambda: patched.__exit__(None, None, None))
    protocol = PROTOCOLS["cutmix_ls"]
    eager_model, compiled_model = _model(), _model()
    eager = _step(eager_model, protocol)
    compiled = torch.compile(_step(compiled_model, protocol), fullgraph=True, dynamic=False, backend="inductor")
    dynamo.reset()
    dynamo.utils.counters.clear()
    batches = _batches(2)
    with dynamo.config.patch(error_on_recompile=True):
        for epoch in range(3):  # three epochs of two batches: one graph, compiled once
            for step, (images, labels) in enumerate(batches):
                for model, fn in ((eager_model, eager), (compiled_model, compiled)):
                    model.zero_grad()
                    torch.manual_seed(100 * epoch + step)
                    loss = fn(images, labels)
                    loss.backward()
                    if fn is eager:
                        want, grads = loss.detach(), [p.grad.clone() for p in model.parameters()]
                torch.testing.assert_close(loss.detach(), want, rtol=1e-4, atol=1e-5)
                for p, g in zip(compiled_model.parameters(), grads, strict=True):
                    torch.testing.assert_close(p.grad, g, rtol=1e-3, atol=1e-5)
    assert dynamo.utils.counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("on_device", [False, True])
def test_every_training_batch_has_one_size(on_device: bool) -> None:
    """100 training images in batches of 32: three batches of 32 (the last 4 images wait for another epoch)."""
    overrides = [*QUICK, "data.train_size=100", "data.batch_size=32", f"data.on_device={str(on_device).lower()}"]
    datamodule = build_datamodule(typed(overrides))
    datamodule.setup("fit")
    sizes = [len(labels) for _, labels in datamodule.train_dataloader()]
    assert sizes == [32, 32, 32]


@pytest.mark.parametrize("compiled", [True, False])
def test_a_short_evaluation_batch_keeps_a_compiled_models_one_shape(compiled: bool) -> None:
    """Static evaluation shapes: after a batch of 8, a compiled model gets the tail of 3 padded to 8 (no second
    shape to compile) and the 3 rows' logits are those of the 3 alone; an eager model gets the 3 as they are."""
    from vit_locality.model.classifier import ViTClassifier

    torch.manual_seed(0)
    small = dict(depth=1, dim=16, heads=2, mlp_ratio=1.0)
    module = ViTClassifier(3, 16, [0.5] * 3, [0.25] * 3, small).eval()
    module.hparams["compile_model"] = compiled  # the flag the padding follows
    module._eval_graph = module.__call__ if compiled else None  # stands in for the compiled forward: no compile here
    seen: list[int] = []
    module.model.register_forward_pre_hook(lambda _, args: seen.append(len(args[0])))
    images = torch.randint(0, 256, (11, 3, 16, 16), dtype=torch.uint8)
    with torch.no_grad():
        module.evaluation_logits(images[:8])
        tail = module.evaluation_logits(images[8:])
        alone = module(images[8:])
    assert seen[:2] == ([8, 8] if compiled else [8, 3])
    assert tail.shape == (3, 3)
    torch.testing.assert_close(tail, alone, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler found: CPU inductor compiles C++ (the CI machine has one)")  # fmt: skip
def test_a_compiled_cell_compiles_one_training_and_one_evaluation_graph(
    trains: InProcessTraining, tmp_path: Path
) -> None:
    """The module as a cell runs it (`model.compile=true`, CPU inductor) under Lightning: two epochs of fit, each
    validated on batches of another size than training's (and a short last one), then the test: the training graph
    and the evaluation graph, each compiled once with static shapes, and nothing recompiled."""
    from vit_locality.precheck.gate import settings_from
    from vit_locality.run.builders import build_module, build_trainer

    overrides = [*QUICK, "model.compile=true", "data.train_size=64", "data.batch_size=16", "data.test_size=40",
                 "data.eval_batch_size=24", "trainer.max_epochs=2", "aug.cutmix=true", "loss.ls=0.1"]  # fmt: skip
    settings = settings_from(compose_config(overrides), machine=False)
    datamodule = build_datamodule(settings)
    module = build_module(settings, datamodule)
    trainer = build_trainer(settings, tmp_path, loggers=[], callbacks=[], sanity_check=False)
    dynamo.reset()
    dynamo.utils.counters.clear()
    trainer.fit(module, datamodule=datamodule)
    trainer.test(module, datamodule=datamodule, verbose=False)
    assert dynamo.utils.counters["stats"]["unique_graphs"] == 2, dict(dynamo.utils.counters["stats"])
    assert not dynamo.utils.counters["recompiles"], dict(dynamo.utils.counters["recompiles"])
