"""The paper's claims, each judged on the runs of one (data set, model) by a rule stated in docs/metrics.md: (a)
`_ablation_bounds`, (b) `more_local`, (c) `gain`, (d) `keeps_locality`; per run and per cell mean, in both
conventions, every verdict with the seeds it rests on."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_UP, Decimal

from vit_locality.catalog import CELL_FLAGS, CELL_ORDER
from vit_locality.report.load.aggregate import LEVELS, Group, Level, summarise
from vit_locality.report.stats.claim_units import CONVENTIONS, DIAGONAL, GRID_SIDE, paper_value, still_uniform
from vit_locality.report.stats.effects import EQUIVALENT, stays_at_baseline
from vit_locality.report.stats.effects import UNDETERMINED as NOT_DECIDED

DIGITS = {"acc1": 2, "min_mad": 3, "entropy": 3}
# Printed tables show accuracy in percent, the paper's unit; the CSVs keep the record's fraction.
SHOWN_SCALE = {"acc1": 100.0, "min_mad": 1.0, "entropy": 1.0}
HOLDS, FAILS, NOT_ENOUGH = "holds", "fails", "not enough runs"
UNDETERMINED, NOT_COMPARABLE = "undetermined", "not comparable"
ONE_SEED = "one seed: no verdict"
NOT_INFORMATIVE = "not informative: attention still uniform"
SLACK = 1e-9  # comparisons of two measured values only
# Significant digits a figure is read to before it is rounded to a bound's precision: float32's FLT_DIG, so a
# half-way value (0.0245) that float64 conversions turn into 0.024499999359 or 0.02450000001 rounds alike everywhere.
FIGURE_DIGITS = 6


@dataclass(frozen=True)
class Bound:
    """A bound as printed: a figure is read to FIGURE_DIGITS significant digits, then rounded half up to the decimals
    of `text`, so a value that prints as the bound is at it (0.0245 is above 0.024; 0.2095 is at 0.210)."""

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
PAPER_MIN_MAD = {"cifar100": (0.316, 0.008)}  # Baseline, Modern
CUTMIX_CELLS = tuple(name for name in CELL_ORDER if CELL_FLAGS[name][1])
OTHER_CELLS = tuple(name for name in CELL_ORDER if not CELL_FLAGS[name][1])
_GAIN = "about 6-7 points of top-1 over Baseline (at least 5)"
_STAYS = "stays at Baseline's min MAD (equivalence test, margin max(0.02, 2 x Baseline's seed std))"
_SEPARATES = "(a) CutMix separates locality: every CutMix value below every other"
# key -> (statement, the paper's figure, the headline figure judged, how the measured figure reads)
ABLATION_CLAIMS = {
    "a_cutmix_local": ("(a) every CutMix cell at or below 0.024 min MAD", "<= 0.024", "min_mad", "max"),
    "a_other_not_local": ("(a) every non-CutMix cell at or above 0.210 min MAD", ">= 0.210", "min_mad", "min"),
    "a_separation": (_SEPARATES, "0.024 below 0.210", "min_mad", "versus"),
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
    """A verdict as a table cell, with the seeds it rests on ("holds, 1 seed", "fails, 2-3 seeds")."""
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
        verdicts = self.judgements
        return tuple(per for per in LEVELS if verdicts[GRID_SIDE, per].verdict != verdicts[DIAGONAL, per].verdict)


def measured(claim: Claim, judgement: Judgement) -> str:
    """The figure a verdict was reached on, as printed, or why the claim could not be judged."""
    if judgement.verdict == NOT_ENOUGH:
        return f"missing {', '.join(judgement.missing)}"
    if judgement.verdict == NOT_COMPARABLE:
        return judgement.reason
    digits = DIGITS[claim.figure]
    value, bound = SHOWN_SCALE[claim.figure] * judgement.value, SHOWN_SCALE[claim.figure] * judgement.bound
    if claim.style == "gain":
        return f"{value:+.{digits}f}"
    if claim.style == "equivalence":
        if math.isnan(value):
            return judgement.reason
        low, high = judgement.interval
        shown = f"{value:+.{digits}f}, 90% [{low:+.{digits}f}, {high:+.{digits}f}] (margin {bound:.{digits}f})"
        return f"{shown}; {judgement.reason}" if judgement.verdict in (UNDETERMINED, NOT_INFORMATIVE) else shown
    shown = f"{value:.{digits}f} ({judgement.value_cell})"
    shown = f"{shown} vs {bound:.{digits}f} ({judgement.bound_cell})" if claim.style == "versus" else shown
    return f"{shown}; {judgement.reason}" if judgement.verdict in (ONE_SEED, NOT_INFORMATIVE) else shown


def verdict(holds: bool) -> str:
    return HOLDS if holds else FAILS


def mad_values(
    cells: Mapping[str, Group], per: Level, convention: str = GRID_SIDE
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """({cell: its runs' min MAD in the paper's convention, or their mean}, {cell: why a run is not comparable})."""
    factor = CONVENTIONS[convention]
    found: dict[str, list[float]] = {}
    refused: dict[str, str] = {}
    for name, group in cells.items():
        papers = [(run, paper_value(run)) for run in group.runs if run.final_attention]
        if why := next((f"{name} seed {run.seed}: {p.reason}" for run, p in papers if not p.comparable), None):
            refused[name] = why
        elif papers:
            found[name] = _at_level([factor * p.value for _, p in papers], per)
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
    """Claim (a): the highest CutMix value <= 0.024, the lowest other value >= 0.210, and the first below the second."""
    values, refused = mad_values(cells, per, convention)
    if blocked := _blocked(values, refused, CELL_ORDER):
        return (blocked,) * 3
    cutmix = [(v, name) for name, vs in values.items() if CELL_FLAGS[name][1] for v in vs]
    other = [(v, name) for name, vs in values.items() if not CELL_FLAGS[name][1] for v in vs]
    (top, top_cell), (bottom, bottom_cell) = max(cutmix, key=lambda p: p[0]), min(other, key=lambda p: p[0])
    single = one_seed(cells, CELL_ORDER)
    seeds = seed_counts(cells, CELL_ORDER, "min_mad")
    separated = Judgement(verdict(top < bottom - SLACK), top, bottom, top_cell, bottom_cell, seeds=seeds)
    return (
        Judgement(verdict(CUTMIX_BOUND.at_or_below(top)), top, CUTMIX_BOUND.value, top_cell, seeds=seeds),
        Judgement(verdict(OTHER_BOUND.at_or_above(bottom)), bottom, OTHER_BOUND.value, bottom_cell, seeds=seeds),
        replace(separated, verdict=ONE_SEED, reason=single) if single else separated,
    )


def gain(cells: Mapping[str, Group], cell: str, per: Level) -> Judgement:
    """Claim (c) for one cell: its top-1 gain over Baseline (the lowest pairwise gain per run) >= 5 points."""
    values = {name: _at_level(acc, per) for name, g in cells.items() if (acc := [v for _, v in g.values("acc1")])}
    if blocked := _blocked(values, {}, ("Baseline", cell)):
        return blocked
    lowest = min(x - y for x in values[cell] for y in values["Baseline"])
    seeds = seed_counts(cells, ("Baseline", cell), "acc1")
    holds = verdict(GAIN_BOUND.at_or_above(100 * lowest))
    return Judgement(holds, lowest, GAIN_BOUND.value / 100, cell, "Baseline", seeds=seeds)


def keeps_locality(cells: Mapping[str, Group], cell: str, convention: str = GRID_SIDE) -> Judgement:
    """Claim (d) for one cell: the equivalence test on unit-square values, shown in `convention`'s units."""
    needed = ("Baseline", cell, "+CM")
    values, refused = mad_values(cells, "run", GRID_SIDE)
    if blocked := _blocked(values, refused, needed):
        return blocked
    test = stays_at_baseline(values[cell], values["Baseline"], values["+CM"])
    outcome = UNDETERMINED if test.outcome == NOT_DECIDED else verdict(test.outcome == EQUIVALENT)
    f, seeds = CONVENTIONS[convention], seed_counts(cells, needed, "min_mad")
    interval = (f * test.low, f * test.high)
    return Judgement(outcome, f * test.difference, f * test.margin, cell, "Baseline", (), test.reason, interval, seeds)


