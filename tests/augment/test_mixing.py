"""MixUp, CutMix's spatially global control, through the one mixing entry point: the whole batch blended with a
permuted partner under one Beta(alpha, alpha) lambda, soft targets that carry lambda, label smoothing once in the
loss; a MixUp cell named, tagged and grouped apart from its twin; never together with CutMix."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import typed

from vit_locality.augment.mixing import mix_batch, mixup_batch
from vit_locality.catalog import CELL_ORDER
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.errors import ConfigError
from vit_locality.report.load.aggregate import aggregate_runs
from vit_locality.run.builders import build_datamodule, build_module
from vit_locality.store.record import RunRecord, RunScan


def _constant_batch(batch: int) -> torch.Tensor:
    """Image i is the constant 10 * (i + 1): a blend's value names the partner it came from."""
    return (10 * (torch.arange(batch) + 1)).view(batch, 1, 1, 1).expand(batch, 3, 8, 8).to(torch.uint8).clone()


@pytest.mark.parametrize("lam", [0.2, 0.5, 0.9])
def test_mixup_images_are_the_lambda_blend_of_each_image_and_its_partner(lam: float) -> None:
    images = _constant_batch(6)
    labels = torch.tensor([0, 1, 2, 3, 4, 0])
    torch.manual_seed(3)
    result = mixup_batch(images, labels, num_classes=5, lam=lam)

    assert sorted(result.partner.tolist()) == list(range(6))  # a permutation
    assert result.images.dtype == torch.float32 and torch.equal(images, _constant_batch(6))  # input untouched
    pixels = images.float()
    assert torch.equal(result.images, lam * pixels + (1 - lam) * pixels[result.partner])
    # Read the partner off the pixels, not off the code: value = lam 10 (i + 1) + (1 - lam) 10 (p + 1).
    for i in range(6):
        value = float(result.images[i, 0, 0, 0])
        assert torch.all(result.images[i] == value)  # blended whole: no box, no per-pixel weights
        partner = round((value - lam * 10 * (i + 1)) / ((1 - lam) * 10)) - 1
        assert partner == int(result.partner[i])


def test_mixup_targets_sum_to_one_and_carry_lambda() -> None:
    labels = torch.tensor([0, 1, 2, 3])
    torch.manual_seed(0)
    result = mixup_batch(_constant_batch(4), labels, num_classes=4, lam=0.7)
    torch.testing.assert_close(result.targets.sum(dim=1), torch.ones(4))
    for i, p in enumerate(result.partner.tolist()):
        expected = torch.zeros(4)
        expected[i] += 0.7
        expected[p] += 0.3  # the same label twice when an image is its own partner: 1.0 on it
        torch.testing.assert_close(result.targets[i], expected)
    assert result.lam == 0.7


def test_mixup_draws_from_the_global_generator() -> None:
    """The run reseeds torch's global generator per epoch; the same seed gives the same lambda and partners."""
    images, labels = _constant_batch(8), torch.arange(8)
    torch.manual_seed(5)
    first = mixup_batch(images, labels, num_classes=8)
    torch.manual_seed(5)
    again = mixup_batch(images, labels, num_classes=8)
    assert first.lam == again.lam and torch.equal(first.partner, again.partner)
    assert mixup_batch(images, labels, num_classes=8).lam != first.lam


@pytest.mark.parametrize("alpha", [0.2, 1.0])
def test_lambda_follows_beta_alpha_alpha(alpha: float) -> None:
    """Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1)), 1/12 at a = 1 and 0.179 at a = 0.2 (mass at the ends)."""
    torch.manual_seed(0)
    lams = torch.tensor([mixup_batch(_constant_batch(2), torch.arange(2), 2, alpha).lam for _ in range(2000)])
    assert float(lams.mean()) == pytest.approx(0.5, abs=0.03)
    assert float(lams.var()) == pytest.approx(1 / (4 * (2 * alpha + 1)), rel=0.1)


def test_mix_batch_dispatches_on_the_protocol() -> None:
    images, labels = _constant_batch(4), torch.arange(4)
    same = mix_batch(images, labels, 4, TrainingProtocol())
    assert same[0] is images and same[1] is labels and same[2] is labels  # nothing drawn, nothing changed
    torch.manual_seed(0)
    blended, targets, reference = mix_batch(images, labels, 4, TrainingProtocol(mixup=True))
    assert blended.dtype == torch.float32 and targets.shape == (4, 4)
    assert torch.equal(reference, targets.argmax(dim=1))
    pasted, _, _ = mix_batch(images, labels, 4, TrainingProtocol(cutmix=True))
    assert pasted.dtype == torch.uint8  # CutMix copies pixels, it does not blend them


ONE_MIXER = "false when aug.cutmix=true (one mixer)"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["aug.mixup=true", "aug.mixup_alpha=-1"], "aug.mixup_alpha=-1 is not allowed: > 0, finite"),
        (["aug.mixup=true", "aug.mixup_alpha=0"], "aug.mixup_alpha=0 is not allowed: > 0, finite"),
        (["aug.mixup=true", "aug.mixup_alpha=inf"], "aug.mixup_alpha=inf is not allowed: > 0, finite"),
        (
            ["aug.mixup=true", "aug.cutmix=true"],
            "aug.mixup=True is not allowed: false when aug.cutmix=true (one mixer)",
        ),
    ],
)
def test_mixup_settings_out_of_range_fail_in_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        typed(["data=synthetic", "protocol=baseline", *overrides])
    assert str(caught.value) == message


