"""Each of the 8 ablation cells gets exactly the transforms and the loss that its flags name, and no more."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from helpers import compose_config
from torchvision.transforms import v2

from vit_locality.builders import build_datamodule, build_module
from vit_locality.cell import protocol_record
from vit_locality.domain import cell_name

CELLS = list(itertools.product([False, True], [False, True], [0.0, 0.1]))


def _cell_cfg(autoaug: bool, cutmix: bool, ls: float, data: str = "synthetic"):
    return compose_config(
        [f"data={data}", "model=vit_tiny", f"aug.autoaug={autoaug}", f"aug.cutmix={cutmix}", f"loss.ls={ls}"]
    )


def _transform_types(datamodule) -> list[type]:
    return [type(t) for t in datamodule.train_transform.transforms]


@pytest.mark.parametrize(("autoaug", "cutmix", "ls"), CELLS)
def test_cell_transforms(autoaug: bool, cutmix: bool, ls: float) -> None:
    datamodule, policy = build_datamodule(_cell_cfg(autoaug, cutmix, ls))
    crop, flip, *rest = datamodule.train_transform.transforms
    assert isinstance(crop, v2.RandomCrop) and crop.size == (32, 32) and crop.padding == [4, 4, 4, 4]
    assert isinstance(flip, v2.RandomHorizontalFlip)
    if autoaug:
        assert len(rest) == 1 and isinstance(rest[0], v2.AutoAugment)
        assert rest[0].policy == v2.AutoAugmentPolicy.CIFAR10 and policy == "cifar10"
    else:
        assert rest == []


@pytest.mark.parametrize("autoaug", [False, True])
def test_tiny_imagenet_uses_colorjitter_and_patch_8(autoaug: bool) -> None:
    datamodule, policy = build_datamodule(_cell_cfg(autoaug, False, 0.0, data="tiny_imagenet"))
    crop = datamodule.train_transform.transforms[0]
    assert crop.size == (64, 64) and crop.padding == [8, 8, 8, 8]
    rest = datamodule.train_transform.transforms[2:]
    if autoaug:
        (jitter,) = rest
        assert isinstance(jitter, v2.ColorJitter) and policy == "colorjitter"
        assert jitter.brightness == (0.6, 1.4) and jitter.contrast == (0.6, 1.4) and jitter.saturation == (0.6, 1.4)
        assert jitter.hue is None
    else:
        assert rest == []


def test_policy_override() -> None:
    cfg = compose_config(["data=synthetic", "aug.autoaug=true", "aug.policy=svhn"])
    datamodule, policy = build_datamodule(cfg)
    assert policy == "svhn" and datamodule.train_transform.transforms[-1].policy == v2.AutoAugmentPolicy.SVHN


class _CrossEntropySpy:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, logits, target, **kwargs):
        self.calls.append({"target": target.detach().clone(), **kwargs})
        return _REAL_CE(logits, target, **kwargs)


_REAL_CE = F.cross_entropy


@pytest.mark.parametrize(("autoaug", "cutmix", "ls"), CELLS)
def test_cell_loss(autoaug: bool, cutmix: bool, ls: float, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cell_cfg(autoaug, cutmix, ls)
    datamodule, _ = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    spy = _CrossEntropySpy()
    monkeypatch.setattr(F, "cross_entropy", spy)
    torch.manual_seed(0)
    # Distinct constant images and distinct labels make the partner of each image visible in its targets.
    images = (torch.arange(8, dtype=torch.uint8) * 30).view(8, 1, 1, 1).expand(8, 3, 32, 32).contiguous()
    labels = torch.arange(8)
    seen: list[torch.Tensor] = []
    monkeypatch.setattr(module.model, "forward", lambda x: (seen.append(x), torch.zeros(len(x), 10))[1])

    loss, _, reference, acc_name = module.training_loss(images, labels)

    (call,) = spy.calls
    assert call["label_smoothing"] == ls  # applied once, in the loss; exactly 0.0 when off
    if cutmix:
        target = call["target"]
        assert target.shape == (8, 10) and torch.allclose(target.sum(1), torch.ones(8))
        raw = (seen[0] * module.std + module.mean).round()  # back to the uint8 values the model saw
        changed = (raw != images.float()).any(dim=1).flatten(1)  # (B, H*W): the pasted pixels
        pasted = changed.float().mean(1)
        for i in range(8):
            own = target[i, labels[i]]
            assert torch.isclose(own, 1 - pasted[i], atol=1e-6)  # own mass = share of the image kept
            if pasted[i] > 0:
                partner = int(raw[i, 0].flatten()[changed[i]][0]) // 30  # the image value encodes its label
                assert torch.isclose(target[i, partner], pasted[i], atol=1e-6)  # partner mass = pasted area
        assert acc_name == "train/acc1_dominant" and torch.equal(reference, target.argmax(1))
    else:
        assert torch.equal(call["target"], labels)  # hard labels, no mixing
        assert torch.equal(seen[0], module.preprocess(images))  # the batch reaches the model untouched
        assert acc_name == "train/acc1"
    # With zero logits the loss is log(C) whatever the targets: a check that the spy saw the real call.
    assert torch.isclose(loss, torch.log(torch.tensor(10.0)))


@pytest.mark.parametrize(("autoaug", "cutmix", "ls"), CELLS)
def test_cell_record_and_name(autoaug: bool, cutmix: bool, ls: float) -> None:
    record = protocol_record(_cell_cfg(autoaug, cutmix, ls), "cifar10")
    assert (record["autoaug"], record["cutmix"], record["ls"]) == (autoaug, cutmix, ls)
    desc = record["description"]
    assert ("autoaugment(cifar10)" in desc) == autoaug
    assert ("cutmix(alpha=1.0)" in desc) == cutmix
    assert ("ls=0.1" in desc) == (ls > 0)
    assert cell_name(record["autoaug"], record["cutmix"], record["ls"]) in {
        "Baseline",
        "+AA",
        "+CM",
        "+LS",
        "Modern",
        "-AA",
        "-CM",
        "-LS",
    }


def test_cell_names_follow_the_paper() -> None:
    names = {cell: cell_name(*cell) for cell in CELLS}
    assert names[(False, False, 0.0)] == "Baseline"
    assert names[(True, True, 0.1)] == "Modern"
    assert names[(False, True, 0.1)] == "-AA"
    assert names[(True, False, 0.1)] == "-CM"
    assert names[(True, True, 0.0)] == "-LS"
    assert names[(True, False, 0.0)] == "+AA"
    assert len(set(names.values())) == 8


def test_autoaugment_on_the_device_moves_it_out_of_the_workers() -> None:
    cfg = compose_config(["data=synthetic", "model=vit_tiny", "aug.autoaug=true", "aug.device=gpu"])
    datamodule, policy = build_datamodule(cfg)
    assert [type(t) for t in datamodule.train_transform.transforms] == [v2.RandomCrop, v2.RandomHorizontalFlip]
    module = build_module(cfg, datamodule, policy)
    assert module.device_autoaugment is not None
    assert "autoaugment(cifar10, batched on gpu)" in protocol_record(cfg, policy)["description"]
    # The batch the model sees is augmented (AutoAugment changes some images), the labels are not.
    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    seen: list[torch.Tensor] = []
    module.model.forward = lambda x: (seen.append(x), torch.zeros(len(x), 10))[1]
    torch.manual_seed(0)
    module.hparams.cutmix = False
    module.training_loss(images, torch.arange(64) % 10)
    raw = (seen[0] * module.std + module.mean).round()
    assert (raw != images.float()).flatten(1).any(1).sum() > 0


def test_autoaugment_off_builds_no_device_augmentation() -> None:
    cfg = compose_config(["data=synthetic", "model=vit_tiny", "aug.autoaug=false", "aug.device=gpu"])
    datamodule, policy = build_datamodule(cfg)
    assert build_module(cfg, datamodule, policy).device_autoaugment is None
