"""Each cell against Baseline: the difference of means with its 95% Welch interval, and what the interval says."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from vit_locality.catalog import CELL_ORDER
from vit_locality.report.aggregate import Aggregate, Group
from vit_locality.report.equivalence import MIN_RUNS, welch
from vit_locality.report.record_units import UNITS_NOTE
from vit_locality.report.table_format import Table, figure_label, format_difference

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


def contrasts_table(agg: Aggregate, data: str, model: str, stem: str) -> Table:
    headers = ["cell", "figure", "runs (cell / Baseline)", "difference", f"{LEVEL:.0%} interval", "verdict"]
    rows, records = [], []
    for item in contrasts(agg, data, model):
        shown, interval = format_difference(item.figure, item.difference, item.low, item.high)
        runs = f"{item.runs} / {item.baseline_runs}"
        rows.append([item.cell, figure_label(item.figure), runs, shown, interval, item.verdict])
        records.append(asdict(item))
    title = "Each cell against Baseline (mean difference, Welch interval over seeds; accuracy in points)"
    cells = agg.cells(data, model)
    empty = "(no Baseline cell in this sweep)" if "Baseline" not in cells else "(no cell besides Baseline)"
    notes = [
        "lower / higher: the 95% interval of the cell's mean minus Baseline's excludes 0; n/a: fewer than 2 runs in"
        " the cell or in Baseline (one seed gives no spread); cells beyond the paper's 8 (e.g. Baseline+MU) are"
        " compared here only",
        UNITS_NOTE,
    ]
    return Table(stem, title, headers, rows, records, notes, empty=empty)
