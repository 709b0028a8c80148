"""The compact ViT: parameter arithmetic, geometry, and agreement of the fused and explicit attention
paths."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import typed

from vit_locality.errors import ConfigError
from vit_locality.model.vit import VisionTransformer, count_parameters

PAPER = dict(depth=8, dim=192, heads=8, mlp_ratio=2.0)
TINY = dict(depth=4, dim=64, heads=4, mlp_ratio=2.0)
TOKENS = 1 + 8 * 8


def _model(num_classes: int = 10, image_size: int = 32, seed: int = 0, **config) -> VisionTransformer:
    torch.manual_seed(seed)
    return VisionTransformer(num_classes, image_size=image_size, **(config or PAPER)).eval()


def _sharpen(model: VisionTransformer, scale: float = 12.0, seed: int = 1) -> None:
    """Push the weights away from the near-uniform attention of a fresh init (large q/k, random biases)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.mul_(scale)
            block.attn.qkv.bias.copy_(0.5 * torch.randn(block.attn.qkv.bias.shape, generator=gen))
            for norm in (block.norm1, block.norm2):
                norm.weight.copy_(1 + 0.3 * torch.randn(norm.weight.shape, generator=gen))
                norm.bias.copy_(0.3 * torch.randn(norm.bias.shape, generator=gen))
        model.pos_embed.mul_(20)


def _paper_arithmetic(num_classes: int, dim: int = 192, depth: int = 8, patch: int = 4) -> int:
    """The parameter count worked out by hand from the architecture as docs/design.md describes it."""
    hidden = 2 * dim
    embed = 3 * patch * patch * dim + dim  # conv weight + bias
    tokens = dim + TOKENS * dim  # CLS + positions
    norms = 2 * (2 * dim)
    qkv = dim * 3 * dim + 3 * dim
    proj = dim * dim + dim
    mlp = (dim * hidden + hidden) + (hidden * dim + dim)
    head = 2 * dim + dim * num_classes + num_classes  # final LayerNorm + linear head
    return embed + tokens + depth * (norms + qkv + proj + mlp) + head


# ---- size and geometry ----------------------------------------------------------------------------------


@pytest.mark.parametrize("num_classes, expected", [(100, 2_417_956), (10, 2_400_586)])
def test_paper_config_parameter_count(num_classes: int, expected: int) -> None:
    model = VisionTransformer(num_classes, image_size=32, **PAPER)
    assert count_parameters(model) == expected
    assert count_parameters(model) == _paper_arithmetic(num_classes)
    assert count_parameters(model) == sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_mlp_hidden_is_twice_dim_and_no_dropout() -> None:
    model = VisionTransformer(100, **PAPER)
    for block in model.blocks:
        assert block.mlp[0].out_features == 2 * 192
        assert block.attn.qkv.bias is not None
    assert not any(isinstance(m, torch.nn.Dropout) for m in model.modules())


@pytest.mark.parametrize("image_size, patch", [(32, 4), (64, 8)])
def test_builds_an_8x8_grid_for_each_image_size(image_size: int, patch: int) -> None:
    model = _model(num_classes=7, image_size=image_size)
    assert model.patch_embed.kernel_size == (patch, patch)
    assert model.patch_embed.stride == (patch, patch)
    images = torch.randn(3, 3, image_size, image_size)
    tokens = model.embed(images)
    assert tokens.shape == (3, TOKENS, 192)
    with torch.no_grad():
        logits, maps = model.forward_with_attention(images)
        assert model(images).shape == (3, 7)
    assert logits.shape == (3, 7)
    assert all(m.shape == (3, 8, TOKENS, TOKENS) for m in maps)


@pytest.mark.parametrize("image_size", [32, 64])
def test_patch_tokens_are_row_major_after_the_cls_token(image_size: int) -> None:
    """docs/metrics.md's distances take token 1 + k to be patch (k div 8, k mod 8) and token 0 the CLS token. A
    patch embedding that sums its patch's pixels, on an image whose patch (r, c) holds the value 8 r + c, must
    give token 1 + k the value (3 x patch x patch) k, plus that token's position embedding."""
    patch = image_size // 8
    model = VisionTransformer(10, image_size=image_size, depth=1, dim=4, heads=1)
    with torch.no_grad():
        model.patch_embed.weight.zero_()
        model.patch_embed.weight[0] = 1.0
        model.patch_embed.bias.zero_()
        model.cls_token.copy_(torch.tensor([-1.0, -2.0, -3.0, -4.0]).view(1, 1, 4))
        model.pos_embed.copy_(0.5 * torch.arange(65 * 4, dtype=torch.float32).view(1, 65, 4))
        rows = torch.arange(image_size) // patch
        image = (8 * rows[:, None] + rows[None, :]).float().expand(3, image_size, image_size)
        tokens = model.embed(image[None])[0]
    positions = model.pos_embed[0].detach()
    torch.testing.assert_close(tokens[0], torch.tensor([-1.0, -2.0, -3.0, -4.0]) + positions[0])
    expected = torch.zeros(64, 4)
    expected[:, 0] = 3 * patch * patch * torch.arange(64.0)
    torch.testing.assert_close(tokens[1:], expected + positions[1:])


