"""The paper's claims, each judged on the runs of one (data set, model) by an explicit rule.

The paper ran one seed, where a cell and its run are the same thing. With several seeds a claim about "every
cell" can be read on every run or on each cell's mean over its runs, and the two can disagree (a CutMix cell
whose mean is low while one of its runs is not local), so every claim gets both verdicts. `per="run"` puts every
run in its cell's place; `per="mean"` puts the cell's mean there (`aggregate.cell_values`). The rules, with
"value" meaning a run's value or a cell's mean as `per` says:

(a) CIFAR-100 8-cell ablation, minimum early-layer MAD; needs all 8 cells.
    - CutMix cells local: the highest value of a CutMix cell (+CM, Modern, -AA, -LS) <= 0.024.
    - other cells not local: the lowest value of a non-CutMix cell (Baseline, +AA, +LS, -CM) >= 0.210.
      The paper's claim (a) holds when both rows hold.
    - CutMix separates locality: the highest CutMix value < the lowest non-CutMix value (strictly).
(b) Baseline 0.316 vs Modern 0.008 minimum MAD, Modern more local; needs Baseline and Modern:
    every Modern value < every Baseline value (the highest Modern value below the lowest Baseline value).
(c) CutMix and AutoAugment each add about 6-7 points of top-1 over Baseline; needs Baseline and the cell:
    the cell's gain over Baseline >= 5 points (0.05 as a fraction), where the gain is, per run, the lowest run of
    the cell minus the highest Baseline run (every run of the cell beats every Baseline run by 5 points), and per
    cell mean the difference of the means. 5 points, not the band [6, 7]: the paper's figure is one seed on one
    data set, so the claim checked is a gain of that size, not its second digit; a larger gain also holds.
(d) AutoAugment alone (+AA) and label smoothing alone (+LS) stay at Baseline's MAD; needs Baseline, the cell
    and +CM: the cell's largest distance to Baseline <= 10% of CutMix's smallest distance to Baseline, where
    per run the distances are |x - y| over every pair of a run x of the cell (or of +CM) and a Baseline run y,
    and per cell mean the distances of the means. CutMix's own shift is the yardstick of "no effect": the paper's
    +CM moves minimum MAD by about 0.29, so the limit there is about 0.029.

Every comparison allows 1e-9 for floating-point rounding (a mean of three runs at 0.21 is 0.21, not 0.20999...).
A claim whose cells are not all measured is "not enough runs", never a verdict on part of the design. The
paper's figures are CIFAR-100's; claims (a), (c) and (d) are checked on whatever data set the table is for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from vit_locality.catalog import CELL_ORDER
from vit_locality.report.aggregate import LEVELS, Group, Level, cell_values
from vit_locality.report.factorial import separation

HOLDS, FAILS, NOT_ENOUGH = "holds", "fails", "not enough runs"
SLACK = 1e-9
CUTMIX_MAX = 0.024  # the paper: every CutMix cell at or below this minimum MAD
OTHER_MIN = 0.210  # the paper: every cell without CutMix at or above it
GAIN_MIN = 0.05  # a fraction: 5 points of top-1
KEEP_FRACTION = 0.1  # of CutMix's shift
PAPER_MIN_MAD = {"cifar100": (0.316, 0.008)}  # Baseline, Modern
_GAIN = "about 6-7 points of top-1 over Baseline (at least 5)"
_STAYS = "stays at Baseline's min MAD (within 10% of CutMix's shift)"
# key -> (statement, the paper's figure, the headline figure judged, how the measured figure reads)
ABLATION_CLAIMS = {
    "a_cutmix_local": ("(a) every CutMix cell at or below 0.024 min MAD", "<= 0.024", "min_mad", "max"),
    "a_other_not_local": ("(a) every non-CutMix cell at or above 0.210 min MAD", ">= 0.210", "min_mad", "min"),
    "a_separation": (
        "(a) CutMix separates locality: every CutMix value below every other",
        "0.024 below 0.210",
        "min_mad",
        "versus",
    ),
    "c_cutmix_gain": (f"(c) +CM adds {_GAIN}", "+6 to +7 points", "acc1", "gain"),
    "c_autoaug_gain": (f"(c) +AA adds {_GAIN}", "+6 to +7 points", "acc1", "gain"),
    "d_autoaug_keeps": (f"(d) +AA {_STAYS}", "+AA at Baseline's MAD", "min_mad", "limit"),
    "d_ls_keeps": (f"(d) +LS {_STAYS}", "+LS at Baseline's MAD", "min_mad", "limit"),
}


@dataclass(frozen=True)
class Judgement:
    """One verdict with the figures it was reached on; value and bound are NaN when there were not enough runs."""

    verdict: str  # HOLDS, FAILS or NOT_ENOUGH
    value: float  # the measured figure the rule compares (a fraction for accuracy)
    bound: float  # what it is compared with
    value_cell: str | None = None  # the cell the value comes from, where it is one cell's
    bound_cell: str | None = None
    missing: tuple[str, ...] = ()  # the needed cells without a value


@dataclass(frozen=True)
class Claim:
    key: str  # a short id for the CSV
    statement: str
    paper: str  # the paper's figure, CIFAR-100
    figure: str  # the headline figure judged: min_mad or acc1
    style: str  # how the measured figure reads: "max", "min", "versus", "gain", "limit"
    per_run: Judgement
    per_mean: Judgement


def verdict(holds: bool) -> str:
    return HOLDS if holds else FAILS


def ablation_claims(cells: Mapping[str, Group]) -> list[Claim]:
    """Claims (a), (c) and (d) on the 8 cells of one (data set, model), each per run and per cell mean."""
    bounds = {per: _ablation_bounds(cells, per) for per in LEVELS}
    judges: dict[str, Callable[[Level], Judgement]] = {
        "a_cutmix_local": lambda per: bounds[per][0],
        "a_other_not_local": lambda per: bounds[per][1],
        "a_separation": lambda per: bounds[per][2],
        "c_cutmix_gain": lambda per: gain(cells, "+CM", per),
        "c_autoaug_gain": lambda per: gain(cells, "+AA", per),
        "d_autoaug_keeps": lambda per: keeps_locality(cells, "+AA", per),
        "d_ls_keeps": lambda per: keeps_locality(cells, "+LS", per),
    }
    return [Claim(key, *ABLATION_CLAIMS[key], judge("run"), judge("mean")) for key, judge in judges.items()]


def _ablation_bounds(cells: Mapping[str, Group], per: Level) -> tuple[Judgement, Judgement, Judgement]:
    """Claim (a): the CutMix bound, the non-CutMix bound and the separation, from the same two extremes."""
    missing = _missing(cell_values(cells, "min_mad", per), CELL_ORDER)
    if missing:
        return (_not_enough(missing),) * 3
    sep = separation(cells, "min_mad", per)
    top, top_cell, bottom, bottom_cell = sep.max_cutmix, sep.max_cutmix_cell, sep.min_other, sep.min_other_cell
    return (
        Judgement(verdict(top <= CUTMIX_MAX + SLACK), top, CUTMIX_MAX, top_cell),
        Judgement(verdict(bottom >= OTHER_MIN - SLACK), bottom, OTHER_MIN, bottom_cell),
        Judgement(verdict(top < bottom - SLACK), top, bottom, top_cell, bottom_cell),
    )


def gain(cells: Mapping[str, Group], cell: str, per: Level) -> Judgement:
    """Claim (c) for one cell: its top-1 gain over Baseline (the lowest pairwise gain per run) >= 5 points."""
    values = cell_values(cells, "acc1", per)
    missing = _missing(values, ("Baseline", cell))
    if missing:
        return _not_enough(missing)
    lowest = min(_differences(values, cell))
    return Judgement(verdict(lowest >= GAIN_MIN - SLACK), lowest, GAIN_MIN, cell, "Baseline")


def keeps_locality(cells: Mapping[str, Group], cell: str, per: Level) -> Judgement:
    """Claim (d) for one cell: its largest distance to Baseline in min MAD <= 10% of CutMix's smallest distance."""
    values = cell_values(cells, "min_mad", per)
    missing = _missing(values, ("Baseline", cell, "+CM"))
    if missing:
        return _not_enough(missing)
    largest = max(abs(d) for d in _differences(values, cell))
    limit = KEEP_FRACTION * min(abs(d) for d in _differences(values, "+CM"))
    return Judgement(verdict(largest <= limit + SLACK), largest, limit, cell, "Baseline")


def more_local(cells: Mapping[str, Group], per: Level) -> Judgement:
    """Claim (b): every Modern value of min MAD below every Baseline value (the highest Modern difference < 0)."""
    values = cell_values(cells, "min_mad", per)
    missing = _missing(values, ("Baseline", "Modern"))
    if missing:
        return _not_enough(missing)
    top, bottom = max(values["Modern"]), min(values["Baseline"])
    return Judgement(verdict(top < bottom - SLACK), top, bottom, "Modern", "Baseline")


def _differences(values: Mapping[str, list[float]], cell: str) -> list[float]:
    """x - y for every value x of `cell` and y of Baseline: every pair of runs, or the one pair of means."""
    return [x - y for x in values[cell] for y in values["Baseline"]]


def _missing(values: Mapping[str, list[float]], needed: Sequence[str]) -> tuple[str, ...]:
    return tuple(name for name in needed if name not in values)


def _not_enough(missing: tuple[str, ...]) -> Judgement:
    return Judgement(NOT_ENOUGH, math.nan, math.nan, missing=missing)
