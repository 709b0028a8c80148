"""The paper's claims, each judged on the runs of one (data set, model) by an explicit rule (stated in each judge's
docstring, under each claims table and in docs/metrics.md): (a) `_ablation_bounds`, (b) `more_local`, (c) `gain`,
(d) `keeps_locality`; claims_table.py shows (a), (c) and (d) under an ablation table.

With several seeds a claim about "every cell" can be read on every run or on each cell's mean over its runs, and the
two can disagree, so each claim gets both verdicts (`per="run"`, `per="mean"`). Minimum MAD is read in the paper's
convention (`claim_units`) and judged with distances over the image side and over its diagonal, since the paper
does not say which. A figure is compared with a printed bound at the bound's printed precision (`Bound`, one
rounding rule in every convention); comparisons of two measured values allow 1e-9. A fixed bound is judged on any
number of seeds, and a failed one fails its claim; a comparison of measured cells with one run in a cell is "one
seed: no verdict"; a claim on runs of which one never left uniform attention is "not informative", whichever way it
would go; a claim whose cells are not all measured is "not enough runs", never a verdict on part of the design.
Every verdict carries the number of seeds it rests on (`Judgement.seeds`, shown by `shown_verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_UP, Decimal

from vit_locality.catalog import CELL_FLAGS, CELL_ORDER
from vit_locality.report.aggregate import LEVELS, Group, Level, summarise
from vit_locality.report.claim_units import (
    CONVENTIONS,
    DIAGONAL,
    GRID_SIDE,
    paper_value,
    still_uniform,
)
from vit_locality.report.equivalence import EQUIVALENT, stays_at_baseline
from vit_locality.report.equivalence import UNDETERMINED as NOT_DECIDED

HOLDS, FAILS, NOT_ENOUGH = "holds", "fails", "not enough runs"
UNDETERMINED, NOT_COMPARABLE = "undetermined", "not comparable"
ONE_SEED = "one seed: no verdict"
NOT_INFORMATIVE = "not informative: attention still uniform"
SLACK = 1e-9  # comparisons of two measured values only


# Significant digits a figure is read to before it is rounded to a bound's precision: float32's FLT_DIG, the digits
# every float32 value keeps. The probe stores float32, and a conversion (x 1/sqrt 2, / 8) adds float64 error, so a
# half-way value (0.0245) reaches the rule as 0.024499999359 or 0.02450000001 depending on its stored unit; read to
# 6 digits both are 0.0245000, and one rule decides it in every convention.
FIGURE_DIGITS = 6


@dataclass(frozen=True)
class Bound:
    """A bound as printed: a figure is compared with it at its printed precision, i.e. read to FIGURE_DIGITS
    significant digits, then rounded half up to as many decimals as `text` has (0.210: three), so a value that
    prints as the bound is at the bound. Half up, the rule of print and of most papers: 0.0245 is 0.025 (above
    0.024) and 0.2095 is 0.210 (at 0.210), whether the record stores the unit square, grid steps, pixels or the
    diagonal."""

    text: str

    @property
    def value(self) -> float:
        return float(self.text)

    def _rounded(self, value: float) -> Decimal:
        decimals = len(self.text.partition(".")[2])
        read = Decimal(f"{float(value):.{FIGURE_DIGITS}g}")
        return read.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)

    def at_or_above(self, value: float) -> bool:
        return math.isfinite(value) and self._rounded(value) >= Decimal(self.text)

    def at_or_below(self, value: float) -> bool:
        return math.isfinite(value) and self._rounded(value) <= Decimal(self.text)


CUTMIX_BOUND = Bound("0.024")  # the paper: every CutMix cell at or below this minimum MAD
OTHER_BOUND = Bound("0.210")  # the paper: every cell without CutMix at or above it
GAIN_BOUND = Bound("5.00")  # top-1 gain in points, compared at the two decimals the table prints
CUTMIX_MAX, OTHER_MIN, GAIN_MIN = CUTMIX_BOUND.value, OTHER_BOUND.value, GAIN_BOUND.value / 100  # GAIN_MIN: a fraction
PAPER_MIN_MAD = {"cifar100": (0.316, 0.008)}  # Baseline, Modern
_GAIN = "about 6-7 points of top-1 over Baseline (at least 5)"
_STAYS = "stays at Baseline's min MAD (equivalence test, margin max(0.02, 2 x Baseline's seed std))"
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
    "d_autoaug_keeps": (f"(d) +AA {_STAYS}", "+AA at Baseline's MAD", "min_mad", "equivalence"),
    "d_ls_keeps": (f"(d) +LS {_STAYS}", "+LS at Baseline's MAD", "min_mad", "equivalence"),
}


@dataclass(frozen=True)
class Judgement:
    """One verdict with the figures it was reached on; value and bound are NaN when there were not enough runs."""

    verdict: str  # HOLDS, FAILS, NOT_ENOUGH, UNDETERMINED, NOT_COMPARABLE, ONE_SEED or NOT_INFORMATIVE
    value: float  # the measured figure the rule compares (a fraction for accuracy)
    bound: float  # what it is compared with (claim (d): the margin)
    value_cell: str | None = None  # the cell the value comes from, where it is one cell's
    bound_cell: str | None = None
    missing: tuple[str, ...] = ()  # the needed cells without a value
    reason: str = ""  # why undetermined, not comparable, without a verdict or not informative
    interval: tuple[float, float] = (math.nan, math.nan)  # claim (d): the 90% interval of the difference
    seeds: tuple[int, int] = (0, 0)  # the fewest and the most runs in a cell the verdict reads


def shown_verdict(judgement: Judgement) -> str:
    """A verdict as a table cell, with the seeds it rests on ("holds, 1 seed", "fails, 2-3 seeds"); a claim that
    could not be judged rests on none."""
    low, high = judgement.seeds
    if judgement.verdict in (NOT_ENOUGH, NOT_COMPARABLE) or high == 0:
        return judgement.verdict
    count = f"{low}" if low == high else f"{low}-{high}"
    return f"{judgement.verdict}, {count} seed{'s' * (high > 1)}"


@dataclass(frozen=True)
class Claim:
    key: str  # a short id for the CSV
    statement: str
    paper: str  # the paper's figure, CIFAR-100
    figure: str  # the headline figure judged: min_mad or acc1
    style: str  # how the measured figure reads: "max", "min", "versus", "gain", "equivalence"
    judgements: dict[tuple[str, Level], Judgement]  # (GRID_SIDE or DIAGONAL, per) -> the verdict

    @property
    def disagreements(self) -> tuple[Level, ...]:
        """The levels whose verdict differs between the grid-side and the diagonal convention."""
        return tuple(
            per for per in LEVELS if self.judgements[GRID_SIDE, per].verdict != self.judgements[DIAGONAL, per].verdict
        )


def verdict(holds: bool) -> str:
    return HOLDS if holds else FAILS


def mad_values(
    cells: Mapping[str, Group], per: Level, convention: str = GRID_SIDE
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """({cell: its runs' min MAD in the paper's convention, or its mean}, {cell: why it is not comparable}); runs
    without statistics are left out, and one run that cannot be converted makes its cell not comparable."""
    factor = CONVENTIONS[convention]
    found: dict[str, list[float]] = {}
    refused: dict[str, str] = {}
    for name, group in cells.items():
        values = []
        for run in group.runs:
            if not run.final_attention:
                continue
            paper = paper_value(run)
            if not paper.comparable:
                refused.setdefault(name, f"{name} seed {run.seed}: {paper.reason}")
            values.append(factor * paper.value)
        if values and name not in refused:
            found[name] = _at_level(values, per)
    return found, refused


def _at_level(values: list[float], per: Level) -> list[float]:
    """A cell's values as a claim reads them: every run's (`per="run"`) or the cell's mean alone (`per="mean"`)."""
    return values if per == "run" else [summarise(values).mean]