@pytest.mark.parametrize("image_size", [28, 60, 33])
def test_image_size_not_divisible_by_grid_is_refused_before_anything_is_built(image_size: int) -> None:
    with pytest.raises(ConfigError, match=rf"^data.image_size={image_size} is not allowed: a multiple of 8 \(the 8"):
        typed(["data=synthetic", f"data.image_size={image_size}"])


def test_dim_not_divisible_by_heads_is_refused_before_anything_is_built() -> None:
    with pytest.raises(ConfigError, match=r"^model.dim=190 is not allowed: a multiple of model.heads=8$"):
        typed(["data=synthetic", "model.dim=190"])


@pytest.mark.parametrize(
    "config, heads",
    [(dict(depth=12, dim=384, heads=6, mlp_ratio=4.0), 6), (TINY, 4)],
    ids=["vit_small", "tiny"],
)
def test_other_configs_build_and_run(config: dict, heads: int) -> None:
    model = _model(num_classes=10, **config)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        logits, maps = model.forward_with_attention(images)
        assert torch.allclose(model(images), logits, atol=1e-5)
    assert logits.shape == (2, 10)
    assert len(maps) == config["depth"]
    assert all(m.shape == (2, heads, TOKENS, TOKENS) for m in maps)
    assert model.blocks[0].mlp[0].out_features == int(config["dim"] * config["mlp_ratio"])


# ---- fused vs explicit attention ------------------------------------------------------------------------


@pytest.mark.parametrize("sharpen", [False, True], ids=["fresh-init", "perturbed"])
def test_fused_and_explicit_paths_agree_block_by_block(sharpen: bool) -> None:
    model = _model(num_classes=100)
    if sharpen:
        _sharpen(model)
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        x = model.embed(images)
        peak = 0.0
        for block in model.blocks:
            fused, none = block(x)
            explicit, probs = block(x, explicit=True)
            assert none is None  # the fused path measures nothing
            assert fused.dtype == explicit.dtype == torch.float32
            torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
            peak = max(peak, float(probs.max()))
            x = fused
    if sharpen:  # the comparison above really was made on non-uniform attention
        assert peak > 0.5
    else:
        assert peak < 0.05  # a fresh init attends almost uniformly (1/65 = 0.015)


def test_fused_and_explicit_logits_agree() -> None:
    model = _model(num_classes=100)
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        fused = model(images)
        explicit, _ = model.forward_with_attention(images)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
    assert fused.abs().max() > 1e-3  # not a degenerate all-zero head


def test_fused_and_explicit_logits_agree_with_sharp_attention() -> None:
    """With sharp attention, fp32 rounding compounds over 8 layers (both paths drift ~1e-4 from a float64
    run), so each path is held to the float64 reference at the fused path's own rounding level."""
    model = _model(num_classes=100)
    _sharpen(model)
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        fused = model(images)
        explicit, _ = model.forward_with_attention(images)
        reference = copy.deepcopy(model).double()(images.double())
    fused_error = float((fused.double() - reference).abs().max())
    explicit_error = float((explicit.double() - reference).abs().max())
    assert fused_error < 1e-3
    assert explicit_error <= max(1e-5, 2 * fused_error)
    torch.testing.assert_close(explicit, fused, atol=max(1e-5, 2 * fused_error), rtol=0)


def test_attention_maps_are_row_stochastic_float32() -> None:
    model = _model(num_classes=10)
    _sharpen(model)
    with torch.no_grad():
        _, maps = model.forward_with_attention(torch.randn(2, 3, 32, 32))
    assert isinstance(maps, list) and len(maps) == 8
    for m in maps:
        assert m.shape == (2, 8, TOKENS, TOKENS)
        assert m.dtype == torch.float32
        assert (m >= 0).all()
        torch.testing.assert_close(m.sum(-1), torch.ones(2, 8, TOKENS), atol=1e-5, rtol=0)
    # different layers and heads see different patterns (maps are not one tensor repeated)
    assert not torch.allclose(maps[0], maps[1])
    assert not torch.allclose(maps[0][:, 0], maps[0][:, 1])


