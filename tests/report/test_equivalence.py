"""Claim (d) as two one-sided Welch t-tests, on inputs whose outcome is worked out by hand.

t quantiles (Student's table): t(0.95, 4) = 2.1318, t(0.975, 4) = 2.7764, t(0.95, 2) = 2.9200.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from record_fakes import ORDER, write_run
from scipy import stats

from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.render.tables import ablation_table
from vit_locality.report.stats.effects import (
    EQUIVALENT,
    NOT_EQUIVALENT,
    UNDETERMINED,
    margin,
    shift_is_significant,
    stays_at_baseline,
    welch,
)

BASELINE = [0.30, 0.31, 0.32]  # mean 0.31, sample std 0.01: margin max(0.02, 0.02) = 0.02
CUTMIX = [0.02, 0.03, 0.04]  # shift -0.28, far beyond the margin


def test_welch_by_hand() -> None:
    # var([1, 2, 3]) = 1, var([1, 3]) = 2: se^2 = 1/3 + 2/2 = 4/3; df = (4/3)^2 / ((1/3)^2 / 2 + 1^2 / 1) = 1.6842.
    diff = welch([1.0, 2.0, 3.0, math.nan], [1.0, 3.0])  # a run without the figure does not count
    half = stats.t.ppf(0.95, (16 / 9) / (1 / 18 + 1)) * math.sqrt(4 / 3)
    assert diff.estimate == 0.0 and diff.interval(0.9) == pytest.approx((-half, half), rel=1e-12)
    scipy_welch = stats.ttest_ind([1.0, 2.0, 3.0], [1.0, 3.0], equal_var=False).confidence_interval(0.9)
    assert diff.interval(0.9) == pytest.approx((scipy_welch.low, scipy_welch.high), rel=1e-9)
    with pytest.raises(ValueError, match="needs 2 or more values per side, got 1 and 2"):
        welch([1.0, math.nan], [1.0, 2.0])


def test_margin_is_the_larger_of_the_floor_and_twice_the_spread() -> None:
    assert margin(BASELINE) == pytest.approx(0.02)
    assert margin([0.300, 0.301, 0.302]) == 0.02  # 2 x 0.001 is below the floor
    assert margin([0.28, 0.30, 0.32]) == pytest.approx(0.04)  # 2 x 0.02
    assert margin([0.3]) == 0.02  # no spread from one run: the floor


def test_equivalent_when_the_90_percent_interval_is_inside_the_margin() -> None:
    # Same values as Baseline: difference 0, se = sqrt(2 x 0.0001 / 3) = 0.008165, df 4: +-2.1318 x se = +-0.01741.
    test = stays_at_baseline(BASELINE, BASELINE, CUTMIX)
    assert test.outcome == EQUIVALENT and test.difference == pytest.approx(0.0, abs=1e-12)
    assert (test.low, test.high) == pytest.approx((-0.017406, 0.017406), abs=1e-6) and test.margin == pytest.approx(
        0.02
    )


def test_not_equivalent_when_the_interval_reaches_past_the_margin() -> None:
    # +0.01: the difference alone is inside +-0.02, but its interval [-0.0074, +0.0274] is not.
    near = stays_at_baseline([v + 0.01 for v in BASELINE], BASELINE, CUTMIX)
    assert near.outcome == NOT_EQUIVALENT and near.high == pytest.approx(0.01 + 0.017406, abs=1e-6)
    # -0.01 the other way: the lower end -0.0274 crosses -0.02.
    assert stays_at_baseline([v - 0.01 for v in BASELINE], BASELINE, CUTMIX).outcome == NOT_EQUIVALENT
    far = stays_at_baseline([v + 0.04 for v in BASELINE], BASELINE, CUTMIX)
    assert far.outcome == NOT_EQUIVALENT and far.difference == pytest.approx(0.04)


def test_a_wider_baseline_spread_widens_the_margin() -> None:
    # A cell at 0.28, 0.30, 0.32 against the same Baseline: margin 2 x 0.02 = 0.04; se = sqrt(2 x 0.0004 / 3) =
    # 0.01633, df 4: +-2.1318 x se = +-0.0348, inside +-0.04. Against a Baseline without spread (0.30 three times)
    # the margin is the floor 0.02 and the interval +-2.9200 x 0.01155 = +-0.0337 (df 2) is not inside it.
    cell = [0.28, 0.30, 0.32]
    wide = stays_at_baseline(cell, cell, CUTMIX)
    assert wide.margin == pytest.approx(0.04) and wide.outcome == EQUIVALENT
    assert wide.high == pytest.approx(2.1318468 * math.sqrt(0.0008 / 3), abs=1e-6)
    narrow = stays_at_baseline(cell, [0.30, 0.30, 0.30], CUTMIX)
    assert narrow.margin == 0.02 and narrow.outcome == NOT_EQUIVALENT
    assert narrow.high == pytest.approx(2.9199856 * 0.02 / math.sqrt(3), abs=1e-6)


def test_undetermined_when_cutmix_moves_nothing_significant() -> None:
    # CutMix at 0.10, 0.50, 0.30: mean 0.30, 0.01 from Baseline with a spread of 0.2: not significant.
    test = stays_at_baseline(BASELINE, BASELINE, [0.10, 0.50, 0.30])
    assert test.outcome == UNDETERMINED and test.reason == "CutMix's own shift (-0.010) is not significant at 5%"
    assert not shift_is_significant(welch([0.10, 0.50, 0.30], BASELINE))


def test_undetermined_when_cutmix_shift_is_within_the_margin() -> None:
    # Baseline 0.300-0.302 (std 0.001, margin 0.02), CutMix 0.015 lower with the same spread: significant
    # (se 0.000816, 95% half-width 2.7764 x se = 0.0023) but no larger than the margin.
    baseline = [0.300, 0.301, 0.302]
    cutmix = [v - 0.015 for v in baseline]
    assert shift_is_significant(welch(cutmix, baseline))
    test = stays_at_baseline(baseline, baseline, cutmix)
    assert test.outcome == UNDETERMINED and test.reason == "CutMix's own shift (-0.015) is within the margin 0.020"


@pytest.mark.parametrize(
    ("cell", "baseline", "cutmix", "named"),
    [([0.3], BASELINE, CUTMIX, "the cell"), (BASELINE, [0.3], CUTMIX, "Baseline"), (BASELINE, BASELINE, [0.02], "+CM")],
)
def test_undetermined_below_two_runs(cell: list, baseline: list, cutmix: list, named: str) -> None:
    test = stays_at_baseline(cell, baseline, cutmix)
    assert test.outcome == UNDETERMINED and math.isnan(test.difference)
    assert test.reason == f"fewer than 2 runs in {named} (a t-test needs each cell's spread)"


def test_no_spread_at_all_is_judged_on_the_values() -> None:
    # Every run of a cell identical: se 0, the interval is the difference itself; CutMix's -0.28 is a certain shift.
    assert stays_at_baseline([0.3, 0.3], [0.3, 0.3], [0.02, 0.02]).outcome == EQUIVALENT
    assert stays_at_baseline([0.33, 0.33], [0.3, 0.3], [0.02, 0.02]).outcome == NOT_EQUIVALENT


def test_one_seed_per_cell_leaves_claim_d_undetermined_in_the_table(tmp_path: Path) -> None:
    # The demo's one-seed numbers: +AA 0.004 from Baseline, CutMix 0.008. No t-test on one run a cell.
    mad = {"Baseline": 0.517, "+AA": 0.513, "+CM": 0.509, "+LS": 0.514}
    for cell in ORDER:
        write_run(tmp_path, "synthetic", cell, 0, 90.0, mad.get(cell, 0.51), 0.9)
    part = ablation_table(aggregate([tmp_path]), "synthetic", "vit_paper").parts[0]
    rows = {rec["claim"]: row for rec, row in zip(part.records, part.rows, strict=True)}
    why = "fewer than 2 runs in Baseline, the cell, +CM (a t-test needs each cell's spread)"
    for key in ("d_autoaug_keeps", "d_ls_keeps"):
        assert rows[key][2:6] == [why, "undetermined, 1 seed", why, "undetermined, 1 seed"]