def more_local(cells: Mapping[str, Group], per: Level, convention: str = GRID_SIDE) -> Judgement:
    """Claim (b): the lowest Baseline value at or above 0.210, the highest Modern value at or below 0.024, and the
    second below the first. A failed bound fails the claim on any number of seeds; only the comparison needs 2."""
    needed = ("Baseline", "Modern")
    values, refused = mad_values(cells, per, convention)
    if blocked := _blocked(values, refused, needed):
        return blocked
    top, bottom = max(values["Modern"]), min(values["Baseline"])
    failed = []
    if not OTHER_BOUND.at_or_above(bottom):
        failed.append(f"Baseline {bottom:.3f} below {OTHER_BOUND.text}")
    if not CUTMIX_BOUND.at_or_below(top):
        failed.append(f"Modern {top:.3f} above {CUTMIX_BOUND.text}")
    single = one_seed(cells, needed)
    seeds = seed_counts(cells, needed, "min_mad")
    judgement = Judgement(verdict(top < bottom - SLACK), top, bottom, "Modern", "Baseline", seeds=seeds)
    if failed:
        judgement = replace(judgement, verdict=FAILS, reason="; ".join(failed))
    elif single:
        reason = f"the fixed bounds hold; the comparison needs 2 seeds ({single})"
        judgement = replace(judgement, verdict=ONE_SEED, reason=reason)
    return uninformative(cells, needed, judgement)


