"""Group complete runs by (data set, model, AA, CM, LS) and reduce each figure over seeds.

Tables, the factorial analysis and the figures all read these groups, so every output counts the same runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .collect import CELL_NAMES, CELL_ORDER, RunCollection, collect_runs

# The three headline figures of a run. Accuracy is in percent (results.json stores a fraction), the paper's unit.
FIGURES = {
    "acc1": "top-1 test accuracy (%)",
    "min_mad": "minimum early-layer MAD",
    "entropy": "mean early-layer entropy",
}


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
    runs: list[dict[str, Any]] = field(default_factory=list)

    def values(self, figure: str) -> list[tuple[Any, float]]:
        """(seed, value) for every run where the figure is known."""
        pairs = [(run["seed"], run_figures(run)[figure]) for run in self.runs]
        return [(seed, value) for seed, value in pairs if math.isfinite(value)]

    def stat(self, figure: str) -> Stat:
        return summarise([value for _, value in self.values(figure)])

    @property
    def ls_values(self) -> list[float]:
        return sorted({float(run["protocol"]["ls"]) for run in self.runs})


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


def run_figures(run: dict[str, Any]) -> dict[str, float]:
    """The headline figures of one run; NaN where the run did not record it (no attention statistics)."""
    final = (run.get("attention") or {}).get("final") or {}
    return {
        "acc1": _number(run.get("metrics", {}).get("test/acc1")) * 100.0,
        "min_mad": _number(final.get("min_mad_early")),
        "entropy": _number(final.get("mean_entropy_early")),
    }


def early_layers(run: dict[str, Any], default: int = 2) -> int:
    """How many early layers the run's own headline figures used (recorded in results.json)."""
    final = (run.get("attention") or {}).get("final") or {}
    return int(final.get("early_layers", default))


def group_key(run: dict[str, Any]) -> GroupKey:
    """Raises KeyError, TypeError or ValueError on a malformed record."""
    protocol = run["protocol"]
    return GroupKey(
        data=str(run["data"]["name"]),
        model=str(run["model"]["name"]),
        autoaug=bool(protocol["autoaug"]),
        cutmix=bool(protocol["cutmix"]),
        ls=float(protocol["ls"]),
    )


def aggregate_runs(
    collection: RunCollection, data: Iterable[str] | None = None, model: Iterable[str] | None = None
) -> Aggregate:
    """Group the complete runs, keeping only the wanted data sets and models (None: all).

    A run is skipped, with the reason, when its record lacks what the grouping needs, or when it is the
    same run (same identity hash: same config and seed) as one already counted, e.g. a sweep copied twice."""
    wanted_data = set(data) if data else None
    wanted_model = set(model) if model else None
    groups: dict[GroupKey, Group] = {}
    skipped = list(collection.skipped)
    seen: dict[str, str] = {}
    for run in collection.complete:
        run_dir = Path(run["run_dir"])
        try:
            key = group_key(run)
            if "seed" not in run:
                raise KeyError("seed")
        except (KeyError, TypeError, ValueError) as error:
            skipped.append((run_dir, f"results.json lacks {error!s} (malformed record)"))
            continue
        if (wanted_data and key.data not in wanted_data) or (wanted_model and key.model not in wanted_model):
            continue
        identity = run.get("identity_hash")
        if identity and identity in seen:
            skipped.append((run_dir, f"duplicate of {seen[identity]} (same identity hash {identity})"))
            continue
        if identity:
            seen[identity] = str(run_dir)
        groups.setdefault(key, Group(key)).runs.append(run)
    return Aggregate(groups, skipped, _notes(groups))


def aggregate(roots: list[Path], data: Iterable[str] | None = None, model: Iterable[str] | None = None) -> Aggregate:
    """Collect every run under `roots` and group it; raises FileNotFoundError for a missing root."""
    return aggregate_runs(collect_runs(roots), data, model)


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
        epochs = sorted({str(run.get("epochs")) for run in group.runs})
        if len(epochs) > 1:
            notes.append(f"{label} pools runs trained for different epochs: {', '.join(epochs)}")
        units = sorted({str(_settings(run).get("units", "unit")) for run in group.runs if _settings(run)})
        if len(units) > 1:
            notes.append(f"{label} pools MAD in different units: {', '.join(units)}")
        seeds = [run["seed"] for run in group.runs]
        if len(set(map(str, seeds))) < len(seeds):
            notes.append(f"{label} has several runs with the same seed")
        if not any(math.isfinite(run_figures(run)["min_mad"]) for run in group.runs):
            notes.append(f"{label} has no attention statistics")
    return notes


def slug(text: str) -> str:
    """A file-name-safe form of data set and model names."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def _settings(run: dict[str, Any]) -> dict[str, Any]:
    return ((run.get("attention") or {}).get("final") or {}).get("settings") or {}


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
