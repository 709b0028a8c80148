"""Each cell against Baseline: the difference of means with its 95% Welch interval, and what the interval says."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vit_locality.catalog import CELL_ORDER
from vit_locality.report.load.aggregate import Aggregate, Group
from vit_locality.report.stats.equivalence import MIN_RUNS, welch

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
