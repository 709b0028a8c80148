"""Batch CutMix: pixels pasted from the partner inside the box only, soft targets equal to the pasted area."""

from __future__ import annotations

import pytest
import torch

from vit_locality.augment.mixing import cutmix_batch


def _constant_batch(batch: int, size: int, dtype: torch.dtype) -> torch.Tensor:
    """Image i is the constant 10 * (i + 1) in every channel: any pasted pixel shows up as a change."""
    values = 10 * (torch.arange(batch) + 1)
    return values.view(batch, 1, 1, 1).expand(batch, 3, size, size).to(dtype).clone()


def _box_mask(box: tuple[int, int, int, int], height: int, width: int) -> torch.Tensor:
    top, left, bottom, right = box
    mask = torch.zeros(height, width, dtype=torch.bool)
    for y in range(height):
        for x in range(width):
            mask[y, x] = top <= y < bottom and left <= x < right
    return mask


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("lam", [0.2, 0.5, 0.8])
def test_pixels_come_from_self_outside_and_partner_inside_the_box(dtype: torch.dtype, lam: float) -> None:
    for seed in range(5):
        gen = torch.Generator().manual_seed(100 + seed)
        if dtype == torch.uint8:
            images = torch.randint(0, 256, (6, 3, 16, 12), generator=gen, dtype=torch.uint8)
        else:
            images = torch.randn(6, 3, 16, 12, generator=gen)
        original = images.clone()
        labels = torch.tensor([0, 1, 2, 3, 4, 0])
        torch.manual_seed(seed)
        result = cutmix_batch(images, labels, num_classes=5, lam=lam)

        assert torch.equal(images, original), "the input batch must not be edited in place"
        assert result.images.dtype == dtype and result.images.shape == images.shape
        mask = _box_mask(result.box, 16, 12)
        assert mask.any(), "a lambda below 1 pastes a non-empty box"
        for i in range(6):
            j = int(result.partner[i])
            for y in range(16):
                for x in range(12):
                    source = images[j] if mask[y, x] else images[i]
                    assert torch.equal(result.images[i, :, y, x], source[:, y, x]), (i, y, x)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("lam", [0.1, 0.4, 0.6, 0.9])
def test_soft_targets_equal_the_pasted_area(dtype: torch.dtype, lam: float) -> None:
    checked = 0
    for seed in range(8):
        images = _constant_batch(5, 16, dtype)
        labels = torch.tensor([4, 0, 2, 1, 3])  # all different: each moved pixel is a different label's
        torch.manual_seed(seed)
        result = cutmix_batch(images, labels, num_classes=6, lam=lam)

        partner = result.partner
        assert sorted(partner.tolist()) == list(range(5)), "partner must be a permutation"
        targets = result.targets
        assert targets.shape == (5, 6) and targets.dtype == torch.float32
        assert (targets >= 0).all()
        torch.testing.assert_close(targets.sum(1), torch.ones(5))

        changed = (result.images != images).any(dim=1)  # (B, H, W): pixels that differ from the input
        movers = [i for i in range(5) if int(partner[i]) != i]
        for i in range(5):
            if i not in movers:
                assert not changed[i].any()
                assert targets[i, labels[i]] == 1
        if not movers:
            continue
        region = changed[movers[0]]
        fraction = float(region.sum()) / (16 * 16)
        assert 0 < fraction < 1
        # one box for the whole batch, and it is the box that is reported
        assert all(torch.equal(changed[i], region) for i in movers)
        assert torch.equal(region, _box_mask(result.box, 16, 16))
        assert result.lam == pytest.approx(1 - fraction, abs=1e-6)
        for i in movers:
            own, other = int(labels[i]), int(labels[partner[i]])
            assert float(targets[i, other]) == pytest.approx(fraction, abs=1e-6)
            assert float(targets[i, own]) == pytest.approx(1 - fraction, abs=1e-6)
            assert float(targets[i].sum() - targets[i, own] - targets[i, other]) == pytest.approx(0, abs=1e-7)
        checked += len(movers)
    assert checked > 0


