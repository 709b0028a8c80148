"""Claim (d), "+AA and +LS stay at Baseline's MAD", as an equivalence test on cell means (docs/metrics.md).

Margin = max(0.02, 2 x Baseline's seed standard deviation); equivalent when the 90% Welch interval of mean(cell) -
mean(Baseline) lies strictly inside +-margin (two one-sided tests at 5%). Undetermined with fewer than 2 runs in
Baseline, the cell or +CM, or when CutMix's own shift is not significant (two-sided, 5%) or within the margin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean, variance

from scipy import stats

from vit_locality.report.load.aggregate import summarise

MARGIN_FLOOR = 0.02  # the fixed part of the margin, in min MAD
SPREAD_FACTOR = 2.0  # times Baseline's seed standard deviation
ALPHA = 0.05  # each one-sided test; the two-sided test of CutMix's shift
MIN_RUNS = 2  # per cell: a sample standard deviation needs two values

EQUIVALENT, NOT_EQUIVALENT, UNDETERMINED = "equivalent", "not equivalent", "undetermined"


@dataclass(frozen=True)
class WelchDifference:
    """mean(a) - mean(b) over the finite values of each side, with its Welch t intervals."""

    a: tuple[float, ...]
    b: tuple[float, ...]

    @property
    def estimate(self) -> float:
        return fmean(self.a) - fmean(self.b)

    def interval(self, level: float) -> tuple[float, float]:
        """The two-sided `level` interval, Welch-Satterthwaite degrees of freedom; the point when nothing varies."""
        va, vb = variance(self.a) / len(self.a), variance(self.b) / len(self.b)
        if va + vb == 0.0:
            return self.estimate, self.estimate
        df = (va + vb) ** 2 / (va**2 / (len(self.a) - 1) + vb**2 / (len(self.b) - 1))
        half = float(stats.t.ppf(0.5 + level / 2, df)) * math.sqrt(va + vb)
        return self.estimate - half, self.estimate + half


@dataclass(frozen=True)
class Equivalence:
    outcome: str  # EQUIVALENT, NOT_EQUIVALENT or UNDETERMINED
    difference: float  # mean(cell) - mean(Baseline); NaN when too few runs
    low: float  # the 90% interval of the difference
    high: float
    margin: float
    reason: str = ""  # why undetermined


def welch(a: Sequence[float], b: Sequence[float]) -> WelchDifference:
    """mean(a) - mean(b) for a Welch t-test; needs 2 or more finite values on each side."""
    finite_a, finite_b = (tuple(float(v) for v in side if math.isfinite(v)) for side in (a, b))
    if len(finite_a) < MIN_RUNS or len(finite_b) < MIN_RUNS:
        raise ValueError(
            f"a Welch t-test needs {MIN_RUNS} or more values per side, got {len(finite_a)} and {len(finite_b)}"
        )
    return WelchDifference(finite_a, finite_b)


def margin(baseline: Sequence[float]) -> float:
    """max(0.02, 2 x Baseline's sample standard deviation); the floor alone below two runs."""
    spread = summarise(baseline).std
    return max(MARGIN_FLOOR, SPREAD_FACTOR * spread) if math.isfinite(spread) else MARGIN_FLOOR


def shift_is_significant(diff: WelchDifference) -> bool:
    """Two-sided Welch t-test at 5%: the 95% interval excludes 0 (an exact non-zero when nothing varies)."""
    low, high = diff.interval(1 - ALPHA)
    return low > 0 or high < 0


def stays_at_baseline(cell: Sequence[float], baseline: Sequence[float], cutmix: Sequence[float]) -> Equivalence:
    """TOST of `cell` against `baseline` with the stated margin, undetermined as the module says."""
    delta = margin(baseline)
    few = [name for name, runs in (("Baseline", baseline), ("the cell", cell), ("+CM", cutmix)) if len(runs) < MIN_RUNS]
    if few:
        why = f"fewer than {MIN_RUNS} runs in {', '.join(few)} (a t-test needs each cell's spread)"
        return Equivalence(UNDETERMINED, math.nan, math.nan, math.nan, delta, why)
    diff = welch(cell, baseline)
    low, high = diff.interval(1 - 2 * ALPHA)
    shift = welch(cutmix, baseline)
    if not shift_is_significant(shift):
        why = f"CutMix's own shift ({shift.estimate:+.3f}) is not significant at 5%"
        return Equivalence(UNDETERMINED, diff.estimate, low, high, delta, why)
    if abs(shift.estimate) <= delta:
        why = f"CutMix's own shift ({shift.estimate:+.3f}) is within the margin {delta:.3f}"
        return Equivalence(UNDETERMINED, diff.estimate, low, high, delta, why)
    inside = -delta < low and high < delta
    return Equivalence(EQUIVALENT if inside else NOT_EQUIVALENT, diff.estimate, low, high, delta)
