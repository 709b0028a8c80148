"""The sine-cosine start of the position embeddings (`model.pos_init=sincos`, `model=vit_tiny_sincos`): its values
by hand, its grid locality by the project's own instrument, and a model whose other configs are untouched."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import typed

from tests.helpers import compose_config
from vit_locality.config.identity import run_identity
from vit_locality.errors import ConfigError
from vit_locality.extras.instruments.position_embedding import (
    position_rank_locality,
    position_similarity,
    similarity_at_distances,
)
from vit_locality.model.vit import VisionTransformer, sincos_position_code
from vit_locality.precheck.gate import settings_from


def test_the_code_by_hand() -> None:
    """dim 8: two frequencies per quarter, 1 and 1/10 radian per patch with base 100. Patch (row 1, column 3) is
    token 1 + 8 + 3; the CLS row is zero."""
    code = sincos_position_code(dim=8, grid_size=8, base=100.0)
    assert code.shape == (65, 8)
    assert torch.equal(code[0], torch.zeros(8))
    row, col = 1, 3
    expected = [
        math.sin(row * 1.0), math.sin(row * 0.1), math.cos(row * 1.0), math.cos(row * 0.1),
        math.sin(col * 1.0), math.sin(col * 0.1), math.cos(col * 1.0), math.cos(col * 0.1),
    ]  # fmt: skip
    torch.testing.assert_close(code[1 + 8 * row + col], torch.tensor(expected))
    with pytest.raises(ValueError, match="model.dim=6"):
        sincos_position_code(dim=6, grid_size=8)


def test_the_code_is_local_on_the_grid_and_the_random_start_is_not() -> None:
    """The project's position-embedding instrument on the two starts: the sine-cosine code's similarity falls with
    grid distance (rank locality near 1, neighbours far more alike than patches 4 or more steps apart); the
    paper's random start ignores the grid."""
    torch.manual_seed(0)
    sincos = VisionTransformer(num_classes=10, depth=1, dim=64, heads=4, pos_init="sincos").pos_embed.detach()
    learned = VisionTransformer(num_classes=10, depth=1, dim=64, heads=4).pos_embed.detach()
    local = position_rank_locality(position_similarity(sincos))
    near, far = similarity_at_distances(position_similarity(sincos))
    assert local > 0.85 and near > 0.9 and far < near - 0.3  # 0.894, 0.966 and 0.619 for dim 64
    assert abs(position_rank_locality(position_similarity(learned))) < 0.1


def test_the_model_starts_from_the_code_and_still_learns_it() -> None:
    model = VisionTransformer(num_classes=10, depth=1, dim=32, heads=2, pos_init="sincos")
    torch.testing.assert_close(model.pos_embed.detach()[0], sincos_position_code(32, 8))
    assert model.pos_embed.requires_grad
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    assert model.pos_embed.grad is not None and model.pos_embed.grad.abs().sum() > 0
    learned = VisionTransformer(num_classes=10, depth=1, dim=32, heads=2)
    assert 0.015 < learned.pos_embed.detach().std() < 0.025  # the paper's start: normal, std 0.02
    with pytest.raises(ConfigError, match=r"^model.pos_init='sin' is not allowed: one of learned, sincos$"):
        typed(["model=vit_tiny_sincos", "data=glyphs", "model.pos_init=sin"])


def test_the_config_builds_it_and_the_other_models_identities_are_unchanged() -> None:
    from vit_locality.model.classifier import ViTClassifier

    settings = typed(["model=vit_tiny_sincos", "data=glyphs"])
    architecture = settings.model.architecture()
    module = ViTClassifier(num_classes=10, image_size=32, mean=[0.5] * 3, std=[0.25] * 3, model=architecture)
    assert module.hparams["model"]["pos_init"] == "sincos" and module.model.pos_init == "sincos"
    torch.testing.assert_close(module.model.pos_embed.detach()[0], sincos_position_code(64, 8))
    assert VisionTransformer(num_classes=10, depth=1, dim=8, heads=1, mlp_ratio=1.0).pos_init == "learned"
    for model in ("vit_tiny", "vit_paper", "vit_convstem"):
        assert not any("pos_init" in key for key in run_identity(typed([f"model={model}"])))


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [(["model.pos_init=random"], "model.pos_init"), (["model.dim=66", "model.heads=2"], "model.dim")],
)
def test_bad_position_settings_name_the_key(overrides: list[str], fragment: str) -> None:
    cfg = compose_config(["model=vit_tiny_sincos", "data=glyphs", *overrides])
    with pytest.raises(ConfigError, match=fragment):
        settings_from(cfg, machine=False)