def test_partner_with_the_same_label_keeps_a_one_hot_target() -> None:
    images = _constant_batch(4, 8, torch.float32)
    labels = torch.tensor([2, 2, 2, 2])
    torch.manual_seed(0)
    result = cutmix_batch(images, labels, num_classes=3, lam=0.5)
    assert not torch.equal(result.images, images)  # pixels did move...
    assert torch.equal(result.targets, torch.nn.functional.one_hot(labels, 3).float())  # ...labels did not


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_lambda_one_changes_nothing(dtype: torch.dtype) -> None:
    images = torch.randint(0, 256, (4, 3, 8, 8)).to(dtype)
    labels = torch.tensor([0, 1, 2, 3])
    torch.manual_seed(0)
    result = cutmix_batch(images, labels, num_classes=4, lam=1.0)
    assert torch.equal(result.images, images)
    assert result.images.dtype == dtype
    assert torch.equal(result.targets, torch.eye(4))
    assert result.lam == 1.0
    top, left, bottom, right = result.box
    assert (bottom - top) * (right - left) == 0


def test_drawn_lambda_is_reproducible_under_a_seed() -> None:
    images = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8)
    labels = torch.arange(8) % 4

    def draw(seed: int):
        torch.manual_seed(seed)
        return [cutmix_batch(images, labels, num_classes=4) for _ in range(3)]

    first, again, other = draw(7), draw(7), draw(8)
    for a, b in zip(first, again, strict=True):
        assert a.lam == b.lam and a.box == b.box
        assert torch.equal(a.partner, b.partner)
        assert torch.equal(a.images, b.images) and torch.equal(a.targets, b.targets)
    assert [r.lam for r in first] != [r.lam for r in other]
    assert len({r.lam for r in first}) > 1, "each call draws a new lambda"


def test_drawn_lambdas_lie_on_the_pixel_grid() -> None:
    images, labels = torch.zeros(1, 1, 8, 8), torch.zeros(1, dtype=torch.long)
    torch.manual_seed(0)
    lams = [cutmix_batch(images, labels, num_classes=2).lam for _ in range(200)]
    assert all(0 <= lam <= 1 for lam in lams)
    assert all(abs(lam * 64 - round(lam * 64)) < 1e-9 for lam in lams)  # 1 - (pasted pixels) / 64
    assert len(set(lams)) > 5


@pytest.mark.parametrize("alpha", [1.0, 50.0])
def test_mean_lambda_matches_the_clipped_box_expectation(alpha: float) -> None:
    """lambda is corrected to the pasted area, and a box centred near a border is clipped, so the mean
    returned lambda is NOT the Beta mean 0.5 (this holds for Yun et al.'s and torchvision's CutMix too).

    For a box of side s = sqrt(1 - lambda_drawn) (unit image) whose centre is uniform, the expected clipped
    length per axis is s - s^2 / 4, so E[pasted area | lambda_drawn] = (s - s^2 / 4)^2; on a 128 px image
    pixel rounding adds about +0.005. With alpha = 1 this gives E[lambda] = 1 - (1/2 - 1/5 + 1/48) = 0.679.
    """
    images = torch.zeros(1, 1, 128, 128, dtype=torch.uint8)
    labels = torch.zeros(1, dtype=torch.long)
    torch.manual_seed(0)
    lams = torch.tensor([cutmix_batch(images, labels, num_classes=2, alpha=alpha).lam for _ in range(2000)])

    draws = torch.distributions.Beta(alpha, alpha).sample((200_000,))
    side = (1 - draws).sqrt()
    expected = float(1 - ((side - side**2 / 4) ** 2).mean())
    if alpha == 1.0:
        assert expected == pytest.approx(1 - (1 / 2 - 1 / 5 + 1 / 48), abs=2e-3)
    assert float(lams.mean()) == pytest.approx(expected, abs=0.02)
    # alpha shapes the spread: Beta(50, 50) draws sit near 0.5, Beta(1, 1) spread over [0, 1]
    if alpha == 1.0:
        assert float(lams.std()) > 0.15
    else:
        assert float(lams.std()) < 0.13
