"""`model.drop_path`: stochastic depth (DeiT's), off by default and then exactly the model it always was."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import CONF, compose_config, typed

from vit_locality.config.identity import identity_hash, run_identity
from vit_locality.model.vit import VisionTransformer
from vit_locality.precheck.gate import settings_from
from vit_locality.precheck.preflight import check_command

TINY = dict(num_classes=10, image_size=16, depth=3, dim=16, heads=2, mlp_ratio=2.0)


def _trajectory(drop_path: float | None, steps: int = 3) -> tuple[list[float], torch.Tensor]:
    """Losses of a few SGD steps from one seed, and the generator's state after them."""
    torch.manual_seed(0)
    model = VisionTransformer(**TINY) if drop_path is None else VisionTransformer(**TINY, drop_path=drop_path)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    images, labels = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(images), labels)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return losses, torch.get_rng_state()


def test_zero_is_bit_identical_to_the_model_without_it() -> None:
    (plain, plain_rng), (zero, zero_rng) = _trajectory(None), _trajectory(0.0)
    assert plain == zero and torch.equal(plain_rng, zero_rng)  # no draw made either: the random streams agree


def test_a_rate_changes_training_but_not_evaluation() -> None:
    (plain, _), (dropped, _) = _trajectory(None), _trajectory(0.1)
    assert plain[0] != dropped[0] and plain != dropped
    torch.manual_seed(0)
    a = VisionTransformer(**TINY).eval()
    torch.manual_seed(0)
    b = VisionTransformer(**TINY, drop_path=0.1).eval()
    images = torch.randn(2, 3, 16, 16)
    assert torch.equal(a(images), b(images))
    assert [block.drop_path for block in b.blocks] == pytest.approx([0.0, 0.05, 0.1])  # linear in depth


def test_the_setting_reaches_the_model_and_the_identity() -> None:
    base = ["data=synthetic", "model=vit_tiny"]
    settings = settings_from(compose_config([*base, "model.drop_path=0.1"]), machine=False)
    assert settings.model.drop_path == 0.1
    assert identity_hash(typed(base)) == identity_hash(typed([*base, "model.drop_path=0"]))
    assert identity_hash(typed([*base, "model.drop_path=0.1"])) != identity_hash(typed(base))
    # at 0 the setting is no part of the identity: cells recorded before it existed keep theirs
    assert "model.drop_path" not in run_identity(typed(base))


@pytest.mark.parametrize("value", ["1.0", "-0.1", "abc"])
def test_out_of_range_is_refused_in_one_line_before_any_cell(value: str) -> None:
    shown = repr(value) if value == "abc" else value
    allowed = "a number in [0, 1)"
    assert check_command([f"model.drop_path={value}"], CONF) == [f"model.drop_path={shown} is not allowed: {allowed}"]
    problems = check_command(["-m", "data=synthetic", f"model.drop_path=0.1,{value}"], CONF)
    assert problems == [f"model.drop_path={shown} is not allowed: {allowed}"]  # the sweep's second cell
