"""Which of a run's final measurements a report reads, and which record stands for a trained run (docs/reports.md):
one trained run may hold several measurements, in one record (`attention.remeasured`) or, from the previous release,
in several directories; each is counted once, as a view whose `attention.final` is the measurement chosen."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vit_locality.config.identity import MEASUREMENT_SECTION, covered_by_not_identity, record_training_identity
from vit_locality.config.schema import StatsConfig
from vit_locality.report.load.run_settings import _canonical_identity
from vit_locality.store.record import REMEASURED, RunRecord, measurements

# The record's keys as run/remeasure.py writes them (not imported: that module loads torch and Lightning).
FINAL = "final"
# What belongs to the measurement made when training ended: a view that reads another leaves them out.
TRAINING_ONLY = (FINAL, "initial", "noise_band", "csv")
# The view's mark under `attention`, set only where it reads another measurement than `final`: what it reads
# (`remeasured`, with the entry's `at`) or, where the run holds none that fits, `none`.
READ = "report_reads"
NONE_FITS = "none"
_PAPER = StatsConfig()  # conf/stats/default.yaml's values: the paper's measurement
KEYS = ("probe_size", "renormalize", "early_layers")


@dataclass(frozen=True)
class MeasurementChoice:
    """The final measurement a report reads of each run; the paper's by default. Renormalisation must always match;
    the probe size and the early layers (`asked`: given on the command line) must match where asked, else preferred."""

    renormalize: bool = _PAPER.renormalize
    probe_size: int = _PAPER.probe_size
    early_layers: int = _PAPER.early_layers
    asked: frozenset[str] = frozenset()

    @classmethod
    def from_options(
        cls, raw_attention: bool = False, probe_size: int | None = None, early_layers: int | None = None
    ) -> MeasurementChoice:
        """The choice the report's options give (None: not given)."""
        given = {"renormalize": False if raw_attention else None, "probe_size": probe_size}
        given["early_layers"] = early_layers
        values = {key: value for key, value in given.items() if value is not None}
        return replace(cls(), **values, asked=frozenset(values))

    def required(self, key: str) -> bool:
        return key == "renormalize" or key in self.asked

    @property
    def overrides(self) -> str:
        """The cell's overrides that measure it so (`stats.probe_size=512 stats.renormalize=true ...`)."""
        shown = lambda value: json.dumps(value) if isinstance(value, bool) else str(value)
        return " ".join(f"{MEASUREMENT_SECTION}.{key}={shown(getattr(self, key))}" for key in KEYS)


PAPER = MeasurementChoice()


def _stated(record: Mapping[str, Any], summary: Mapping[str, Any], training: bool) -> dict[str, Any]:
    """A measurement's settings as recorded; the training one falls back on the record's config, which set them."""
    settings = summary.get("settings") or {}
    config = ((record.get("config") or {}).get(MEASUREMENT_SECTION) or {}) if training else {}
    stated = {key: settings.get(key, config.get(key)) for key in ("renormalize", "probe_size")}
    stated["early_layers"] = summary.get("early_layers", config.get("early_layers", _PAPER.early_layers))
    return {**stated, "probe_images": summary.get("probe_images")}


def _fits(
    record: Mapping[str, Any], summary: Mapping[str, Any], training: bool, choice: MeasurementChoice
) -> dict[str, bool | None]:
    """Per setting, whether the measurement has the chosen value: True, False, or None where the record is silent."""
    stated = _stated(record, summary, training)
    eval_images = (record.get("measured_on") or {}).get("eval_images")
    probe = min(choice.probe_size, eval_images) if isinstance(eval_images, int) else choice.probe_size
    same_probe = stated["probe_size"] == choice.probe_size or stated["probe_images"] == probe
    renormalize = None if stated["renormalize"] is None else stated["renormalize"] is choice.renormalize
    same_early = stated["early_layers"] == choice.early_layers
    return {"renormalize": renormalize, "probe_size": same_probe, "early_layers": same_early}


def _acceptable(fits: Mapping[str, bool | None], choice: MeasurementChoice) -> bool:
    """Every required setting matches; a record silent on renormalisation reads as renormalised, as it always did
    (the claims then call it not comparable, saying why)."""
    silent = fits["renormalize"] is None and choice.renormalize
    return all(fits[key] or (key == "renormalize" and silent) for key in KEYS if choice.required(key))


def chosen_index(record: Mapping[str, Any], choice: MeasurementChoice) -> tuple[int, int | None]:
    """(how well the record fits: 0 exactly, 1 in what is required, 2 not at all; the index in `measurements` of the
    measurement read, the training one where it fits as well as any, or None)."""
    ranked = []
    for index, summary in enumerate(measurements(record)):
        fits = _fits(record, summary, index == 0, choice)
        if _acceptable(fits, choice):
            ranked.append((0 if all(fits.values()) else 1, index))
    return min(ranked) if ranked else (2, None)


def measured_view(run: RunRecord, index: int | None) -> RunRecord:
    """The run as a report reads it: `attention.final` is its measurement `index` (the training one: the run as it
    is), or none at all; a view of a measurement made since drops the initial pair, the noise band and the CSV's
    name, which belong to the training one."""
    if index == 0:
        return run
    attention = {key: value for key, value in (run.data.get("attention") or {}).items() if key not in TRAINING_ONLY}
    if index is None:
        attention[READ] = NONE_FITS
    else:
        entry = measurements(run.data)[index]
        attention |= {FINAL: entry, READ: f"{REMEASURED} {entry.get('at', '')}".strip()}
    return replace(run, data={**run.data, "attention": attention})


