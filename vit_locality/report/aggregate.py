"""Group complete runs by (data set, model, AA, CM, LS) and reduce each headline figure over seeds.

Tables, the factorial analysis and the figures all read these groups, so every output counts the same runs.
Figures keep the record's units (accuracy a fraction); only the printed tables scale them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..domain import CELL_NAMES, CELL_ORDER
from ..results import RunRecord, RunScan, scan_records


@dataclass(frozen=True)
class GroupKey:
    data: str
    model: str
    autoaug: bool
    cutmix: bool
    ls: float

    @property
    def flags(self) -> tuple[bool, bool, bool]:
        """(AA, CM, LS on): the factorial coordinates of the cell."""
        return (self.autoaug, self.cutmix, self.ls > 0)

    @property
    def cell(self) -> str:
        return CELL_NAMES[self.flags]


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
        return sorted({run.flags[2] for run in self.runs})


@dataclass
class Aggregate:
    groups: dict[GroupKey, Group]
    skipped: list[tuple[Path, str]]
    notes: list[str]

    def models(self) -> list[tuple[str, str]]:
        """Every (data set, model) pair present, sorted."""
        return sorted({(key.data, key.model) for key in self.groups})

    def cells(self, data: str, model: str) -> dict[str, Group]:
        """The groups of one (data set, model) by cell name, in the paper's order.

        Groups that only differ in the label-smoothing value (0.1 and 0.2, say) fall in the same cell; they are
        pooled and a note says so, rather than one silently hiding the other."""
        merged: dict[str, Group] = {}
        for key, group in sorted(self.groups.items(), key=lambda item: item[0].ls):
            if (key.data, key.model) != (data, model):
                continue
            if key.cell in merged:
                merged[key.cell] = Group(merged[key.cell].key, merged[key.cell].runs + group.runs)
            else:
                merged[key.cell] = group
        return {name: merged[name] for name in CELL_ORDER if name in merged}


def summarise(values: Iterable[float]) -> Stat:
    finite = [float(v) for v in values if math.isfinite(v)]
    n = len(finite)
    if n == 0:
        return Stat(math.nan, math.nan, 0)
    mean = sum(finite) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in finite) / (n - 1)) if n > 1 else math.nan
    return Stat(mean, std, n)


def group_key(run: RunRecord) -> GroupKey:
    autoaug, cutmix, ls = run.flags
    return GroupKey(data=run.data_name, model=run.model_name, autoaug=autoaug, cutmix=cutmix, ls=ls)


def aggregate_runs(scan: RunScan, data: Iterable[str] | None = None, model: Iterable[str] | None = None) -> Aggregate:
    """Group the complete runs, keeping only the wanted data sets and models (None: all).

    A run is skipped, with the reason, when it is the same run (same identity hash: same config and seed) as one
    already counted, e.g. a sweep copied twice."""
    wanted_data = set(data) if data else None
    wanted_model = set(model) if model else None
    groups: dict[GroupKey, Group] = {}
    skipped = list(scan.skipped)
    seen: dict[str, Path] = {}
    for run in scan.complete:
        key = group_key(run)
        if (wanted_data and key.data not in wanted_data) or (wanted_model and key.model not in wanted_model):
            continue
        identity = run.identity_hash
        if identity and identity in seen:
            skipped.append((run.run_dir, f"duplicate of {seen[identity]} (same identity hash {identity})"))
            continue
        if identity:
            seen[identity] = run.run_dir
        groups.setdefault(key, Group(key)).runs.append(run)
    return Aggregate(groups, skipped, _notes(groups))


def aggregate(roots: list[Path], data: Iterable[str] | None = None, model: Iterable[str] | None = None) -> Aggregate:
    """Collect every run under `roots` and group it; raises FileNotFoundError for a missing root."""
    return aggregate_runs(scan_records(roots), data, model)


def _notes(groups: dict[GroupKey, Group]) -> list[str]:
    """Warnings about groups that pool runs which may not be comparable."""
    notes = []
    ls_by_cell: dict[tuple[str, str, str], list[float]] = {}
    for key in groups:
        ls_by_cell.setdefault((key.data, key.model, key.cell), []).append(key.ls)
    for (data, model, cell), values in sorted(ls_by_cell.items()):
        if len(values) > 1:
            shown = ", ".join(f"{v:g}" for v in sorted(values))
            notes.append(f"{data}/{model}/{cell} pools runs with different label smoothing: {shown}")
    for key, group in sorted(groups.items(), key=lambda item: str(item[0])):
        label = f"{key.data}/{key.model}/{key.cell} (ls={key.ls:g})"
        epochs = sorted({str(run.epochs) for run in group.runs})
        if len(epochs) > 1:
            notes.append(f"{label} pools runs trained for different epochs: {', '.join(epochs)}")
        units = sorted({run.stats_units for run in group.runs if run.final_attention})
        if len(units) > 1:
            notes.append(f"{label} pools MAD in different units: {', '.join(units)}")
        seeds = [run.seed for run in group.runs]
        if len(set(seeds)) < len(seeds):
            notes.append(f"{label} has several runs with the same seed")
        if not any(math.isfinite(run.headline().min_mad) for run in group.runs):
            notes.append(f"{label} has no attention statistics")
    return notes


def slug(text: str) -> str:
    """A file-name-safe form of data set and model names."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)