def test_mixup_settings_in_range_pass() -> None:
    protocol = typed(["data=synthetic", "protocol=baseline", "aug.mixup=true", "aug.mixup_alpha=0.2"]).protocol
    assert protocol.mixup and protocol.mixup_alpha == 0.2
    assert not typed(["data=synthetic"]).protocol.mixup  # off by default


def test_a_mixup_cell_is_named_tagged_and_grouped_apart_from_its_twin() -> None:
    for aa, cm, ls in ((False, False, 0.0), (True, False, 0.1)):
        off, on = (
            TrainingProtocol(autoaug=aa, cutmix=cm, ls=ls),
            TrainingProtocol(autoaug=aa, cutmix=cm, ls=ls, mixup=True),
        )
        assert on.cell_name == off.cell_name + "+MU" and on.cell_name not in CELL_ORDER
        assert on.tags() == [*[on.cell_name], *off.tags()[1:], "mu1"] and "mu1" not in off.tags()
        assert on.group_key() != off.group_key()
    paper = {
        TrainingProtocol(autoaug=aa, cutmix=cm, ls=ls).cell_name
        for aa in (False, True)
        for cm in (False, True)
        for ls in (0.0, 0.1)
    }
    assert paper == {"Baseline", "+AA", "+CM", "+LS", "-AA", "-CM", "-LS", "Modern"}


def test_mixup_in_the_description_and_the_record() -> None:
    protocol = TrainingProtocol(mixup=True, mixup_alpha=0.4, ls=0.1)
    assert protocol.describe() == "crop+flip | mixup(alpha=0.4) | ls=0.1"
    record = protocol.record()
    assert (record["mixup"], record["mixup_alpha"]) == (True, 0.4)
    assert TrainingProtocol.from_record(record) == protocol
    assert (TrainingProtocol().record()["mixup"], TrainingProtocol().record()["mixup_alpha"]) == (False, None)


def test_a_record_without_mixup_keys_reads_as_mixup_off() -> None:
    old = {"autoaug": False, "cutmix": True, "ls": 0.1, "policy": None, "cutmix_alpha": 1.0, "cutmix_prob": 1.0}
    protocol = TrainingProtocol.from_record(old)
    assert not protocol.mixup and protocol.cell_name == "-AA" and protocol.tags() == ["-AA", "aa0", "cm1", "ls0.1"]


def _run(tmp_path: Path, name: str, seed: int, protocol: dict) -> RunRecord:
    data = {
        "status": "complete",
        "seed": seed,
        "identity_hash": name,
        "data": {"name": "synthetic"},
        "model": {"name": "vit_tiny"},
        "protocol": protocol,
        "metrics": {"test/acc1": 0.5},
        "attention": {"final": {"min_mad_early": 0.4, "mean_entropy_early": 0.9, "early_layers": 2}},
    }
    return RunRecord(tmp_path / name, data)


def test_the_report_keeps_a_mixup_cell_out_of_its_twin(tmp_path: Path) -> None:
    """Two Baseline runs (one recorded before MixUp existed) pool; the MixUp run is its own group, outside the
    paper's 8 cells, and a note says it is left out of the tables."""
    baseline = {"autoaug": False, "cutmix": False, "ls": 0.0}
    runs = [
        _run(tmp_path, "old", 0, baseline),
        _run(tmp_path, "new", 1, TrainingProtocol().record()),
        _run(tmp_path, "mu", 0, TrainingProtocol(mixup=True).record()),
    ]
    result = aggregate_runs(RunScan(runs, []))
    cells = {key.cell: len(group.runs) for key, group in result.groups.items()}
    assert cells == {"Baseline": 2, "Baseline+MU": 1}
    assert list(result.cells("synthetic", "vit_tiny")) == ["Baseline"]
    assert any("Baseline+MU" in note and "left out" in note for note in result.notes)


def _cross_entropy_by_hand(logits: torch.Tensor, targets: torch.Tensor) -> float:
    total = 0.0
    for z, t in zip(logits.double().tolist(), targets.double().tolist(), strict=True):
        log_norm = math.log(sum(math.exp(v) for v in z))
        total -= sum(tc * (v - log_norm) for v, tc in zip(z, t, strict=True))
    return total / len(targets)


def test_the_module_trains_a_mixup_cell_on_blended_images_and_smoothed_blended_targets(monkeypatch) -> None:
    """(1 - eps) (lam own + (1 - lam) partner) + eps / C: MixUp's targets, smoothed once in the loss."""
    cfg = typed(["data=synthetic", "model=vit_tiny", "protocol=baseline", "aug.mixup=true", "loss.ls=0.1"])
    module = build_module(cfg, build_datamodule(cfg))
    logits = torch.tensor([[float((3 * i + 7 * c) % 10) / 2 - 1 for c in range(10)] for i in range(8)])
    seen: list[torch.Tensor] = []
    monkeypatch.setattr(module.model, "forward", lambda x: (seen.append(x), logits.clone())[1])
    images, labels = _constant_batch(8), torch.arange(8)

    torch.manual_seed(0)
    loss, _, reference = module.training_loss(images, labels)
    torch.manual_seed(0)
    expected = mixup_batch(images, labels, 10, alpha=1.0)

    torch.testing.assert_close(seen[0], module.preprocess(expected.images))
    targets = 0.9 * expected.targets + 0.1 / 10
    assert float(loss) == pytest.approx(_cross_entropy_by_hand(logits, targets), rel=1e-6)
    assert torch.equal(reference, expected.targets.argmax(dim=1))
