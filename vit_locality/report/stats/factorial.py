"""The 8 cells as a 2 x 2 x 2 factorial design (AA, CM, LS): main effects with 95% intervals.

A main effect is the mean of the 4 cell means with the factor on minus the 4 with it off. Its interval is paired by
seed when every seed ran each cell once (2 or more seeds); else Welch from each cell's variance (sum of (1/4)^2
s_c^2 / n_c, Welch-Satterthwaite degrees of freedom) when every cell has 2 or more runs; else none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from vit_locality.catalog import CELL_FLAGS, CELL_ORDER
from vit_locality.report.load.aggregate import Group, summarise

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
    variance = sum(a for a, _ in terms)
    if variance == 0:
        return Effect(factor, figure, estimate, estimate, estimate, math.nan, n_runs, "Welch (no spread)")
    df = variance**2 / sum(a**2 / dof for a, dof in terms)
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(variance)
    return Effect(factor, figure, estimate, estimate - half, estimate + half, df, n_runs, "Welch")


def main_effects(cells: dict[str, Group], figure: str) -> list[Effect]:
    return [main_effect(cells, factor, figure) for factor in FACTORS]


def _common_seeds(values: dict[str, list[tuple[object, float]]]) -> list[object] | None:
    """The seeds, when every cell has exactly one run per seed and the same seeds; else None."""
    seeds = [[seed for seed, _ in pairs] for pairs in values.values()]
    if any(len(set(s)) != len(s) or set(s) != set(seeds[0]) for s in seeds):
        return None
    return sorted(set(seeds[0]), key=str)
