"""Attention statistics against answers worked out by hand or by plain loops here, not by the library."""

from __future__ import annotations

import math

import pytest
import torch

from vit_locality.attention.metrics import (
    AttentionStatsAccumulator,
    attention_entropy,
    attention_summary,
    cls_mass,
    locality_masses,
    mad_control,
    mean_attention_distance,
    neighbourhood_masks,
    patch_distance_matrix,
)
from vit_locality.attention.units import display_factor, shown, to_display

# ---- plain-Python references --------------------------------------------------------------------------


def _centre(k: int, g: int) -> tuple[float, float]:
    r, c = divmod(k, g)
    return (c + 0.5) / g, (r + 0.5) / g


def _dist(k: int, m: int, g: int) -> float:
    (x1, y1), (x2, y2) = _centre(k, g), _centre(m, g)
    return math.sqrt((x1 - x2) ** 2 + (y1 - y2) ** 2)


def _neighbours(k: int, g: int) -> list[int]:
    """The 3x3 neighbourhood of patch k (itself included), clipped at the borders."""
    r, c = divmod(k, g)
    return [rr * g + cc for rr in range(r - 1, r + 2) for cc in range(c - 1, c + 2) if 0 <= rr < g and 0 <= cc < g]


def _loop_uniform_mad(g: int) -> float:
    n = g * g
    return sum(_dist(k, m, g) for k in range(n) for m in range(n)) / (n * n)


def _loop_neighbourhood(g: int) -> tuple[float, float]:
    """(MAD, normalised entropy) of attention spread evenly over each query's clipped 3x3 neighbourhood."""
    n = g * g
    mad = ent = 0.0
    for k in range(n):
        nb = _neighbours(k, g)
        mad += sum(_dist(k, m, g) for m in nb) / len(nb)
        ent += math.log(len(nb)) / math.log(n)
    return mad / n, ent / n


# ---- attention builders ---------------------------------------------------------------------------------


def _attn(patch_rows: torch.Tensor, cls_weight: float = 0.0) -> torch.Tensor:
    """(T, T) attention from (N, N) patch-key rows; each patch query puts `cls_weight` on the CLS key (token 0).

    The CLS query's row gets a deliberately odd pattern (all mass on the last patch) that must be ignored.
    """
    n = patch_rows.shape[0]
    a = torch.zeros(n + 1, n + 1, dtype=torch.float64)
    a[0, -1] = 1.0
    a[1:, 1:] = patch_rows.to(torch.float64)
    a[1:, 0] = cls_weight
    return a


def _self_rows(g: int) -> torch.Tensor:
    return torch.eye(g * g)


def _uniform_rows(g: int) -> torch.Tensor:
    return torch.full((g * g, g * g), 1.0 / (g * g))


def _neighbourhood_rows(g: int) -> torch.Tensor:
    n = g * g
    rows = torch.zeros(n, n)
    for k in range(n):
        nb = _neighbours(k, g)
        for m in nb:
            rows[k, m] = 1.0 / len(nb)
    return rows


def _stack(*maps: torch.Tensor) -> torch.Tensor:
    """One image, one head per map: (1, heads, T, T)."""
    return torch.stack(maps)[None]


# ---- distances ------------------------------------------------------------------------------------------


def test_distance_matrix_steps_in_each_unit() -> None:
    unit = patch_distance_matrix(8)
    assert unit.shape == (64, 64) and unit.dtype == torch.float32
    assert torch.equal(unit, unit.T) and torch.all(unit.diagonal() == 0)
    assert unit[0, 1].item() == pytest.approx(0.125)  # one step right
    assert unit[0, 8].item() == pytest.approx(0.125)  # one step down
    assert unit[0, 9].item() == pytest.approx(math.sqrt(2) / 8)
    assert unit[0, 63].item() == pytest.approx(math.sqrt(2) * 7 / 8)
    grid = patch_distance_matrix(8, units="grid")
    assert grid[0, 1].item() == pytest.approx(1.0) and grid[0, 63].item() == pytest.approx(7 * math.sqrt(2))
    pixels = patch_distance_matrix(8, units="pixels", patch_size=4)
    assert pixels[0, 1].item() == pytest.approx(4.0) and pixels[3, 5].item() == pytest.approx(8.0)
    d64 = patch_distance_matrix(4, dtype=torch.float64)
    assert d64.dtype == torch.float64
    for k in range(16):
        for m in range(16):
            assert d64[k, m].item() == pytest.approx(_dist(k, m, 4), abs=1e-12)


