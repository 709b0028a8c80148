"""Intervals over seeds: claim (d)'s equivalence test (docs/metrics.md), each cell against Baseline, and the 8 cells
as a 2 x 2 x 2 factorial design (AA, CM, LS) whose main effects are paired by seed where every seed ran each cell once,
else Welch from each cell's variance (sum of (1/4)^2 s_c^2 / n_c) where every cell has 2 or more runs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean, variance

from scipy import stats

from vit_locality.catalog import CELL_FLAGS, CELL_ORDER
from vit_locality.report.load.aggregate import Aggregate, Group, summarise

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


CONTRASTED = ("min_mad", "acc1")
LEVEL = 0.95
LOWER, HIGHER, NO_DIFFERENCE, NOT_AVAILABLE = "lower", "higher", "no difference shown", "n/a"


@dataclass(frozen=True)
class Contrast:
    cell: str
    figure: str
    runs: int
    baseline_runs: int
    difference: float  # NaN when either side has fewer than MIN_RUNS runs
    low: float
    high: float
    verdict: str


def contrast(cell: str, figure: str, values: list[float], baseline: list[float]) -> Contrast:
    """The cell's mean minus Baseline's with its 95% Welch interval, and what the interval says."""
    if len(values) < MIN_RUNS or len(baseline) < MIN_RUNS:
        return Contrast(cell, figure, len(values), len(baseline), math.nan, math.nan, math.nan, NOT_AVAILABLE)
    diff = welch(values, baseline)
    low, high = diff.interval(LEVEL)
    verdict = LOWER if high < 0 else HIGHER if low > 0 else NO_DIFFERENCE
    return Contrast(cell, figure, len(values), len(baseline), diff.estimate, low, high, verdict)


def contrasts(agg: Aggregate, data: str, model: str) -> list[Contrast]:
    """Every counted paper cell, then every group of a cell beyond the paper's 8, against Baseline; [] without one."""
    groups: dict[str, Group] = dict(agg.cells(data, model))
    beyond = [
        g for key, g in agg.groups.items() if (key.data, key.model) == (data, model) and key.cell not in CELL_ORDER
    ]
    for group in sorted(beyond, key=lambda g: (g.key.cell, g.key.variant)):
        groups[group.key.cell + (f" [{group.key.variant}]" if group.key.settings else "")] = group
    baseline = groups.pop("Baseline", None)
    if baseline is None:
        return []
    found = []
    for figure in CONTRASTED:
        reference = [value for _, value in baseline.values(figure)]
        for name, group in groups.items():
            found.append(contrast(name, figure, [value for _, value in group.values(figure)], reference))
    return found


FACTORS = ("AA", "CM", "LS")


@dataclass(frozen=True)
class Effect:
    factor: str
    figure: str
    estimate: float
    low: float  # NaN when there is no interval
    high: float
    df: float
    n: int  # seeds (paired) or runs (Welch, one seed)
    method: str


def main_effect(cells: dict[str, Group], factor: str, figure: str) -> Effect:
    """Main effect of `factor` (AA, CM or LS) on `figure` over the 8 cells, with its interval."""
    index = FACTORS.index(factor)
    values = {name: cells[name].values(figure) if name in cells else [] for name in CELL_ORDER}
    if missing := [name for name, pairs in values.items() if not pairs]:
        return Effect(factor, figure, *(math.nan,) * 4, 0, f"no value in cells {', '.join(missing)}")
    weights = {name: (1.0 if CELL_FLAGS[name][index] else -1.0) / 4 for name in CELL_ORDER}
    summaries = {name: summarise(v for _, v in pairs) for name, pairs in values.items()}
    estimate = sum(weights[name] * summaries[name].mean for name in CELL_ORDER)

    seeds = _common_seeds(values)
    if seeds is not None and len(seeds) >= 2:
        at = lambda name, seed: next(v for s, v in values[name] if s == seed)
        per_seed = [sum(weights[name] * at(name, seed) for name in CELL_ORDER) for seed in seeds]
        stat = summarise(per_seed)
        df = len(per_seed) - 1
        half = float(stats.t.ppf(0.975, df)) * stat.std / math.sqrt(stat.n)
        return Effect(factor, figure, estimate, estimate - half, estimate + half, df, stat.n, "paired by seed")
    n_runs = sum(stat.n for stat in summaries.values())
    if seeds is not None:
        return Effect(factor, figure, estimate, math.nan, math.nan, math.nan, 1, "one seed: no interval")
    if any(stat.n < 2 for stat in summaries.values()):
        return Effect(factor, figure, estimate, math.nan, math.nan, math.nan, n_runs, "a cell has one run: no interval")
    terms = [(weights[name] ** 2 * stat.std**2 / stat.n, stat.n - 1) for name, stat in summaries.items()]
    total = sum(a for a, _ in terms)
    if total == 0:
        return Effect(factor, figure, estimate, estimate, estimate, math.nan, n_runs, "Welch (no spread)")
    df = total**2 / sum(a**2 / dof for a, dof in terms)
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(total)
    return Effect(factor, figure, estimate, estimate - half, estimate + half, df, n_runs, "Welch")


def main_effects(cells: dict[str, Group], figure: str) -> list[Effect]:
    return [main_effect(cells, factor, figure) for factor in FACTORS]


def _common_seeds(values: dict[str, list[tuple[object, float]]]) -> list[object] | None:
    """The seeds, when every cell has exactly one run per seed and the same seeds; else None."""
    seeds = [[seed for seed, _ in pairs] for pairs in values.values()]
    if any(len(set(s)) != len(s) or set(s) != set(seeds[0]) for s in seeds):
        return None
    return sorted(set(seeds[0]), key=str)
