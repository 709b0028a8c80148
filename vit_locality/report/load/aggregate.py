"""Complete runs grouped by (data set, model, cell, settings) so every table, effect and figure counts the same runs:
pooled runs differ in their seed alone, and each trained run counts once, in the measurement asked for."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from vit_locality.catalog import CELL_ORDER
from vit_locality.report.load.measurement import (
    PAPER,
    MeasurementChoice,
    choose_measurements,
    lacks_measurement,
    others_note,
    unmatched_note,
)
from vit_locality.report.load.run_settings import (
    GroupKey,
    _canonical_identity,
    _not_a_measurement,
    group_key,
    run_settings,
    setting_notes,
    split_by_settings,
)
from vit_locality.store.record import RunRecord, RunScan, scan_records

# How a claim or a separation is judged: on every run, or on each cell's mean over its runs.
Level = Literal["run", "mean"]
LEVELS: tuple[Level, ...] = ("run", "mean")
UNITS_NOTE = "MAD in fractions of the image side (unit square), as every record stores it"


@dataclass(frozen=True)
class Stat:
    """Mean, sample standard deviation (NaN below 2 values) and count of the finite values."""

    mean: float
    std: float
    n: int


@dataclass
class Group:
    key: GroupKey
    runs: list[RunRecord] = field(default_factory=list)

    def values(self, figure: str) -> list[tuple[int, float]]:
        """(seed, value) for every run where the headline figure (`acc1`, `min_mad`, `entropy`) is known."""
        pairs = [(run.seed, getattr(run.headline(), figure)) for run in self.runs]
        return [(seed, value) for seed, value in pairs if math.isfinite(value)]

    def stat(self, figure: str) -> Stat:
        return summarise([value for _, value in self.values(figure)])

    @property
    def ls_values(self) -> list[float]:
        return sorted({run.protocol.ls for run in self.runs})


@dataclass
class Aggregate:
    groups: dict[GroupKey, Group]
    skipped: list[tuple[Path, str]]
    notes: list[str]

    def models(self) -> list[tuple[str, str]]:
        """Every (data set, model) pair present, sorted."""
        return sorted({(key.data, key.model) for key in self.groups})

    def variants(self, data: str, model: str) -> dict[str, list[Group]]:
        """Every group of one (data set, model) by cell name, in the paper's order, the cell's counted group first."""
        found: dict[str, list[Group]] = {}
        for key, group in self.groups.items():
            if (key.data, key.model) == (data, model):
                found.setdefault(key.cell, []).append(group)
        return {name: _counted_first(found[name], found) for name in CELL_ORDER if name in found}

    def cells(self, data: str, model: str) -> dict[str, Group]:
        """The group that stands for each paper cell of one (data set, model), in the paper's order."""
        return {name: groups[0] for name, groups in self.variants(data, model).items()}

    def left_out(self, data: str, model: str) -> list[Group]:
        """The groups `cells` leaves out: runs of a paper cell with other settings than its counted group."""
        return [group for groups in self.variants(data, model).values() for group in groups[1:]]


def summarise(values: Iterable[float]) -> Stat:
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        return Stat(math.nan, math.nan, 0)
    n, mean = len(finite), sum(finite) / len(finite)
    std = math.sqrt(sum((v - mean) ** 2 for v in finite) / (n - 1)) if n > 1 else math.nan
    return Stat(mean, std, n)


def _counted_first(groups: list[Group], cells: Mapping[str, list[Group]]) -> list[Group]:
    """A cell's groups, first the one agreeing most with the other cells' settings, then with most runs."""
    others = [run for name, found in cells.items() if name != groups[0].key.cell for g in found for run in g.runs]
    other_settings = [run_settings(run) for run in others]

    def agreement(group: Group) -> int:
        return sum(settings.get(key) == value for key, value in group.key.settings for settings in other_settings)

    return sorted(groups, key=lambda g: (-agreement(g), -len(g.runs), g.key.settings, g.key.protocol.ls))