def ablation_claims(cells: Mapping[str, Group]) -> list[Claim]:
    """Claims (a), (c) and (d) on the 8 cells of one (data set, model), per run and per cell mean, both conventions."""
    bounds = {(c, per): _ablation_bounds(cells, per, c) for c in CONVENTIONS for per in LEVELS}
    keeps = {(c, cell): keeps_locality(cells, cell, c) for c in CONVENTIONS for cell in ("+AA", "+LS")}
    judges: dict[str, Callable[[str, Level], Judgement]] = {
        "a_cutmix_local": lambda c, per: uninformative(cells, CUTMIX_CELLS, bounds[c, per][0]),
        "a_other_not_local": lambda c, per: uninformative(cells, OTHER_CELLS, bounds[c, per][1]),
        "a_separation": lambda c, per: uninformative(cells, CELL_ORDER, bounds[c, per][2]),
        "c_cutmix_gain": lambda c, per: uninformative(cells, ("Baseline", "+CM"), gain(cells, "+CM", per)),
        "c_autoaug_gain": lambda c, per: uninformative(cells, ("Baseline", "+AA"), gain(cells, "+AA", per)),
        "d_autoaug_keeps": lambda c, per: uninformative(cells, ("Baseline", "+AA"), keeps[c, "+AA"]),
        "d_ls_keeps": lambda c, per: uninformative(cells, ("Baseline", "+LS"), keeps[c, "+LS"]),
    }
    return [
        Claim(key, *ABLATION_CLAIMS[key], {(c, per): judge(c, per) for c in CONVENTIONS for per in LEVELS})
        for key, judge in judges.items()
    ]


