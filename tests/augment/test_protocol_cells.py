"""Each of the 8 ablation cells gets exactly the transforms and the loss that its flags name, and no more."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from helpers import typed
from torchvision.transforms import v2

import vit_locality.augment.batched_autoaugment as batched
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.run.builders import build_datamodule, build_module

CELLS = list(itertools.product([False, True], [False, True], [0.0, 0.1]))


def _cell_cfg(autoaug: bool, cutmix: bool, ls: float, data: str = "synthetic"):
    return typed([f"data={data}", "model=vit_tiny", f"aug.autoaug={autoaug}", f"aug.cutmix={cutmix}", f"loss.ls={ls}"])


def _transform_types(datamodule) -> list[type]:
    return [type(t) for t in datamodule.train_transform.transforms]


@pytest.mark.parametrize(("autoaug", "cutmix", "ls"), CELLS)
def test_cell_transforms(autoaug: bool, cutmix: bool, ls: float) -> None:
    datamodule = build_datamodule(_cell_cfg(autoaug, cutmix, ls))
    crop, flip, *rest = datamodule.train_transform.transforms
    assert isinstance(crop, v2.RandomCrop) and crop.size == (32, 32) and crop.padding == [4, 4, 4, 4]
    assert isinstance(flip, v2.RandomHorizontalFlip)
    if autoaug:
        assert len(rest) == 1 and isinstance(rest[0], v2.AutoAugment)
        assert rest[0].policy == v2.AutoAugmentPolicy.CIFAR10 and datamodule.batch_augment.policy == "cifar10"
    else:
        assert rest == []


@pytest.mark.parametrize("autoaug", [False, True])
def test_tiny_imagenet_uses_colorjitter_and_patch_8(autoaug: bool) -> None:
    datamodule = build_datamodule(_cell_cfg(autoaug, False, 0.0, data="tiny_imagenet"))
    crop = datamodule.train_transform.transforms[0]
    assert crop.size == (64, 64) and crop.padding == [8, 8, 8, 8]
    rest = datamodule.train_transform.transforms[2:]
    if autoaug:
        (jitter,) = rest
        assert isinstance(jitter, v2.ColorJitter) and datamodule.batch_augment.policy == "colorjitter"
        assert jitter.brightness == (0.6, 1.4) and jitter.contrast == (0.6, 1.4) and jitter.saturation == (0.6, 1.4)
        assert jitter.hue is None
    else:
        assert rest == []


def test_policy_override() -> None:
    cfg = typed(["data=synthetic", "aug.autoaug=true", "aug.policy=svhn"])
    datamodule = build_datamodule(cfg)
    assert (
        datamodule.batch_augment.policy == "svhn"
        and datamodule.train_transform.transforms[-1].policy == v2.AutoAugmentPolicy.SVHN
    )


# Logits with a different value for every class of a row, so that the loss depends on where the target mass goes.
LOGITS = torch.tensor([[float((3 * i + 7 * c) % 10) / 2 - 1 for c in range(10)] for i in range(8)])


def _cross_entropy_by_hand(logits: torch.Tensor, targets: list[list[float]]) -> float:
    """Mean over rows of -sum_c t_c log softmax(z)_c, the log-softmax written out in float64."""
    total = 0.0
    for z, t in zip(logits.double().tolist(), targets, strict=True):
        log_norm = math.log(sum(math.exp(v) for v in z))
        total -= sum(tc * (v - log_norm) for v, tc in zip(z, t, strict=True))
    return total / len(targets)


@pytest.mark.parametrize(("autoaug", "cutmix", "ls"), CELLS)
def test_cell_loss(autoaug: bool, cutmix: bool, ls: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loss of every cell is the cross-entropy against exactly the cell's soft targets: one-hot, or under
    CutMix kept share x own label + pasted share x partner's label, then smoothed once, (1 - eps) y + eps / C.

    CutMix's box and partners are read off the pixels the model saw (each image is one constant value that names
    its label), not from the CutMix code, so a wrong share, partner, or smoothing applied twice or not at all moves
    the loss away from the hand-computed value."""
    cfg = _cell_cfg(autoaug, cutmix, ls)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    torch.manual_seed(0)
    images = (torch.arange(8, dtype=torch.uint8) * 30).view(8, 1, 1, 1).expand(8, 3, 32, 32).contiguous()
    labels = torch.arange(8)
    seen: list[torch.Tensor] = []
    monkeypatch.setattr(module.model, "forward", lambda x: (seen.append(x), LOGITS.clone())[1])

    loss, _, reference = module.training_loss(images, labels)

    raw = (seen[0] * module.std + module.mean).round()  # back to the uint8 values the model saw
    mixed = []  # per image: {label: share of the image}
    for i in range(8):
        values, counts = raw[i].flatten().unique(return_counts=True)
        mixed.append({int(v) // 30: n / raw[i].numel() for v, n in zip(values.tolist(), counts.tolist(), strict=True)})
    if cutmix:
        assert any(0 < share < 1 for shares in mixed for share in shares.values())  # a box was really pasted
        assert all(len(shares) <= 2 and labels[i].item() in shares for i, shares in enumerate(mixed))
        assert reference.tolist() == [max(shares, key=shares.get) for shares in mixed]
    else:
        assert mixed == [{i: 1.0} for i in range(8)]  # the batch reaches the model untouched
        assert torch.equal(reference, labels)
    targets = [[(1 - ls) * shares.get(c, 0.0) + ls / 10 for c in range(10)] for shares in mixed]
    assert float(loss) == pytest.approx(_cross_entropy_by_hand(LOGITS, targets), rel=1e-6)


@pytest.mark.parametrize(("autoaug", "cutmix", "ls"), CELLS)
def test_cell_record_and_name(autoaug: bool, cutmix: bool, ls: float) -> None:
    record = _cell_cfg(autoaug, cutmix, ls).protocol.record()
    assert (record["autoaug"], record["cutmix"], record["ls"]) == (autoaug, cutmix, ls)
    desc = record["description"]
    assert ("autoaugment(cifar10)" in desc) == autoaug
    assert ("cutmix(alpha=1.0)" in desc) == cutmix
    assert ("ls=0.1" in desc) == (ls > 0)
    assert TrainingProtocol.from_record(record).cell_name in {
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
    names = {(aa, cm, ls): TrainingProtocol(autoaug=aa, cutmix=cm, ls=ls).cell_name for aa, cm, ls in CELLS}
    assert names[(False, False, 0.0)] == "Baseline"
    assert names[(True, True, 0.1)] == "Modern"
    assert names[(False, True, 0.1)] == "-AA"
    assert names[(True, False, 0.1)] == "-CM"
    assert names[(True, True, 0.0)] == "-LS"
    assert names[(True, False, 0.0)] == "+AA"
    assert len(set(names.values())) == 8


def test_autoaugment_on_the_device_moves_it_out_of_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """With aug.device=gpu the workers only crop and flip, and the training step augments every image of the
    batch with its own sub-policy: 256 copies of one image must come out as many different images, and the
    recorded choices must span the policy. One sub-policy for the whole batch gives at most 9 different images
    (each op applied or not, with either sign) and a single choice."""
    cfg = typed(["data=synthetic", "model=vit_tiny", "aug.autoaug=true", "aug.device=gpu"])
    datamodule = build_datamodule(cfg)
    assert [type(t) for t in datamodule.train_transform.transforms] == [v2.RandomCrop, v2.RandomHorizontalFlip]
    module = build_module(cfg, datamodule)
    assert module.device_autoaugment is not None
    assert "autoaugment(cifar10, batched on gpu)" in cfg.protocol.record()["description"]

    recorded: list[batched.AutoAugmentDraws] = []
    real_apply = batched.apply

    def recording(images: torch.Tensor, draws: batched.AutoAugmentDraws, grouping: str | None = None) -> torch.Tensor:
        recorded.append(draws)
        return real_apply(images, draws, grouping)

    monkeypatch.setattr(batched, "apply", recording)
    seen: list[torch.Tensor] = []
    monkeypatch.setattr(module.model, "forward", lambda x: (seen.append(x), torch.zeros(len(x), 10))[1])
    image = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    images = image.expand(256, 3, 32, 32).contiguous()
    labels = torch.arange(256) % 10
    torch.manual_seed(0)
    module.training_loss(images, labels)

    (draws,) = recorded
    assert draws.policy == "cifar10" and len(draws) == 256
    assert len(set(draws.sub_policy.tolist())) >= 20  # of the policy's 25; one per batch would give 1
    patterns = {(s, *a) for s, a in zip(draws.sub_policy.tolist(), draws.applied.tolist(), strict=True)}
    assert len(patterns) >= 40
    raw = (seen[0] * module.std + module.mean).round().to(torch.uint8)
    assert len({bytes(x.flatten().tolist()) for x in raw}) >= 40
    assert (raw != image).flatten(1).any(1).float().mean() > 0.5  # most images are changed


def test_autoaugment_off_builds_no_device_augmentation() -> None:
    cfg = typed(["data=synthetic", "model=vit_tiny", "aug.autoaug=false", "aug.device=gpu"])
    datamodule = build_datamodule(cfg)
    assert build_module(cfg, datamodule).device_autoaugment is None