def reads_training_measurement(run: RunRecord) -> bool:
    """Whether the view reads the measurement made when training ended, to which attention_stats.csv belongs."""
    return READ not in (run.data.get("attention") or {})


def lacks_measurement(run: RunRecord) -> bool:
    """Whether the view holds no measurement that fits the choice (its accuracy still counts)."""
    return (run.data.get("attention") or {}).get(READ) == NONE_FITS


@dataclass
class Chosen:
    """One view per trained run (true duplicates, the same record twice, kept after it for the caller to list), and
    the records set aside as other measurements of a run counted once, each with the run that stands for it."""

    runs: list[RunRecord] = field(default_factory=list)
    others: list[tuple[RunRecord, RunRecord]] = field(default_factory=list)


def choose_measurements(runs: Iterable[RunRecord], choice: MeasurementChoice = PAPER) -> Chosen:
    """The runs with the chosen measurement: records of one trained run (one training identity, or one cell, seed and
    settings) stand for it once, the one holding the chosen measurement first (in `final`, then in `remeasured`)."""
    chosen = Chosen()
    for bundle in trained_runs(runs):
        ranked = sorted(enumerate(bundle), key=lambda item: (*_rank(item[1], choice), item[0]))
        best = ranked[0][1]
        index = chosen_index(best.data, choice)[1]
        chosen.runs.append(measured_view(best, index))
        for _, other in ranked[1:]:
            if _measurement_key(other) == _measurement_key(best):  # a copy of the record, not a variant
                chosen.runs.append(measured_view(other, chosen_index(other.data, choice)[1]))
            else:
                chosen.others.append((other, best))
    return chosen


def _rank(run: RunRecord, choice: MeasurementChoice) -> tuple[int, int]:
    """How well a record of a trained run fits: exactly before in what is required; `final` before `remeasured`."""
    fit, index = chosen_index(run.data, choice)
    return fit, 0 if index == 0 else 1


def _measurement_key(run: RunRecord) -> str:
    stats = ((run.config or {}).get(MEASUREMENT_SECTION)) or {}
    config = {k: v for k, v in stats.items() if not covered_by_not_identity(f"{MEASUREMENT_SECTION}.{k}")}
    held = [_stated(run.data, summary, i == 0) for i, summary in enumerate(measurements(run.data))]
    return json.dumps([config, held], sort_keys=True, default=str)


def trained_runs(runs: Iterable[RunRecord]) -> list[list[RunRecord]]:
    """The runs bundled by what they trained: records sharing a training identity (record_training_identity), or a
    cell, seed and settings that can change a result (one value in two spellings is one), are one trained run.
    Bundles in the order of their first record, each in the order given."""
    bundles: list[list[RunRecord]] = []
    where: dict[str, int] = {}
    for run in runs:
        identity = record_training_identity(run.data)
        keys = [key for key in (f"identity {identity}" if identity else None, _canonical_identity(run)) if key]
        found = sorted({where[key] for key in keys if key in where})
        if not found:
            bundles.append([])
            found = [len(bundles) - 1]
        target = found[0]
        for index in found[1:]:  # the run joins two bundles: one trained run after all
            bundles[target] += bundles[index]
            bundles[index] = []
            where.update({key: target for key, at in where.items() if at == index})
        bundles[target].append(run)
        where.update({key: target for key in keys})
    return [bundle for bundle in bundles if bundle]


def unmatched_note(runs: Iterable[tuple[str, RunRecord]], choice: MeasurementChoice) -> str | None:
    """One line naming the runs (label, view) without a measurement that fits, and the way out; None when none."""
    missing = [f"{label} seed {run.seed}" for label, run in runs if lacks_measurement(run)]
    if not missing:
        return None
    return (
        f"no measurement with {choice.overrides} for {', '.join(missing)}: accuracy counted, no attention figures;"
        f" run the cell's command again with {choice.overrides} to measure it from its checkpoint, without training"
    )


def others_note(others: list[tuple[RunRecord, RunRecord]]) -> str | None:
    """One line naming the records set aside as other measurements of a run counted once; None when none."""
    if not others:
        return None
    shown = ", ".join(f"{other.run_dir} (a measurement of {Path(best.run_dir).name})" for other, best in others)
    return (
        f"{len(others)} record(s) measure a trained run counted once with other stats settings, and are not counted"
        f" again: {shown}"
    )


def _positive(text: str) -> int:
    """An integer >= 1, or argparse's one-line refusal."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not an integer >= 1")
    return value


def add_measurement_options(parser: argparse.ArgumentParser) -> None:
    """--probe-size, --raw-attention and --early-layers, with what each asks."""
    group = parser.add_argument_group(
        "measurement read",
        "each run counts once, read in one of its final measurements: by default the paper's (renormalised, "
        f"{PAPER.probe_size} probe images preferred, first {PAPER.early_layers} layers); a setting given here must "
        "match, and a run without such a measurement keeps its accuracy only (a note says how to measure it)",
    )
    group.add_argument(
        "--probe-size",
        type=_positive,
        metavar="N",
        help="the measurement on N probe images (stats.probe_size=N; a split of fewer images: all of them)",
    )
    group.add_argument(
        "--raw-attention",
        action="store_true",
        help="the measurement of raw attention weights (stats.renormalize=false); the claims call it not comparable",
    )
    group.add_argument(
        "--early-layers",
        type=_positive,
        metavar="N",
        help="the measurement whose headline figures are over the first N layers (stats.early_layers=N)",
    )


def measurement_choice(args: argparse.Namespace) -> MeasurementChoice:
    """The measurement the parsed options ask for."""
    return MeasurementChoice.from_options(args.raw_attention, args.probe_size, args.early_layers)