def _ablation_bounds(cells: Mapping[str, Group], per: Level, convention: str) -> tuple[Judgement, ...]:
    """Claim (a), from the same two extremes: every CutMix cell at or below 0.024, every other cell at or above 0.210,
    and the separation (the highest CutMix value strictly below the lowest other one)."""
    values, refused = mad_values(cells, per, convention)
    blocked = _blocked(values, refused, CELL_ORDER)
    if blocked:
        return (blocked,) * 3
    cutmix = [(v, name) for name, vs in values.items() if CELL_FLAGS[name][1] for v in vs]
    other = [(v, name) for name, vs in values.items() if not CELL_FLAGS[name][1] for v in vs]
    (top, top_cell), (bottom, bottom_cell) = max(cutmix, key=lambda p: p[0]), min(other, key=lambda p: p[0])
    single = one_seed(cells, CELL_ORDER)
    seeds = seed_counts(cells, CELL_ORDER, "min_mad")
    separated = Judgement(verdict(top < bottom - SLACK), top, bottom, top_cell, bottom_cell, seeds=seeds)
    return (
        Judgement(verdict(CUTMIX_BOUND.at_or_below(top)), top, CUTMIX_MAX, top_cell, seeds=seeds),
        Judgement(verdict(OTHER_BOUND.at_or_above(bottom)), bottom, OTHER_MIN, bottom_cell, seeds=seeds),
        replace(separated, verdict=ONE_SEED, reason=single) if single else separated,
    )


def gain(cells: Mapping[str, Group], cell: str, per: Level) -> Judgement:
    """Claim (c) for one cell: its top-1 gain over Baseline (the lowest pairwise gain per run) >= 5 points."""
    values = {name: _at_level(acc, per) for name, g in cells.items() if (acc := [v for _, v in g.values("acc1")])}
    blocked = _blocked(values, {}, ("Baseline", cell))
    if blocked:
        return blocked
    lowest = min(x - y for x in values[cell] for y in values["Baseline"])
    seeds = seed_counts(cells, ("Baseline", cell), "acc1")
    return Judgement(verdict(GAIN_BOUND.at_or_above(100 * lowest)), lowest, GAIN_MIN, cell, "Baseline", seeds=seeds)


def keeps_locality(cells: Mapping[str, Group], cell: str, convention: str = GRID_SIDE) -> Judgement:
    """Claim (d) for one cell: equivalent to Baseline in min MAD by two one-sided tests (`equivalence`), run on the
    unit square's values, where the margin's floor is stated; the figures are shown in the convention's, so the
    verdict never depends on it."""
    values, refused = mad_values(cells, "run", GRID_SIDE)
    blocked = _blocked(values, refused, ("Baseline", cell, "+CM"))
    if blocked:
        return blocked
    test = stays_at_baseline(values[cell], values["Baseline"], values["+CM"])
    outcome = UNDETERMINED if test.outcome == NOT_DECIDED else verdict(test.outcome == EQUIVALENT)
    factor = CONVENTIONS[convention]
    return Judgement(
        outcome,
        factor * test.difference,
        factor * test.margin,
        cell,
        "Baseline",
        reason=test.reason,
        interval=(factor * test.low, factor * test.high),
        seeds=seed_counts(cells, ("Baseline", cell, "+CM"), "min_mad"),
    )