def more_local_shown(cells: Mapping[str, Group], per: Level) -> str:
    """Claim (b)'s verdict as a table cell: the image side's, and the diagonal's beside it where the two differ."""
    side, diagonal = more_local(cells, per), more_local(cells, per, DIAGONAL)
    shown = shown_verdict(side)
    shown = f"{shown} ({side.reason})" if side.reason and side.verdict != HOLDS else shown
    return shown if diagonal.verdict == side.verdict else f"{shown} (over the diagonal: {shown_verdict(diagonal)})"


def seed_counts(cells: Mapping[str, Group], needed: Sequence[str], figure: str) -> tuple[int, int]:
    """(fewest, most) runs with `figure` (min_mad, acc1) in a cell of `needed`: the seeds a verdict rests on."""
    counts = [len(cells[name].values(figure)) for name in needed if name in cells]
    return (min(counts), max(counts)) if counts else (0, 0)


def one_seed(cells: Mapping[str, Group], needed: Sequence[str]) -> str:
    """The cells of `needed` with a single run of min MAD ('Baseline, Modern: one run each'), or ''."""
    single = [name for name in needed if name in cells and len(cells[name].values("min_mad")) == 1]
    return f"{', '.join(single)}: one run each" if single else ""


def uninformative(cells: Mapping[str, Group], needed: Sequence[str], judgement: Judgement) -> Judgement:
    """NOT_INFORMATIVE, naming the runs, when a run of a needed cell never left uniform attention."""
    if judgement.verdict in (NOT_ENOUGH, NOT_COMPARABLE):
        return judgement
    uniform = [
        f"{name} seed {run.seed}" for name in needed if name in cells for run in cells[name].runs if still_uniform(run)
    ]
    return replace(judgement, verdict=NOT_INFORMATIVE, reason=", ".join(uniform)) if uniform else judgement


def _blocked(values: Mapping[str, list[float]], refused: Mapping[str, str], needed: Sequence[str]) -> Judgement | None:
    """NOT_COMPARABLE when a needed cell was refused, else NOT_ENOUGH when one is missing; None when all are there."""
    if reasons := [refused[name] for name in needed if name in refused]:
        return Judgement(NOT_COMPARABLE, math.nan, math.nan, reason="; ".join(reasons))
    missing = tuple(name for name in needed if name not in values)
    return Judgement(NOT_ENOUGH, math.nan, math.nan, missing=missing) if missing else None
