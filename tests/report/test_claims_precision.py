"""The paper's claims at the paper's precision, on sweeps that reproduce its figures exactly, in either precision.

A paper-exact sweep: every cell at the paper's figures (Baseline 0.316, Modern 0.008, -CM at the non-CutMix bound
0.210, +CM at the CutMix bound 0.024) with a second seed a little inside the bounds, stored as the probe stores
them: on the unit square, in float64 or rounded to float32 (0.210 becomes 0.20999999344). Every expected value is
arithmetic on the numbers written here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from claim_fakes import (
    ACC,
    PAPER_EXACT,
    UNIFORM_8,
    claims,
    float32,
    more_local,
    uniform_heads,
    write_sweep,
)
from record_fakes import ORDER

from vit_locality.extras.html_page import build_page
from vit_locality.report.stats.claim_units import uniform_mad
from vit_locality.report.stats.claims import Bound

# ---- the rule ---------------------------------------------------------------------------------------------------


def test_a_bound_holds_at_its_printed_precision() -> None:
    at_least, at_most = Bound("0.210"), Bound("0.024")
    assert float32(0.210) == pytest.approx(0.20999999344, abs=1e-11) and float32(0.210) < 0.210
    # Read to 6 significant digits first: 0.20949999 is 0.2095 within float32's spacing (1.5e-8 there), so it holds.
    for value in (float32(0.210), 0.2097, 0.2095, float32(0.2095), 0.20949999, 0.210, 0.5):
        assert at_least.at_or_above(value), value
    for value in (0.2094, 0.209499, math.nan):
        assert not at_least.at_or_above(value), value
    assert at_most.at_or_below(float32(0.024)) and at_most.at_or_below(0.0244)
    assert not at_most.at_or_below(0.0245) and not at_most.at_or_below(0.03)
    assert Bound("5.00").at_or_above(4.996) and not Bound("5.00").at_or_above(4.994)


# ---- paper-exact sweeps hold every claim in either precision ----------------------------------------------------


@pytest.mark.parametrize("cast", [float, float32], ids=["float64", "float32"])
def test_a_paper_exact_sweep_holds_every_claim(tmp_path: Path, cast: Callable[[float], float]) -> None:
    found = claims(write_sweep(tmp_path, PAPER_EXACT, cast))
    for key, claim in found.items():
        assert (claim["run_verdict"], claim["mean_verdict"]) == ("holds", "holds"), (key, claim["row"])
    # The bounds are met at the paper's figures themselves, whatever the record's precision.
    assert found["a_other_not_local"]["run_value"] == pytest.approx(0.210, abs=1e-7)
    assert found["a_cutmix_local"]["run_value"] == pytest.approx(0.024, abs=1e-7)
    # Claim (d)'s margin is the floor 0.02 in the unit square, / sqrt 2 over the diagonal.
    keeps = found["d_ls_keeps"]
    assert keeps["run_bound"] == pytest.approx(0.02) and keeps["run_diagonal_bound"] == pytest.approx(0.02 / 2**0.5)
    assert keeps["run_diagonal_verdict"] == "holds" and keeps["conventions"] == "agree"
    assert more_local(tmp_path) == ["holds, 2 seeds", "holds, 2 seeds"]


# ---- each rule failing -------------------------------------------------------------------------------------------


def test_below_the_printed_precision_fails(tmp_path: Path) -> None:
    # -CM at 0.2094 prints as 0.209: "every non-CutMix cell at or above 0.210" fails; +CM at 0.0245 prints 0.025.
    found = claims(write_sweep(tmp_path, {**PAPER_EXACT, "-CM": [0.2094, 0.214], "+CM": [0.0245, 0.020]}))
    assert (found["a_other_not_local"]["run_verdict"], found["a_other_not_local"]["run_value"]) == ("fails", 0.2094)
    assert (found["a_cutmix_local"]["run_verdict"], found["a_cutmix_local"]["run_value"]) == ("fails", 0.0245)
    # The cell means (0.2117 and 0.02225) are inside the bounds.
    assert found["a_other_not_local"]["mean_verdict"] == found["a_cutmix_local"]["mean_verdict"] == "holds"


def test_within_the_printed_precision_holds(tmp_path: Path) -> None:
    found = claims(write_sweep(tmp_path, {**PAPER_EXACT, "-CM": [0.2097, 0.214], "+CM": [0.0244, 0.020]}))
    assert found["a_other_not_local"]["run_verdict"] == found["a_cutmix_local"]["run_verdict"] == "holds"


def test_a_gain_below_five_points_at_two_decimals_fails(tmp_path: Path) -> None:
    # +CM 4.99 points above Baseline (per run and per mean): fails; +AA 5.00: holds.
    found = claims(write_sweep(tmp_path, PAPER_EXACT, acc={**ACC, "+CM": 54.99, "+AA": 55.0}))
    assert (found["c_cutmix_gain"]["run_verdict"], found["c_autoaug_gain"]["run_verdict"]) == ("fails", "holds")


@pytest.mark.parametrize(
    ("baseline", "modern", "why"),
    [
        ([0.316, 0.320], [0.300, 0.302], "Modern above the CutMix bound 0.024, though below Baseline"),
        ([0.200, 0.205], [0.008, 0.006], "Baseline below the non-CutMix bound 0.210"),
    ],
)
def test_claim_b_checks_the_magnitudes(tmp_path: Path, baseline: list[float], modern: list[float], why: str) -> None:
    write_sweep(tmp_path, {"Baseline": baseline, "Modern": modern})
    assert [shown.split(" (")[0] for shown in more_local(tmp_path)] == ["fails, 2 seeds"] * 2, why
    assert more_local(tmp_path)[0].split(" (")[1].startswith(why.split()[0])  # the cell whose bound failed


def test_a_one_seed_sweep_compares_no_cells(tmp_path: Path) -> None:
    # The paper's own design, one seed a cell: its bounds hold, the separation of cells gets no verdict.
    found = claims(write_sweep(tmp_path, {cell: values[:1] for cell, values in PAPER_EXACT.items()}))
    assert found["a_other_not_local"]["run_verdict"] == found["a_cutmix_local"]["run_verdict"] == "holds"
    separation = found["a_separation"]
    assert (separation["run_verdict"], separation["mean_verdict"]) == ("one seed: no verdict",) * 2
    assert (
        separation["row"][2]
        == "0.024 (+CM) vs 0.210 (-CM); Baseline, +AA, +CM, +LS, Modern, -AA, -CM, -LS: one run each"
    )
    assert found["d_ls_keeps"]["run_verdict"] == "undetermined"


def test_the_margin_floor_is_rescaled_with_the_diagonal(tmp_path: Path) -> None:
    # +LS 0.015 above Baseline (sd 0.00283 each): 90% interval 0.015 +- 2.920 x 0.00283 = [0.0067, 0.0233], past
    # the margin 0.02: fails. Over the diagonal the interval is [0.0047, 0.0165]: inside an unscaled 0.02, but past
    # the rescaled 0.02 / sqrt 2 = 0.0141, so it fails there too.
    found = claims(write_sweep(tmp_path, {**PAPER_EXACT, "+LS": [0.331, 0.335]}))
    keeps = found["d_ls_keeps"]
    assert (keeps["run_verdict"], keeps["run_diagonal_verdict"], keeps["conventions"]) == ("fails", "fails", "agree")
    assert keeps["run_diagonal_bound"] == pytest.approx(0.02 / math.sqrt(2))
    assert keeps["run_diagonal_value"] == pytest.approx(0.015 / math.sqrt(2))


# ---- attention that never left uniform --------------------------------------------------------------------------


def test_uniform_mad_of_a_grid() -> None:
    assert round(UNIFORM_8, 5) == 0.51706  # docs/metrics.md, "Uniform attention"
    assert uniform_mad(8) == pytest.approx(UNIFORM_8, abs=1e-12)
    assert uniform_mad(1) == 0.0
    # 2 x 2 grid, unit square: 4 of 16 pairs at distance 0, 8 at one step 1/2, 4 at the diagonal sqrt 2 / 2.
    assert uniform_mad(2) == pytest.approx((8 * 0.5 + 4 * math.sqrt(2) / 2) / 16)


@pytest.mark.parametrize(
    ("offsets", "expected"),
    [
        ((-0.004, 0.003, 0.0099, -0.0099), "not informative: attention still uniform"),  # every head within 0.01
        ((-0.004, 0.003, 0.0099, -0.0101), "holds"),  # one early head 0.0101 below uniform: it left
    ],
)
def test_a_claim_cannot_hold_on_uniform_attention(tmp_path: Path, offsets: tuple[float, ...], expected: str) -> None:
    # After one epoch every head is still uniform (0.517): "every non-CutMix cell at or above 0.210" would hold.
    write_sweep(tmp_path, {cell: [0.5, 0.5] for cell in ORDER})
    for run_dir in tmp_path.iterdir():
        uniform_heads(run_dir, offsets)
    found = claims(tmp_path)
    other = found["a_other_not_local"]
    assert (other["run_verdict"], other["mean_verdict"]) == (expected, expected)
    if expected != "holds":
        assert other["row"][2].startswith("0.507 (Baseline); Baseline seed 0, Baseline seed 1, +AA seed 0")
    # "CutMix cells local" would fail on the same runs (0.507 > 0.024): with uniform heads that says nothing either.
    assert found["a_cutmix_local"]["run_verdict"] == ("fails" if expected == "holds" else expected)


def test_uniform_is_judged_on_the_run_s_own_grid(tmp_path: Path) -> None:
    # A 4 x 4 grid's uniform MAD is 0.50200, not 8 x 8's 0.51706: heads at 0.502 there are uniform, and the same
    # heads on an 8 x 8 grid (0.015 below its uniform value) are not.
    write_sweep(tmp_path, {"Baseline": [0.30, 0.31], "Modern": [0.008, 0.006]})
    baseline = sorted(tmp_path.glob("*_aa0_cm0_ls0_*"))
    assert uniform_mad(4) == pytest.approx(0.50200, abs=1e-5)
    for run_dir in baseline:
        uniform_heads(run_dir, (0.50200 - UNIFORM_8,))
    assert more_local(tmp_path) == ["holds, 2 seeds", "holds, 2 seeds"]
    for run_dir in baseline:
        path = run_dir / "results.json"
        data = json.loads(path.read_text())
        data["model"]["grid_size"] = 4
        path.write_text(json.dumps(data))
    shown = "not informative: attention still uniform, 2 seeds (Baseline seed 0, Baseline seed 1)"
    assert more_local(tmp_path) == [shown] * 2


def test_the_page_of_a_one_seed_sweep_states_what_one_seed_decides(tmp_path: Path) -> None:
    # The demo's page: Modern 0.463 against Baseline 0.474, one seed each, said "Modern more local: holds". Modern
    # above the paper's 0.024 fails claim (b) on one seed; the comparison alone would have waited for a second.
    write_sweep(tmp_path / "demo", {"Baseline": [0.474], "Modern": [0.463]})
    page = build_page(tmp_path / "demo", tmp_path / "out")
    text = page.read_text(encoding="utf-8")
    row = text[text.index("<td>cifar100</td>") :].split("</tr>")[0]
    assert row.count("<td>fails, 1 seed (Modern 0.463 above 0.024)</td>") == 2 and "<td>holds" not in row