def more_local(cells: Mapping[str, Group], per: Level, convention: str = GRID_SIDE) -> Judgement:
    """Claim (b), a conjunction of the paper's magnitudes and the direction: the lowest Baseline value at or above
    the non-CutMix bound (0.210), the highest Modern value at or below the CutMix bound (0.024), and the highest
    Modern value below the lowest Baseline value. The two fixed bounds are judged first, on any number of seeds: a
    failed one fails the claim whatever more seeds would show. Only the comparison of the two measured cells waits
    for 2 seeds in each ("one seed: no verdict")."""
    values, refused = mad_values(cells, per, convention)
    needed = ("Baseline", "Modern")
    blocked = _blocked(values, refused, needed)
    if blocked:
        return blocked
    top, bottom = max(values["Modern"]), min(values["Baseline"])
    seeds = seed_counts(cells, needed, "min_mad")
    failed = [
        text
        for text, holds in (
            (f"Baseline {bottom:.3f} below {OTHER_BOUND.text}", OTHER_BOUND.at_or_above(bottom)),
            (f"Modern {top:.3f} above {CUTMIX_BOUND.text}", CUTMIX_BOUND.at_or_below(top)),
        )
        if not holds
    ]
    single = one_seed(cells, needed)
    if failed:
        judgement = Judgement(FAILS, top, bottom, "Modern", "Baseline", reason="; ".join(failed), seeds=seeds)
    elif single:
        reason = f"the fixed bounds hold; the comparison needs 2 seeds ({single})"
        judgement = Judgement(ONE_SEED, top, bottom, "Modern", "Baseline", reason=reason, seeds=seeds)
    else:
        judgement = Judgement(verdict(top < bottom - SLACK), top, bottom, "Modern", "Baseline", seeds=seeds)
    return uninformative(cells, needed, judgement)


def more_local_shown(cells: Mapping[str, Group], per: Level) -> str:
    """Claim (b)'s verdict as a table cell: the image side's, and the diagonal's beside it where the two differ."""
    side, diagonal = more_local(cells, per), more_local(cells, per, DIAGONAL)
    shown = shown_verdict(side)
    shown = f"{shown} ({side.reason})" if side.reason and side.verdict != HOLDS else shown
    return shown if diagonal.verdict == side.verdict else f"{shown} (over the diagonal: {shown_verdict(diagonal)})"


CUTMIX_CELLS = tuple(name for name in CELL_ORDER if CELL_FLAGS[name][1])
OTHER_CELLS = tuple(name for name in CELL_ORDER if not CELL_FLAGS[name][1])


def seed_counts(cells: Mapping[str, Group], needed: Sequence[str], figure: str) -> tuple[int, int]:
    """(fewest, most) runs with `figure` (min_mad, acc1) in a cell of `needed`: the seeds a verdict rests on."""
    counts = [len(cells[name].values(figure)) for name in needed if name in cells]
    return (min(counts), max(counts)) if counts else (0, 0)


def one_seed(cells: Mapping[str, Group], needed: Sequence[str]) -> str:
    """The cells of `needed` with a single run of min MAD ('Baseline, Modern: one run each'), or ''."""
    single = [name for name in needed if name in cells and len(cells[name].values("min_mad")) == 1]
    return f"{', '.join(single)}: one run each" if single else ""


def uninformative(cells: Mapping[str, Group], needed: Sequence[str], judgement: Judgement) -> Judgement:
    """Any verdict reached on the runs (holds, fails, one seed, undetermined) becomes NOT_INFORMATIVE when a run of
    a needed cell never left uniform attention: such a run is not the trained ViT the paper's claims are about, so
    neither a holding nor a failing figure says anything about them. The reason names those runs."""
    if judgement.verdict in (NOT_ENOUGH, NOT_COMPARABLE):
        return judgement
    uniform = [
        f"{name} seed {run.seed}" for name in needed if name in cells for run in cells[name].runs if still_uniform(run)
    ]
    return replace(judgement, verdict=NOT_INFORMATIVE, reason=", ".join(uniform)) if uniform else judgement


def _blocked(values: Mapping[str, list[float]], refused: Mapping[str, str], needed: Sequence[str]) -> Judgement | None:
    """Not comparable when a needed cell has a run that cannot be converted, else not enough runs when one is
    missing; None when every needed cell has comparable values."""
    reasons = [refused[name] for name in needed if name in refused]
    if reasons:
        return Judgement(NOT_COMPARABLE, math.nan, math.nan, reason="; ".join(reasons))
    missing = tuple(name for name in needed if name not in values)
    return Judgement(NOT_ENOUGH, math.nan, math.nan, missing=missing) if missing else None