def test_invalid_units_and_missing_patch_size() -> None:
    with pytest.raises(ValueError, match="unit.*grid.*pixels"):
        patch_distance_matrix(8, units="meters")
    with pytest.raises(ValueError, match="patch_size"):
        patch_distance_matrix(8, units="pixels")
    with pytest.raises(ValueError, match="units must be one of"):
        to_display(0.5, "px", 8)
    with pytest.raises(ValueError, match="patch_size"):
        to_display(0.5, "pixels", 8)
    with pytest.raises(ValueError, match="grid_size"):
        display_factor("grid", 0)


# ---- hand-known answers ---------------------------------------------------------------------------------


def test_self_attention_gives_zero() -> None:
    a = _stack(_attn(_self_rows(8))).float()
    mad, ent = mean_attention_distance(a), attention_entropy(a)
    assert mad.shape == (1,) and ent.shape == (1,)
    assert torch.isfinite(ent).all()  # exact zeros must not produce 0 * log 0 = NaN
    assert mad.item() == 0.0 and ent.item() == 0.0
    assert cls_mass(a).item() == 0.0
    assert attention_entropy(a, renormalize=False).item() == 0.0


def test_uniform_attention_8x8() -> None:
    a = _stack(_attn(_uniform_rows(8))).float()
    expected = _loop_uniform_mad(8)
    assert round(expected, 4) == 0.5171
    mad = mean_attention_distance(a).item()
    assert mad == pytest.approx(expected, abs=1e-6)
    assert round(mad, 4) == 0.5171
    assert attention_entropy(a).item() == pytest.approx(1.0, abs=1e-6)
    grid = to_display(mad, "grid", 8)
    assert grid == pytest.approx(8 * expected, abs=1e-5) and round(grid, 2) == 4.14
    pixels = to_display(mad, "pixels", 8, patch_size=4)  # 32 px image, 4 px patches
    assert pixels == pytest.approx(32 * expected, abs=1e-5) and round(pixels, 2) == 16.55
    assert to_display(mad, "diagonal", 8) == pytest.approx(expected / math.sqrt(2), abs=1e-6)


def test_raw_weights_uniform_over_all_keys() -> None:
    """docs/metrics.md, "Raw weights": 1/65 on every key, CLS included."""
    a = torch.full((1, 1, 65, 65), 1 / 65)
    assert mean_attention_distance(a).item() == pytest.approx(_loop_uniform_mad(8), abs=1e-6)
    assert attention_entropy(a).item() == pytest.approx(1.0, abs=1e-6)
    raw_mad = mean_attention_distance(a, renormalize=False).item()
    assert raw_mad == pytest.approx(64 / 65 * _loop_uniform_mad(8), abs=1e-6) and round(raw_mad, 4) == 0.5091
    raw_ent = attention_entropy(a, renormalize=False).item()
    assert raw_ent == pytest.approx(64 / 65 * math.log(65) / math.log(64), abs=1e-6) and round(raw_ent, 4) == 0.9883
    assert cls_mass(a).item() == pytest.approx(1 / 65)


@pytest.mark.parametrize("g", [8, 4, 5])
def test_neighbourhood_attention_matches_loop(g: int) -> None:
    a = _stack(_attn(_neighbourhood_rows(g))).float()
    exp_mad, exp_ent = _loop_neighbourhood(g)
    if g == 8:  # the hand-computed values of docs/metrics.md
        assert (round(exp_mad, 4), round(exp_ent, 4)) == (0.1276, 0.4796)
    assert mean_attention_distance(a).item() == pytest.approx(exp_mad, abs=1e-6)
    assert attention_entropy(a).item() == pytest.approx(exp_ent, abs=1e-6)


