"""The paper's ablation claims, tested on the 8 cells as a 2 x 2 x 2 factorial design (AA, CM, LS).

Main effect of a factor on a figure = mean over the runs with the factor on minus mean over the runs with it
off; each side holds every seed of its 4 cells (with equal seeds per cell this equals the difference of the
mean cell means). The 95% interval over seeds is chosen by what the runs allow:

- paired, when every seed has exactly one run in each of the 8 cells and there are n >= 2 seeds: one effect
  per seed (the same difference within that seed), then mean +- t(0.975, n - 1) * sd / sqrt(n). Pairing by
  seed removes whatever a seed shares across cells.
- Welch, when the seeds do not line up but every cell has >= 2 runs: the variance of each side's mean is
  sum_c n_c s_c^2 / N_side^2 from the cells' own sample variances s_c^2, the two sides' variances add, and
  the degrees of freedom come from the Welch-Satterthwaite formula, each cell contributing n_c - 1.
- none (NaN, shown "n/a"), with one seed, or when some cell has a single run.

scipy is not a dependency, so the t quantile is computed here (`t_quantile`).
The separation verdict compares cell means: does every CutMix cell lie strictly below every other cell?
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from ..domain import CELL_FLAGS, CELL_ORDER
from .aggregate import Group, summarise

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


@dataclass(frozen=True)
class Separation:
    verdict: bool | None  # None when one side has no cell
    max_cutmix: float  # the highest CutMix cell mean
    max_cutmix_cell: str | None
    min_other: float  # the lowest cell mean without CutMix
    min_other_cell: str | None
    cells: int  # how many cells had a value


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` (real, >= 1) degrees of freedom.

    With t = sqrt(df) tan(theta), P(0 < T < t) = c * integral_0^theta cos(u)^(df - 1) du,
    c = Gamma((df + 1) / 2) / (sqrt(pi) Gamma(df / 2)): a smooth integral on a finite interval (Simpson's rule),
    solved for t by bisection. Accurate to about 1e-7 for df >= 1."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if not df >= 1.0:
        raise ValueError(f"df must be >= 1, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    if df > 1e7:
        return NormalDist().inv_cdf(p)
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)
    target = (p - 0.5) / c

    def area(t: float, steps: int = 512) -> float:
        theta = math.atan(t / math.sqrt(df))
        h = theta / steps
        total = 1.0 + math.cos(theta) ** (df - 1)
        for i in range(1, steps):
            total += (4 if i % 2 else 2) * math.cos(i * h) ** (df - 1)
        return total * h / 3

    low, high = 0.0, 1.0
    while area(high) < target:  # bracket in t, so that theta stays within a few widths of the integrand's peak
        low, high = high, 2 * high
    for _ in range(50):
        mid = (low + high) / 2
        if area(mid) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def main_effect(cells: dict[str, Group], factor: str, figure: str) -> Effect:
    """Main effect of `factor` (AA, CM or LS) on `figure` over the 8 cells of one (data set, model)."""
    index = FACTORS.index(factor)
    values = {name: cells[name].values(figure) if name in cells else [] for name in CELL_ORDER}
    missing = [name for name, pairs in values.items() if not pairs]
    if missing:
        return Effect(factor, figure, *(math.nan,) * 4, 0, f"no value in cells {', '.join(missing)}")
    on = [name for name in CELL_ORDER if CELL_FLAGS[name][index]]
    off = [name for name in CELL_ORDER if not CELL_FLAGS[name][index]]
    side_mean = lambda names: summarise(v for name in names for _, v in values[name]).mean
    estimate = side_mean(on) - side_mean(off)

    seeds = _common_seeds(values)
    if seeds is not None and len(seeds) >= 2:
        per_seed = []
        for seed in seeds:
            at = {name: next(v for s, v in values[name] if s == seed) for name in CELL_ORDER}
            per_seed.append(sum(at[n] for n in on) / len(on) - sum(at[n] for n in off) / len(off))
        stat = summarise(per_seed)
        df = len(per_seed) - 1
        half = t_quantile(0.975, df) * stat.std / math.sqrt(stat.n)
        return Effect(factor, figure, estimate, estimate - half, estimate + half, df, stat.n, "paired by seed")
    n_runs = sum(len(pairs) for pairs in values.values())
    if seeds is not None:
        return Effect(factor, figure, estimate, math.nan, math.nan, math.nan, 1, "one seed: no interval")
    if any(len(pairs) < 2 for pairs in values.values()):
        return Effect(factor, figure, estimate, math.nan, math.nan, math.nan, n_runs, "a cell has one run: no interval")
    terms = []  # (variance contribution a_c, its degrees of freedom n_c - 1)
    for names in (on, off):
        total = sum(len(values[name]) for name in names)
        for name in names:
            stat = summarise(v for _, v in values[name])
            terms.append((stat.n * stat.std**2 / total**2, stat.n - 1))
    variance = sum(a for a, _ in terms)
    if variance == 0:
        return Effect(factor, figure, estimate, estimate, estimate, math.nan, n_runs, "Welch (no spread)")
    df = variance**2 / sum(a**2 / dof for a, dof in terms)
    half = t_quantile(0.975, max(df, 1.0)) * math.sqrt(variance)
    return Effect(factor, figure, estimate, estimate - half, estimate + half, df, n_runs, "Welch")


def main_effects(cells: dict[str, Group], figure: str) -> list[Effect]:
    return [main_effect(cells, factor, figure) for factor in FACTORS]


def separation(cells: dict[str, Group], figure: str = "min_mad") -> Separation:
    """Does every CutMix cell's mean lie below every non-CutMix cell's mean (the paper's 0.024 vs 0.210)?"""
    means = {name: group.stat(figure).mean for name, group in cells.items()}
    means = {name: value for name, value in means.items() if math.isfinite(value)}
    cutmix = {name: v for name, v in means.items() if CELL_FLAGS[name][1]}
    other = {name: v for name, v in means.items() if not CELL_FLAGS[name][1]}
    top = max(cutmix, key=cutmix.__getitem__) if cutmix else None
    bottom = min(other, key=other.__getitem__) if other else None
    if top is None or bottom is None:
        return Separation(None, cutmix.get(top, math.nan), top, other.get(bottom, math.nan), bottom, len(means))
    return Separation(cutmix[top] < other[bottom], cutmix[top], top, other[bottom], bottom, len(means))


def _common_seeds(values: dict[str, list[tuple[object, float]]]) -> list[object] | None:
    """The seeds, when every cell has exactly one run per seed and the same seeds; else None."""
    seed_sets = []
    for pairs in values.values():
        seeds = [seed for seed, _ in pairs]
        if len(set(seeds)) != len(seeds):
            return None
        seed_sets.append(set(seeds))
    if any(s != seed_sets[0] for s in seed_sets):
        return None
    return sorted(seed_sets[0], key=str)