def aggregate_runs(
    scan: RunScan,
    data: Iterable[str] | None = None,
    model: Iterable[str] | None = None,
    choice: MeasurementChoice = PAPER,
) -> Aggregate:
    """Group the complete runs of the wanted data sets and models (None: all) but debug, quick and duplicate ones,
    each trained run once and read in the measurement `choice` asks for (measurement.py)."""
    wanted_data = set(data) if data else None
    wanted_model = set(model) if model else None
    skipped = list(scan.skipped)
    candidates = []
    for run in scan.complete:
        key = group_key(run)
        if (wanted_data and key.data not in wanted_data) or (wanted_model and key.model not in wanted_model):
            continue
        if why := _not_a_measurement(run):
            skipped.append((run.run_dir, why))
            continue
        candidates.append(run)
    chosen = choose_measurements(candidates, choice)
    by_cell: dict[tuple[str, str, str], list[RunRecord]] = {}
    seen: dict[str, Path] = {}
    for run in chosen.runs:
        key = group_key(run)
        identity = run.identity_hash
        if identity and identity in seen:
            skipped.append((run.run_dir, f"duplicate of {seen[identity]} (same identity hash {identity})"))
            continue
        same_values = _canonical_identity(run)
        if same_values and same_values in seen:
            skipped.append((run.run_dir, f"duplicate of {seen[same_values]} (the same config and seed)"))
            continue
        seen.update({found: run.run_dir for found in (identity, same_values) if found})
        by_cell.setdefault((key.data, key.model, key.cell), []).append(run)
    groups: dict[GroupKey, Group] = {}
    for runs in by_cell.values():
        for settings, members in split_by_settings(runs).items():
            for run in members:
                key = group_key(run, settings)
                groups.setdefault(key, Group(key)).runs.append(run)
    agg = Aggregate(groups, skipped, [])
    agg.notes = _notes(agg, by_cell) + _measurement_notes(agg, chosen.others, choice)
    return agg


def aggregate(
    roots: list[Path],
    data: Iterable[str] | None = None,
    model: Iterable[str] | None = None,
    choice: MeasurementChoice = PAPER,
) -> Aggregate:
    """Collect every run under `roots` and group it; raises FileNotFoundError for a missing root."""
    return aggregate_runs(scan_records(roots), data, model, choice)


def _measurement_notes(
    agg: Aggregate, others: list[tuple[RunRecord, RunRecord]], choice: MeasurementChoice
) -> list[str]:
    """Which measurement the figures read (where not the paper's), the runs without it, and the records that hold
    other measurements of a run counted once."""
    labelled = [
        (f"{key.data}/{key.model}/{key.cell}", run)
        for key, group in sorted(agg.groups.items(), key=_in_paper_order)
        for run in group.runs
    ]
    read = None if choice == PAPER else f"attention figures read from each run's measurement with {choice.overrides}"
    return [note for note in (read, unmatched_note(labelled, choice), others_note(others)) if note]


def _in_paper_order(item: tuple[GroupKey, Group]) -> tuple[str, str, int, str, str]:
    """Groups by data set and model, then cells in the paper's order (any other cell after), then variant."""
    key = item[0]
    order = CELL_ORDER.index(key.cell) if key.cell in CELL_ORDER else len(CELL_ORDER)
    return key.data, key.model, order, key.cell, key.variant


def _notes(agg: Aggregate, by_cell: Mapping[tuple[str, str, str], list[RunRecord]]) -> list[str]:
    """Warnings: cells outside the paper's 8, cells split by a setting, groups left out, and doubtful groups."""
    notes = []
    groups = agg.groups
    if outside := sorted({f"{key.data}/{key.model}/{key.cell}" for key in groups if key.cell not in CELL_ORDER}):
        notes.append(f"cells outside the paper's 8, left out of its tables and analysis: {', '.join(outside)}")
    for (data, model, cell), runs in sorted(by_cell.items()):
        notes += setting_notes(f"{data}/{model}/{cell}", runs)
    for data, model in agg.models():
        for group in agg.left_out(data, model):
            counted = agg.cells(data, model)[group.key.cell].key.variant
            notes.append(
                f"{data}/{model}/{group.key.cell} [{group.key.variant}]: {len(group.runs)} run(s) left out of the"
                f" paper's cell, its claims and effects, which count [{counted}] (its own row in the ablation table)"
            )
    for key, group in sorted(groups.items(), key=lambda item: str(item[0])):
        label = f"{key.data}/{key.model}/{key.cell}" + (f" [{key.variant}]" if key.settings else "")
        seeds = [run.seed for run in group.runs]
        if len(set(seeds)) < len(seeds):
            notes.append(f"{label} has several runs with the same seed")
        measured_otherwise = all(lacks_measurement(run) for run in group.runs)  # said by _measurement_notes
        if not any(math.isfinite(run.headline().min_mad) for run in group.runs) and not measured_otherwise:
            notes.append(f"{label} has no attention statistics")
    return notes