def test_other_grid_size_4x4() -> None:
    a = _stack(_attn(_uniform_rows(4))).float()
    assert mean_attention_distance(a).item() == pytest.approx(_loop_uniform_mad(4), abs=1e-6)
    assert attention_entropy(a).item() == pytest.approx(1.0, abs=1e-6)
    # one step on a 4x4 grid is 0.25 of the unit square
    right = torch.zeros(16, 16)
    for k in range(16):
        r, c = divmod(k, 4)
        right[k, r * 4 + (c ^ 1)] = 1.0  # the horizontal partner: always exactly one step away
    assert mean_attention_distance(_stack(_attn(right)).float()).item() == pytest.approx(0.25)


def test_one_patch_step() -> None:
    """All weight on one horizontal (head 0) or vertical (head 1) neighbour: one step in every unit."""
    horizontal, vertical = torch.zeros(64, 64), torch.zeros(64, 64)
    for k in range(64):
        r, c = divmod(k, 8)
        horizontal[k, r * 8 + (c ^ 1)] = 1.0
        vertical[k, (r ^ 1) * 8 + c] = 1.0
    a = _stack(_attn(horizontal), _attn(vertical)).float()
    assert mean_attention_distance(a).tolist() == pytest.approx([0.125, 0.125])
    stored = mean_attention_distance(a).tolist()
    assert [to_display(v, "grid", 8) for v in stored] == pytest.approx([1.0, 1.0])
    assert [to_display(v, "pixels", 8, patch_size=4) for v in stored] == pytest.approx([4.0, 4.0])
    assert shown(stored[0], "grid", 8) == "1.0000 patch steps (0.1250 of the image side)"
    assert shown(stored[0], "unit", 8) == "0.1250 fraction of the image side"
    assert attention_entropy(a).tolist() == [0.0, 0.0]


def test_single_patch_grid_gives_zero_not_nan() -> None:
    """g = 1: one patch key carries no uncertainty (log 1 = 0 must not be divided by) and no distance."""
    a = torch.full((1, 1, 2, 2), 0.5)
    for renormalize in (True, False):
        assert attention_entropy(a, renormalize=renormalize).item() == 0.0
        assert mean_attention_distance(a, renormalize=renormalize).item() == 0.0
    assert cls_mass(a).item() == 0.5


# ---- the CLS key ----------------------------------------------------------------------------------------


def _partner_rows(g: int, self_w: float, partner_w: float) -> torch.Tensor:
    """Each patch query puts self_w on itself and partner_w on its horizontal partner (one step away)."""
    n = g * g
    rows = torch.zeros(n, n)
    for k in range(n):
        r, c = divmod(k, g)
        rows[k, k] += self_w
        rows[k, r * g + (c ^ 1)] += partner_w
    return rows


def test_cls_mass_renormalised_or_raw() -> None:
    # 0.5 on CLS, 0.5 on the partner one step (0.125) away.
    a = _stack(_attn(_partner_rows(8, 0.0, 0.5), cls_weight=0.5)).float()
    assert cls_mass(a).item() == pytest.approx(0.5)
    assert mean_attention_distance(a).item() == pytest.approx(0.125)  # renormalised: all on the partner
    assert attention_entropy(a).item() == pytest.approx(0.0, abs=1e-7)
    assert mean_attention_distance(a, renormalize=False).item() == pytest.approx(0.0625)  # 0.5 * 0.125
    # raw entropy: -0.5 log 0.5 / log 64 = 1/12
    assert attention_entropy(a, renormalize=False).item() == pytest.approx(1 / 12, abs=1e-7)

    # 0.2 on CLS, 0.4 on itself, 0.4 on the partner.
    b = _stack(_attn(_partner_rows(8, 0.4, 0.4), cls_weight=0.2)).float()
    assert cls_mass(b).item() == pytest.approx(0.2)
    assert mean_attention_distance(b).item() == pytest.approx(0.0625)  # 0.5 * 0.125
    assert mean_attention_distance(b, renormalize=False).item() == pytest.approx(0.05)  # 0.4 * 0.125
    assert attention_entropy(b).item() == pytest.approx(math.log(2) / math.log(64), abs=1e-7)
    raw_ent = -2 * 0.4 * math.log(0.4) / math.log(64)
    assert attention_entropy(b, renormalize=False).item() == pytest.approx(raw_ent, abs=1e-7)


