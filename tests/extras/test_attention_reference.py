"""The known-answer references: the ViT restricted to the 3 x 3 neighbourhood or to the patch itself, measured by
the project's probe, and drawn on the plane, layer and emergence figures.

Hand computation (8 x 8 grid, unit distance: one step = 1/8; uniform weight over each query's clipped 3 x 3
neighbourhood): 36 inner queries see 9 patches, 4 at 1 step and 4 at sqrt 2; 24 edge queries see 6, 3 at 1 and 2 at
sqrt 2; 4 corners see 4, 2 at 1 and 1 at sqrt 2. MAD = mean over the 64 queries / 8 = 0.12765; entropy = mean of
ln(keys) / ln 64 = 0.47957. The patch alone: 0 and 0. Uniform over all 64 patches: 0.5171, the figures' constant.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from vit_locality.attention import plots
from vit_locality.config.schema import StatsConfig
from vit_locality.extras.references import figure_references, measure_reference, plain_number, reference_model
from vit_locality.model.vit import VisionTransformer, neighbourhood_attention_mask
from vit_locality.report.load.aggregate import Group
from vit_locality.report.render.figures import emergence_figure, layers_figure
from vit_locality.store.record import RunRecord

R2 = math.sqrt(2)


def test_a_figure_given_no_references_draws_none() -> None:
    """The references are an argument of the pictures (the entry points pass the extras' figure_references)."""
    fig, ax = plots.plt.subplots()
    assert plots.draw_mad_references(ax, (), horizontal=True) == 0.0 and not ax.lines
    plots.plt.close(fig)
    cells = {"Baseline": Group(key=None, runs=[_run([0.5, 0.45])])}  # type: ignore[arg-type]
    fig = layers_figure(cells, "demo", notes=[])
    assert not any("neighbourhood" in text for ax in fig.axes for text in _texts(ax))
    plots.plt.close(fig)


HAND_MAD_3X3_STEPS = (36 * (4 + 4 * R2) / 9 + 24 * (3 + 2 * R2) / 6 + 4 * (2 + R2) / 4) / 64
HAND_MAD_3X3 = HAND_MAD_3X3_STEPS / 8
HAND_ENTROPY_3X3 = (36 * math.log(9) + 24 * math.log(6) + 4 * math.log(4)) / (64 * math.log(64))
SMALL = dict(depth=2, dim=32, heads=4, mlp_ratio=1.0)


def test_hand_values_are_the_issue_s() -> None:
    assert abs(HAND_MAD_3X3 - 0.1277) < 1e-4 and round(HAND_MAD_3X3, 3) == 0.128
    assert abs(HAND_ENTROPY_3X3 - 0.4796) < 1e-4


@pytest.mark.parametrize("renormalize", [True, False])
def test_3x3_reference_gives_the_hand_value_in_every_layer_and_head(renormalize: bool) -> None:
    result = measure_reference(SMALL, 32, 1, StatsConfig(renormalize=renormalize))
    assert result.stats["mad"].shape == (2, 4)
    assert torch.allclose(result.stats["mad"], torch.full((2, 4), HAND_MAD_3X3), atol=1e-5)
    assert torch.allclose(result.stats["entropy"], torch.full((2, 4), HAND_ENTROPY_3X3), atol=1e-5)
    assert float(result.stats["cls_mass"].abs().max()) == 0.0  # patch queries never see the CLS key
    # Per kind of query, from the probe's own masses: all weight on itself and its neighbours, none far.
    assert float(result.stats["far_mass"].abs().max()) < 1e-6
    expected_self = (36 / 9 + 24 / 6 + 4 / 4) / 64
    assert torch.allclose(result.stats["self_mass"], torch.full((2, 4), expected_self), atol=1e-5)


def test_measuring_leaves_the_global_random_stream_alone() -> None:
    """Figures are drawn during training: a reference must not reseed the run's generator."""
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    measure_reference(SMALL, 32, 1, seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_self_only_reference_is_zero() -> None:
    result = measure_reference(SMALL, 32, 0)
    assert float(result.stats["mad"].abs().max()) == 0.0
    assert float(result.stats["entropy"].abs().max()) < 1e-6
    assert torch.allclose(result.stats["self_mass"], torch.ones(2, 4))


def test_whole_grid_radius_reproduces_the_uniform_constant() -> None:
    mad = measure_reference(SMALL, 32, 7).stats["mad"]
    assert torch.allclose(mad, torch.full((2, 4), plots.UNIFORM_MAD_8X8), atol=1e-4)


def test_references_follow_the_probe_units() -> None:
    unit = {ref.label: ref.mad_value for ref in figure_references("unit")}
    grid = {ref.label: ref.mad_value for ref in figure_references("grid")}
    pixels = {ref.label: ref.mad_value for ref in figure_references("pixels", 4)}
    assert unit["3x3 neighbourhood"] == pytest.approx(HAND_MAD_3X3, abs=1e-5)
    assert grid["3x3 neighbourhood"] == pytest.approx(HAND_MAD_3X3_STEPS, abs=1e-5)
    assert pixels["3x3 neighbourhood"] == pytest.approx(4 * HAND_MAD_3X3_STEPS, abs=1e-4)
    assert unit["self only"] == grid["self only"] == pixels["self only"] == 0.0
    assert figure_references("pixels") == ()  # no patch size: no reference rather than one in the wrong units
    assert figure_references("furlongs") == ()


def test_legends_and_plain_numbers() -> None:
    labels = [ref.legend() for ref in figure_references("unit")]
    assert labels == ["3x3 neighbourhood (0.128)", "self only (0)"]
    assert [plain_number(v) for v in (0.0, -0.0001, 1.0212, 0.5)] == ["0", "0", "1.021", "0.5"]


def test_mask_shape_and_counts() -> None:
    mask = neighbourhood_attention_mask(8, 1)
    assert mask.shape == (65, 65) and bool(mask[0].all())  # the CLS query sees every token
    assert not bool(mask[1:, 0].any())  # no patch query sees the CLS key
    counts = mask[1:, 1:].sum(dim=1).view(8, 8)
    assert counts[0, 0] == 4 and counts[0, 3] == 6 and counts[3, 3] == 9 and counts[7, 7] == 4
    assert int(counts.sum()) == 36 * 9 + 24 * 6 + 4 * 4
    assert bool(neighbourhood_attention_mask(8, 0)[1:, 1:].equal(torch.eye(64, dtype=torch.bool)))
    assert bool(neighbourhood_attention_mask(8, 7)[1:, 1:].all())
    for bad in (-1, 1.5, True, None):
        with pytest.raises(ValueError, match="attention radius must be an int >= 0"):
            neighbourhood_attention_mask(8, bad)  # type: ignore[arg-type]


def test_restriction_confines_a_trained_like_model_on_both_paths() -> None:
    """Without the zeroed q/k the weights are not uniform, but nothing falls outside the neighbourhood, and the
    fused path agrees with the explicit one under the mask."""
    torch.manual_seed(0)
    model = VisionTransformer(num_classes=10, image_size=32, **SMALL).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.normal_(0, 0.5)  # sharp, input-dependent attention
    model.restrict_attention(1)
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        fused = model(images)
        logits, maps = model.forward_with_attention(images)
    assert torch.allclose(fused, logits, atol=1e-5)
    outside = ~neighbourhood_attention_mask(8, 1)
    for probs in maps:
        assert float(probs[:, :, outside].abs().max()) == 0.0
        assert not torch.allclose(probs[0, 0, 1 + 9, 1:].max(), torch.tensor(1 / 9))  # not uniform inside


def test_default_is_unchanged_and_checkpoints_are_shared() -> None:
    torch.manual_seed(0)
    plain = VisionTransformer(num_classes=10, image_size=32, **SMALL).eval()
    torch.manual_seed(0)
    lifted = VisionTransformer(num_classes=10, image_size=32, **SMALL).eval()
    keys = list(plain.state_dict())
    assert all(block.attn.attn_mask is None for block in plain.blocks)
    lifted.restrict_attention(1)
    assert list(lifted.state_dict()) == keys  # the mask is not saved
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        restricted = lifted(images)
        lifted.restrict_attention(None)
        assert torch.equal(lifted(images), plain(images))
        assert not torch.allclose(restricted, plain(images))
    reference = reference_model(SMALL, 32, 1)
    reference.load_state_dict(plain.state_dict())  # an ordinary checkpoint loads into a restricted model, strictly
    assert reference.blocks[0].attn.attn_mask is not None


def _run(per_layer_mad: list[float]) -> RunRecord:
    per_layer = [
        {
            "layer": i,
            "mad_min": m,
            "mad_mean": m,
            "mad_max": m,
            "entropy_min": 0.9,
            "entropy_mean": 0.9,
            "entropy_max": 0.9,
        }
        for i, m in enumerate(per_layer_mad)
    ]
    final = {"early_layers": 1, "settings": {"units": "unit"}, "per_layer": per_layer}
    return RunRecord(Path("no-such-run"), {"attention": {"final": final}})


def _texts(ax: plots.plt.Axes) -> list[str]:
    return [text.get_text().strip() for text in ax.texts]


def _hlines(ax: plots.plt.Axes) -> set[float]:
    return {round(float(line.get_ydata()[0]), 4) for line in ax.lines if len(set(line.get_ydata())) == 1}


def test_plane_figure_shows_the_references() -> None:
    references = figure_references("unit")
    fig = plots.mad_entropy_plane(torch.full((2, 3), 0.5), torch.full((2, 3), 0.9), "run", references=references)
    ax = fig.axes[0]
    assert {"3x3 neighbourhood (0.128)", "self only (0)", "uniform"} <= set(_texts(ax))
    vertical = {round(float(line.get_xdata()[0]), 4) for line in ax.lines}
    assert {0.1276, 0.0, plots.UNIFORM_MAD_8X8} <= vertical
    points = {tuple(round(float(v), 4) for v in c.get_offsets()[0]) for c in ax.collections}
    assert (0.1276, 0.4796) in points and (0.0, 0.0) in points
    plots.plt.close(fig)


def test_layer_and_emergence_figures_show_the_references(tmp_path: Path) -> None:
    cells = {"Baseline": Group(key=None, runs=[_run([0.5, 0.45])])}  # type: ignore[arg-type]
    fig = layers_figure(cells, "demo", [], figure_references)
    for ax in fig.axes[:2]:  # the two MAD panels
        assert {"3x3 neighbourhood (0.128)", "self only (0)", "uniform"} <= set(_texts(ax))
        assert {0.1276, 0.0, plots.UNIFORM_MAD_8X8} <= _hlines(ax)
        assert ax.get_ylim()[0] == 0
    assert not {"3x3 neighbourhood (0.128)"} & set(_texts(fig.axes[2]))  # not on the entropy panels
    plots.plt.close(fig)
    run = RunRecord(tmp_path, _run([0.5, 0.45]).data)  # the emergence figure draws from attention_stats.csv
    (tmp_path / "attention_stats.csv").write_text("epoch,step,layer,head,mad\n0,0,0,0,0.5\n1,10,0,0,0.45\n")
    fig = emergence_figure({"Baseline": Group(key=None, runs=[run])}, "demo", [], figure_references)  # type: ignore[arg-type]
    assert {"3x3 neighbourhood (0.128)", "self only (0)", "uniform"} <= set(_texts(fig.axes[0]))
    plots.plt.close(fig)


def test_a_runs_own_plane_in_pixels_shows_the_references_at_its_patch_size(tmp_path: Path) -> None:
    """The per-run picture: a probe of a model with 4-pixel patches, in pixel units, draws the 3x3 reference at
    4 x 1.0212 = 4.085 pixels (without the probe's patch size it could draw none)."""
    from vit_locality.attention.probe import probe_attention
    from vit_locality.attention.stats_log import save_pictures

    model = VisionTransformer(num_classes=3, image_size=32, depth=1, dim=32, heads=4, mlp_ratio=1.0)
    result = probe_attention(model, torch.randn(4, 3, 32, 32), StatsConfig(probe_size=4, units="pixels"))
    assert result.patch_size == 4
    seen: list[float] = []
    original = plots.save

    def keep(fig, path):  # noqa: ANN001, ANN202
        seen.extend(float(line.get_xdata()[0]) for line in fig.axes[0].lines)
        return original(fig, path)

    plots.save = keep  # type: ignore[assignment]
    try:
        save_pictures(result, tmp_path, "run", references=figure_references)
    finally:
        plots.save = original  # type: ignore[assignment]
    assert any(abs(x - 4 * HAND_MAD_3X3_STEPS) < 1e-3 for x in seen), seen
