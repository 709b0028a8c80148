"""Group complete runs by (data set, model, AA, CM, LS) and reduce each headline figure over seeds.

Tables, the factorial analysis and the figures all read these groups, so every output counts the same runs.
Figures keep the record's units (accuracy a fraction); only the printed tables scale them.

Pooling is only honest when the pooled runs differ in their seed alone, so the aggregate leaves out quick runs
(a limited or fast-dev run is not a measurement of the cell) and warns, one note per (cell, setting), when the
runs of a cell were recorded with different settings (their `config`, less what cannot change a result).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from vit_locality.catalog import CELL_ORDER
from vit_locality.config.identity import NOT_IDENTITY
from vit_locality.protocol import Protocol
from vit_locality.run.record import RunRecord, RunScan, scan_records

# How a claim or a separation is judged: on every run, or on each cell's mean over its runs.
Level = Literal["run", "mean"]
LEVELS: tuple[Level, ...] = ("run", "mean")
# Settings that may differ between the runs of one cell without a note: the seed, what cannot change a result
# (identity.NOT_IDENTITY), and what a dedicated note already reports (label smoothing, MAD units, epochs).
NOT_COMPARED = ("seed", *NOT_IDENTITY, "loss.ls", "stats.units", "trainer.max_epochs")


@dataclass(frozen=True)
class GroupKey:
    """A group of runs: data set, model and the protocol's grouped fields (Protocol.group_key)."""

    data: str
    model: str
    protocol: Protocol

    @property
    def ls(self) -> float:
        return self.protocol.ls

    @property
    def flags(self) -> tuple[bool, bool, bool]:
        """(AA, CM, LS on): the factorial coordinates of the cell."""
        return self.protocol.flags

    @property
    def cell(self) -> str:
        return self.protocol.cell_name


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


def cell_values(cells: Mapping[str, Group], figure: str, per: Level) -> dict[str, list[float]]:
    """Each cell's values of `figure`: every run's (`per="run"`) or the cell's mean alone (`per="mean"`).

    Cells without a finite value are left out, so a claim can tell a missing cell from a measured one. Claims are
    written once over these lists: a max over the lists is the highest run, or the highest cell mean."""
    found: dict[str, list[float]] = {}
    for name, group in cells.items():
        values = [value for _, value in group.values(figure)]
        if values:
            found[name] = values if per == "run" else [summarise(values).mean]
    return found


def summarise(values: Iterable[float]) -> Stat:
    finite = [float(v) for v in values if math.isfinite(v)]
    n = len(finite)
    if n == 0:
        return Stat(math.nan, math.nan, 0)
    mean = sum(finite) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in finite) / (n - 1)) if n > 1 else math.nan
    return Stat(mean, std, n)


def group_key(run: RunRecord) -> GroupKey:
    return GroupKey(data=run.data_name, model=run.model_name, protocol=run.protocol.group_key())


def aggregate_runs(scan: RunScan, data: Iterable[str] | None = None, model: Iterable[str] | None = None) -> Aggregate:
    """Group the complete runs, keeping only the wanted data sets and models (None: all).

    A run is skipped, with the reason, when it is a quick run (`quick_run`), or the same run (same identity hash:
    same config and seed) as one already counted, e.g. a sweep copied twice."""
    wanted_data = set(data) if data else None
    wanted_model = set(model) if model else None
    groups: dict[GroupKey, Group] = {}
    skipped = list(scan.skipped)
    seen: dict[str, Path] = {}
    for run in scan.complete:
        key = group_key(run)
        if (wanted_data and key.data not in wanted_data) or (wanted_model and key.model not in wanted_model):
            continue
        quick = quick_run(run)
        if quick:
            skipped.append((run.run_dir, f"a quick run ({quick}), not counted"))
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
    """Warnings about groups that pool runs which may not be comparable, and about cells the paper's tables leave
    out (a protocol knob beyond its three, e.g. `aug.mixup`)."""
    notes = []
    outside = sorted({f"{key.data}/{key.model}/{key.cell}" for key in groups if key.cell not in CELL_ORDER})
    if outside:
        notes.append(f"cells outside the paper's 8, left out of its tables and analysis: {', '.join(outside)}")
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
    runs_by_cell: dict[tuple[str, str, str], list[RunRecord]] = {}
    for key, group in groups.items():
        runs_by_cell.setdefault((key.data, key.model, key.cell), []).extend(group.runs)
    for (data, model, cell), runs in sorted(runs_by_cell.items()):
        notes += setting_notes(f"{data}/{model}/{cell}", runs)
    return notes