def test_cls_query_is_ignored() -> None:
    base = _attn(_neighbourhood_rows(8))
    other = base.clone()
    other[0] = 0.0
    other[0, 0] = 1.0  # CLS query now attends only to itself
    s1, s2 = attention_summary(_stack(base).float()), attention_summary(_stack(other).float())
    for key in s1:
        assert torch.equal(s1[key], s2[key]), key


def test_row_with_no_patch_mass_is_zero_not_nan() -> None:
    a = _attn(_uniform_rows(8))
    a[1:, 1:] = 0.0
    a[1:, 0] = 1.0  # every patch query on CLS only
    a = _stack(a).float()
    s = attention_summary(a)
    for value in s.values():
        assert torch.isfinite(value).all()
    assert s["mad"].item() == 0.0 and s["entropy"].item() == 0.0 and s["cls_mass"].item() == 1.0
    raw = attention_summary(a, renormalize=False)
    assert raw["mad"].item() == 0.0 and raw["entropy"].item() == 0.0


def test_bad_token_counts_error_clearly() -> None:
    a = torch.full((1, 2, 64, 64), 1 / 64)  # 64 tokens - 1 CLS = 63 patches
    with pytest.raises(ValueError, match="not a positive perfect square"):
        mean_attention_distance(a)
    with pytest.raises(ValueError, match="not a positive perfect square"):
        attention_summary(a)
    with pytest.raises(ValueError, match="not a positive perfect square"):
        AttentionStatsAccumulator().update(a)
    with pytest.raises(ValueError, match=r"\(B, heads, T, T\)"):
        mean_attention_distance(torch.full((2, 65, 65), 1 / 65))


# ---- heads and images ---------------------------------------------------------------------------------


def test_per_head_values_in_head_order() -> None:
    a = _stack(_attn(_self_rows(8)), _attn(_uniform_rows(8)), _attn(_neighbourhood_rows(8))).float()
    exp_nb_mad, exp_nb_ent = _loop_neighbourhood(8)
    mad, ent = mean_attention_distance(a), attention_entropy(a)
    assert mad.shape == (3,) and ent.shape == (3,)
    assert mad.tolist() == pytest.approx([0.0, _loop_uniform_mad(8), exp_nb_mad], abs=1e-6)
    assert ent.tolist() == pytest.approx([0.0, 1.0, exp_nb_ent], abs=1e-6)


def test_mean_and_std_over_images() -> None:
    patterns = [_uniform_rows(8), _self_rows(8), _neighbourhood_rows(8)]
    # image i: head 0 shows pattern i, head 1 always the self pattern
    a = torch.stack([torch.stack([_attn(p), _attn(_self_rows(8))]) for p in patterns]).float()
    assert a.shape == (3, 2, 65, 65)
    nb_mad, nb_ent = _loop_neighbourhood(8)
    per_image_mad = [_loop_uniform_mad(8), 0.0, nb_mad]
    per_image_ent = [1.0, 0.0, nb_ent]

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    def pstd(xs: list[float]) -> float:
        m = mean(xs)
        return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))

    for i in range(3):  # each image alone gives its own value: images are not mixed up
        assert mean_attention_distance(a[i : i + 1]).tolist() == pytest.approx([per_image_mad[i], 0.0], abs=1e-6)
        assert attention_entropy(a[i : i + 1]).tolist() == pytest.approx([per_image_ent[i], 0.0], abs=1e-6)
    assert cls_mass(a).shape == (2,)

    s = attention_summary(a)
    masses = {"self_mass", "neighbour_mass", "far_mass"}
    assert set(s) == {"mad", "entropy", "cls_mass", "mad_std", "entropy_std", "mad_control", "surround_pref", *masses}
    for value in s.values():
        assert value.shape == (2,)
    assert s["mad"].tolist() == pytest.approx([mean(per_image_mad), 0.0], abs=1e-6)
    assert s["entropy"].tolist() == pytest.approx([mean(per_image_ent), 0.0], abs=1e-6)
    assert s["mad_std"].tolist() == pytest.approx([pstd(per_image_mad), 0.0], abs=1e-6)
    assert s["entropy_std"].tolist() == pytest.approx([pstd(per_image_ent), 0.0], abs=1e-6)
    assert torch.allclose(s["mad"], mean_attention_distance(a))
    assert torch.allclose(s["entropy"], attention_entropy(a))

    single = attention_summary(a[:1])
    assert single["mad_std"].tolist() == [0.0, 0.0]  # one image: no spread, not NaN
    assert single["entropy_std"].tolist() == [0.0, 0.0]