def test_explicit_maps_stay_float32_under_bf16_autocast() -> None:
    model = _model(**TINY)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        _, maps = model.forward_with_attention(images)
    assert all(m.dtype == torch.float32 for m in maps)
    with torch.no_grad():
        _, reference = model.forward_with_attention(images)
    for m, r in zip(maps, reference, strict=True):
        torch.testing.assert_close(m.sum(-1), torch.ones_like(m.sum(-1)), atol=1e-5, rtol=0)
        torch.testing.assert_close(m, r, atol=2e-2, rtol=0)


def _layer_norm_by_hand(x: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased variance, as LayerNorm normalises
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight.double() + norm.bias.double()


def test_block_output_matches_a_hand_computed_pre_norm_block() -> None:
    """The fused and explicit paths share the head split and merge, the projection, the MLP and the residuals, so
    their agreement cannot catch a head merged in the wrong order or a norm in the wrong place. The block is held
    to float64 arithmetic written out head by head: x + proj(concat_h softmax(q_h k_h^T / sqrt(d)) v_h) on LN1(x),
    then + W2 GELU(W1 LN2(.)), GELU exact (erf)."""
    model = _model(**TINY)
    _sharpen(model)
    block, dim, heads = model.blocks[1], 64, 4
    head_dim = dim // heads
    with torch.no_grad():
        x, _ = model.blocks[0](model.embed(torch.randn(2, 3, 32, 32)))
        fused, _ = block(x)
        explicit, _ = block(x, explicit=True)

        xd = x.double()
        y = _layer_norm_by_hand(xd, block.norm1)
        w, b = block.attn.qkv.weight.double(), block.attn.qkv.bias.double()
        per_head = []
        for h in range(heads):
            q, k, v = (
                y @ w[o + h * head_dim : o + (h + 1) * head_dim].T + b[o + h * head_dim : o + (h + 1) * head_dim]
                for o in (0, dim, 2 * dim)
            )
            scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
            probs = torch.exp(scores - scores.amax(-1, keepdim=True))
            per_head.append(probs / probs.sum(-1, keepdim=True) @ v)
        proj = block.attn.proj
        x1 = xd + torch.cat(per_head, dim=-1) @ proj.weight.double().T + proj.bias.double()
        fc1, fc2 = block.mlp[0], block.mlp[2]
        hidden = _layer_norm_by_hand(x1, block.norm2) @ fc1.weight.double().T + fc1.bias.double()
        hidden = 0.5 * hidden * (1 + torch.erf(hidden / math.sqrt(2)))
        expected = x1 + hidden @ fc2.weight.double().T + fc2.bias.double()

    assert float((expected - xd).abs().max()) > 0.1  # the block changes its input: a real comparison
    torch.testing.assert_close(fused.double(), expected, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(explicit.double(), expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("layer, head", [(0, 0), (3, 5)])
def test_explicit_attention_matches_a_hand_computed_softmax(layer: int, head: int) -> None:
    model = _model(num_classes=10)
    _sharpen(model)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        x = model.embed(images)
        for block in model.blocks[:layer]:
            x, _ = block(x)
        block = model.blocks[layer]
        _, probs = block(x, explicit=True)

        dim, head_dim = 192, 192 // 8
        y = F.layer_norm(x, (dim,), block.norm1.weight, block.norm1.bias, block.norm1.eps)
        w, b = block.attn.qkv.weight, block.attn.qkv.bias  # rows: [q heads | k heads | v heads]
        rows_q = slice(head * head_dim, (head + 1) * head_dim)
        rows_k = slice(dim + head * head_dim, dim + (head + 1) * head_dim)
        q = y @ w[rows_q].T + b[rows_q]
        k = y @ w[rows_k].T + b[rows_k]
        scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(head_dim)
        expected = torch.exp(scores - scores.amax(-1, keepdim=True))
        expected = expected / expected.sum(-1, keepdim=True)

    assert float(expected.max()) > 0.5  # a non-trivial pattern to compare against
    torch.testing.assert_close(probs[:, head].double(), expected, atol=1e-5, rtol=1e-4)
    # and it is not another head's map
    other = (head + 1) % 8
    assert (probs[:, other].double() - expected).abs().max() > 1e-2


# ---- training signal ------------------------------------------------------------------------------------


def test_gradient_reaches_every_parameter() -> None:
    model = _model(num_classes=10).train()
    images, labels = torch.randn(4, 3, 32, 32), torch.tensor([0, 3, 7, 9])
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name