def quick_run(run: RunRecord) -> str | None:
    """The settings that make `run` a quick check rather than a measurement (`trainer.limit_train_batches=1`), or
    None. Quick: a `trainer.limit_*_batches` set (not null; the float 1.0, the whole set, does not count),
    `trainer.overfit_batches` above 0, `trainer.fast_dev_run` true or a positive count, `trainer.max_steps` set
    (not null and not -1). A run that records no config is not judged quick."""
    trainer = (run.config or {}).get("trainer")
    if not isinstance(trainer, dict):
        return None
    found = []
    for key in ("limit_train_batches", "limit_val_batches", "limit_test_batches"):
        value = trainer.get(key)
        if value is not None and not (isinstance(value, float) and value == 1.0):
            found.append((key, value))
    overfit = trainer.get("overfit_batches")
    if isinstance(overfit, int | float) and not isinstance(overfit, bool) and overfit > 0:
        found.append(("overfit_batches", overfit))
    fast = trainer.get("fast_dev_run")
    if fast is True or (isinstance(fast, int | float) and not isinstance(fast, bool) and fast > 0):
        found.append(("fast_dev_run", fast))
    steps = trainer.get("max_steps")
    if steps is not None and steps != -1:
        found.append(("max_steps", steps))
    return ", ".join(f"trainer.{key}={_shown(value)}" for key, value in found) or None


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys -> leaf values (lists are leaves), so two runs compare key by key."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flat_config(value, dotted))
        else:
            flat[dotted] = value
    return flat


def setting_notes(label: str, runs: list[RunRecord]) -> list[str]:
    """One line per setting in which the runs of one cell differ (besides NOT_COMPARED), naming each value and the
    seeds that ran with it; a key one run lacks shows as `unset`. Runs that record no config cannot be compared,
    which a line says when the cell has others that do."""
    configs = [(run, flat_config(run.config)) for run in runs if run.config is not None]
    notes = []
    if configs and len(configs) < len(runs):
        unrecorded = len(runs) - len(configs)
        notes.append(f"{label}: {unrecorded} of {len(runs)} runs record no config; their settings are not compared")
    keys = sorted({key for _, flat in configs for key in flat if not _covered(key, NOT_COMPARED)})
    for key in keys:
        seeds_by_value: dict[str, list[int]] = {}
        for run, flat in configs:
            shown = _shown(flat[key]) if key in flat else "unset"
            seeds_by_value.setdefault(shown, []).append(run.seed)
        if len(seeds_by_value) > 1:
            values = "; ".join(
                f"{value} (seed{'s' if len(seeds) > 1 else ''} {', '.join(str(s) for s in sorted(seeds))})"
                for value, seeds in sorted(seeds_by_value.items())
            )
            notes.append(f"{label} pools runs that differ in {key}: {values}")
    return notes


def _covered(key: str, prefixes: Iterable[str]) -> bool:
    """`key` is one of `prefixes` or lies below one (a prefix covers everything under it)."""
    return any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)


def _shown(value: Any) -> str:
    """A setting's value as a note prints it: strings bare, everything else as JSON (true, null, [0.9, 0.999])."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def slug(text: str) -> str:
    """A file-name-safe form of data set and model names."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)