def _random_attention(b: int, heads: int, g: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, heads, g * g + 1, g * g + 1, generator=gen) * 3
    return logits.softmax(dim=-1)


def test_accumulator_matches_one_shot() -> None:
    a = _random_attention(10, 3, 8)
    acc = AttentionStatsAccumulator()
    with pytest.raises(RuntimeError, match="before any update"):
        acc.compute()
    for chunk in a.split(4):  # 4 + 4 + 2 images: uneven chunks, so per-chunk stds would not average out
        acc.update(chunk)
    streamed, one_shot = acc.compute(), attention_summary(a)
    assert set(streamed) == set(one_shot)
    for key in one_shot:
        assert streamed[key].shape == (3,), key
        assert torch.allclose(streamed[key], one_shot[key], atol=1e-6), key
    # the setting reaches every update: raw weights
    raw = AttentionStatsAccumulator(renormalize=False)
    for chunk in a.split(3):
        raw.update(chunk)
    streamed_raw, expected = raw.compute(), attention_summary(a, renormalize=False)
    for key in expected:
        assert torch.allclose(streamed_raw[key], expected[key], atol=1e-5), key
    assert not torch.allclose(expected["mad"], one_shot["mad"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_input_matches_fp32(dtype: torch.dtype) -> None:
    a = _random_attention(4, 2, 8, seed=1)
    ref = attention_summary(a)
    low = attention_summary(a.to(dtype))
    for key in ref:
        assert low[key].dtype == torch.float32, key
        assert torch.allclose(low[key], ref[key], atol=5e-3, rtol=1e-2), key
    assert mean_attention_distance(a.to(dtype)).dtype == torch.float32


def test_float64_input_stays_float64() -> None:
    a = _stack(_attn(_uniform_rows(8)))
    assert a.dtype == torch.float64
    mad = mean_attention_distance(a)
    assert mad.dtype == torch.float64
    assert mad.item() == pytest.approx(_loop_uniform_mad(8), abs=1e-12)
    for key, value in attention_summary(a).items():
        assert value.dtype == torch.float64, key


# ---- self / neighbourhood / far ------------------------------------------------------------------------------


def _masses(a: torch.Tensor, renormalize: bool = True) -> tuple[float, float, float]:
    m = locality_masses(a, renormalize)
    return m["self_mass"].item(), m["neighbour_mass"].item(), m["far_mass"].item()


def test_neighbourhood_masks_count_by_hand() -> None:
    """8 neighbours inside, 5 on an edge, 3 in a corner; never the patch itself, never two steps away."""
    own, near = neighbourhood_masks(8)
    assert torch.equal(own, torch.eye(64, dtype=torch.bool))
    assert near.sum(dim=1)[0].item() == 3 and near.sum(dim=1)[1].item() == 5 and near.sum(dim=1)[9].item() == 8
    assert near.sum().item() == 4 * 3 + 24 * 5 + 36 * 8
    assert near[9, 0] and near[9, 18] and not near[9, 11] and not near[9, 9] and not near[0, 2]


def test_pure_self_map_is_all_self() -> None:
    assert _masses(_stack(_attn(_self_rows(8))).float()) == (1.0, 0.0, 0.0)


def test_neighbourhood_map_by_hand() -> None:
    """Uniform over the clipped 3 x 3 block: the own patch gets 1/n, so self = (4/4 + 24/6 + 36/9) / 64 = 9/64, the
    neighbours the rest, nothing far (MAD 0.1276 reads as "a small neighbourhood", not "itself")."""
    own, near, far = _masses(_stack(_attn(_neighbourhood_rows(8))).double())
    assert own == pytest.approx(9 / 64, abs=1e-12)
    assert near == pytest.approx(55 / 64, abs=1e-12)
    assert far == pytest.approx(0.0, abs=1e-12)


def test_uniform_map_by_hand() -> None:
    """1/64 on each patch: self 1/64, neighbours (4 x 3 + 24 x 5 + 36 x 8) / 64^2 = 420/4096, far the rest."""
    own, near, far = _masses(_stack(_attn(_uniform_rows(8))).double())
    assert own == pytest.approx(1 / 64, abs=1e-12)
    assert near == pytest.approx(420 / 4096, abs=1e-12)
    assert far == pytest.approx(1 - 1 / 64 - 420 / 4096, abs=1e-12)


def test_one_step_and_two_steps_away() -> None:
    """All weight on the right-hand neighbour (or the left one in the last column) is all neighbour; on the patch
    two columns over it is all far."""
    one, two = torch.zeros(64, 64), torch.zeros(64, 64)
    for k in range(64):
        c = k % 8
        one[k, k + 1 if c < 7 else k - 1] = 1.0
        two[k, k + 2 if c < 6 else k - 2] = 1.0
    assert _masses(_stack(_attn(one)).float()) == (0.0, 1.0, 0.0)
    assert _masses(_stack(_attn(two)).float()) == (0.0, 0.0, 1.0)


def test_masses_raw_weights_leave_out_the_cls_share() -> None:
    """Self-attention with 0.25 on the CLS key: renormalised the patch mass is all self, raw it is 0.75."""
    a = _stack(_attn(_self_rows(8) * 0.75, cls_weight=0.25)).float()
    assert _masses(a) == pytest.approx((1.0, 0.0, 0.0))
    assert _masses(a, renormalize=False) == pytest.approx((0.75, 0.0, 0.0))
    assert cls_mass(a).item() == pytest.approx(0.25)


def test_masses_in_the_summary_and_accumulator_per_head() -> None:
    """One head per known map, in order, through the summary and through a two-batch accumulator."""
    a = _stack(_attn(_self_rows(8)), _attn(_neighbourhood_rows(8)), _attn(_uniform_rows(8))).double()
    summary = attention_summary(a)
    assert summary["self_mass"].tolist() == pytest.approx([1.0, 9 / 64, 1 / 64])
    assert summary["far_mass"].tolist() == pytest.approx([0.0, 0.0, 1 - 1 / 64 - 420 / 4096])
    acc = AttentionStatsAccumulator()
    acc.update(a)
    acc.update(a)
    assert acc.compute()["neighbour_mass"].tolist() == pytest.approx([0.0, 55 / 64, 420 / 4096])


# ---- the concentration control ----------------------------------------------------------------------------


def _salient_rows(g: int, patch: int) -> torch.Tensor:
    """Every query attends to the same one patch."""
    rows = torch.zeros(g * g, g * g)
    rows[:, patch] = 1.0
    return rows


def _loop_control(rows_per_image: list[torch.Tensor], g: int) -> float:
    """docs/metrics.md's control as loops: the renormalised rows averaged over every query of every image, that one
    row given to every query, its MAD."""
    n = g * g
    mean_row = [0.0] * n
    for rows in rows_per_image:
        for k in range(n):
            total = float(rows[k].double().sum())
            for m in range(n):
                mean_row[m] += float(rows[k, m]) / total / (n * len(rows_per_image))
    return sum(mean_row[m] * _dist(k, m, g) for k in range(n) for m in range(n)) / n


def test_control_hand_cases_8x8() -> None:
    """docs/metrics.md's hand-computed control: one fixed salient patch (difference 0, control = the mean distance to
    that patch), uniform (0), the clipped 3 x 3 neighbourhood (control 0.51089, the border keys being in fewer
    neighbourhoods, minus MAD 0.12765), attention on oneself (control uniform, 0.51706)."""
    g = 8
    corner, inner = _salient_rows(g, 0), _salient_rows(g, 27)
    heads = (_neighbourhood_rows(g), _uniform_rows(g), corner, inner, _self_rows(g))
    summary = attention_summary(_stack(*(_attn(rows, cls_weight=0.2) for rows in heads)))
    control, preference, mad = summary["mad_control"], summary["surround_pref"], summary["mad"]
    uniform = _loop_uniform_mad(g)
    neighbourhood_mad, _ = _loop_neighbourhood(g)
    assert control.tolist() == pytest.approx([_loop_control([rows], g) for rows in heads], abs=1e-12)
    assert control[0].item() == pytest.approx(0.5108863, abs=1e-7)
    assert preference[0].item() == pytest.approx(0.5108863 - neighbourhood_mad, abs=1e-7)
    assert preference[0].item() == pytest.approx(0.3832391, abs=1e-7)
    assert control[1].item() == pytest.approx(uniform, abs=1e-12) and abs(preference[1].item()) < 1e-12
    assert control[2].item() == pytest.approx(sum(_dist(k, 0, g) for k in range(64)) / 64, abs=1e-12)
    assert control[2].item() == pytest.approx(0.6840013, abs=1e-7) and abs(preference[2].item()) < 1e-12
    assert control[3].item() == pytest.approx(0.3867385, abs=1e-7) and abs(preference[3].item()) < 1e-12
    assert control[4].item() == pytest.approx(uniform, abs=1e-12) and preference[4].item() == pytest.approx(uniform)
    torch.testing.assert_close(preference, control - mad)


def test_control_averages_rows_over_queries_and_images() -> None:
    """One head, two images of different patterns: the control is the MAD of the row averaged over both images'
    queries (equal to the mean of the per-image controls, the control being linear in the row), with each query's
    row renormalised over the patch keys first (the CLS share differs per query here)."""
    g = 4
    first, second = _neighbourhood_rows(g), _salient_rows(g, 5)
    cls_weights = torch.linspace(0.0, 0.6, g * g)[:, None]
    images = []
    for rows in (first, second):
        a = _attn(rows * (1 - cls_weights))
        a[1:, 0] = cls_weights[:, 0].double()
        images.append(a[None])
    attn = torch.stack(images)  # (2, 1, T, T)
    summary = attention_summary(attn)
    want = _loop_control([first, second], g)
    assert summary["mad_control"].item() == pytest.approx(want, abs=1e-12)
    assert summary["surround_pref"].item() == pytest.approx(want - summary["mad"].item(), abs=1e-12)
    assert mad_control(attn).item() == pytest.approx(want, abs=1e-12)
    # Raw weights: the average raw row, CLS share left out, as MAD leaves it out.
    raw = attention_summary(_stack(_attn(_uniform_rows(8) * 0.75, cls_weight=0.25)), renormalize=False)
    assert raw["mad_control"].item() == pytest.approx(0.75 * _loop_uniform_mad(8), abs=1e-12)
    assert abs(raw["surround_pref"].item()) < 1e-12


def test_every_display_unit_is_the_distance_matrix_of_that_unit() -> None:
    """Showing a stored (unit-square) MAD in another unit is the MAD measured with that unit's distances: the one
    display factor and the distance matrix agree, for the control as for MAD."""
    a = _stack(_attn(_neighbourhood_rows(8)), _attn(_salient_rows(8, 9))).double()
    unit = attention_summary(a)
    weights = a[:, :, 1:, 1:] / a[:, :, 1:, 1:].sum(dim=-1, keepdim=True)
    for units, factor, patch in (("grid", 8, None), ("pixels", 32, 4), ("diagonal", 1 / math.sqrt(2), None)):
        assert display_factor(units, 8, patch) == pytest.approx(factor)
        dist = patch_distance_matrix(8, units, patch, dtype=torch.float64)
        measured = torch.einsum("bhqk,qk->bhq", weights, dist).mean(dim=(0, 2))
        torch.testing.assert_close(measured, unit["mad"] * display_factor(units, 8, patch))
