"""The run record, `results.json`: its one writer, its one reader, and the checks that make a record usable.

A run directory counts as finished only when its record says `"status": "complete"`. The record is written to a
temporary file and renamed, with `"status"` as its last key, so a reader never sees `complete` before the rest.
Every reader (the cell runner, the reports, `analyze`) goes through `read_record`, so a malformed record (not
JSON, not a dict, invalid UTF-8, a directory, a missing key, a NaN headline) is recognised here once, with one
reason, and skipped and listed by every reader alike.

Units in files: accuracy is a fraction in [0, 1] everywhere (results.json, report CSVs), distances are fractions
of the image side (attention/units.py); only what is printed for people shows percent or `stats.units`. The
layout of the record is described in docs/design.md ("The run record").
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from vit_locality.errors import VitLocalityError
from vit_locality.protocol import Protocol as TrainingProtocol  # typing.Protocol is imported here too
from vit_locality.run.atomic import atomic_write_text
from vit_locality.run.file_read import UnreadableFile, read_regular_file

RESULTS_FILE = "results.json"
ATTENTION_CSV = "attention_stats.csv"
STATUSES = ("running", "interrupted", "failed", "complete")
# A record is a few kilobytes; anything this large is not one, and reading it whole could exhaust memory.
RECORD_SIZE_LIMIT = 64 * 2**20


class RecordError(VitLocalityError, ValueError):
    """A results.json that cannot be used; the message is the one-line reason."""

    exit_code = 2


@runtime_checkable
class RecordSection(Protocol):
    """A Lightning callback that contributes a section to the record of a complete run (e.g. `attention`)."""

    def record_section(self) -> dict[str, Any]: ...


def write_record(run_dir: Path, payload: Mapping[str, Any], status: str) -> Path:
    """Write `payload` with `status` appended last, so a reader never sees 'complete' before the rest."""
    if status not in STATUSES:
        raise ValueError(f"status={status!r}: one of {', '.join(STATUSES)}")
    record = {k: v for k, v in payload.items() if k != "status"}
    record["status"] = status
    path = Path(run_dir) / RESULTS_FILE
    atomic_write_text(path, json.dumps(record, indent=2, default=str) + "\n")
    return path


@dataclass(frozen=True)
class Headline:
    """The three figures a run is summarised by; NaN where the run did not measure it (statistics off)."""

    acc1: float  # top-1 test accuracy, a fraction
    min_mad: float  # minimum MAD over the heads of the early layers, final model
    entropy: float  # mean normalised entropy over the heads of the early layers, final model


HEADLINE_NAMES = {
    "acc1": "top-1 test accuracy",
    "min_mad": "minimum early-layer MAD",
    "entropy": "mean early-layer entropy",
}


@dataclass(frozen=True)
class RunRecord:
    """One run directory's results.json, checked. `data` is the parsed JSON object."""

    run_dir: Path
    data: dict[str, Any]

    @property
    def status(self) -> str:
        return self.data["status"]

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def identity_hash(self) -> str | None:
        value = self.data.get("identity_hash")
        return value if isinstance(value, str) else None

    @property
    def record_version(self) -> int:
        """The record's layout (run/record_sections.py); a record that does not say is version 1."""
        value = self.data.get("record_version", 1)
        return value if isinstance(value, int) and not isinstance(value, bool) else 1

    @property
    def seed(self) -> int:
        return self.data["seed"]

    @property
    def protocol(self) -> TrainingProtocol:
        """The run's protocol (cell name, flags, grouping), read through the one type every reader uses."""
        return TrainingProtocol.from_record(self.data["protocol"])

    @property
    def data_name(self) -> str:
        return self.data["data"]["name"]

    @property
    def model_name(self) -> str:
        return self.data["model"]["name"]

    @property
    def metrics(self) -> dict[str, float]:
        return self.data.get("metrics") or {}

    @property
    def config(self) -> dict[str, Any] | None:
        config = self.data.get("config")
        return config if isinstance(config, dict) else None

    @property
    def final_attention(self) -> dict[str, Any]:
        """The final model's statistics (`per_head`, `per_layer`, headline pair, `settings`); {} when not measured."""
        return (self.data.get("attention") or {}).get("final") or {}

    @property
    def early_layers(self) -> int:
        """How many early layers the run's own headline figures used."""
        return int(self.final_attention.get("early_layers", 2))

    @property
    def stats_units(self) -> str:
        """The units the record's distances are stored in: `unit` for every run written today (its `stats.units` is
        `display_units`, how its logs showed them); an older record's own `stats.units` until it is converted."""
        return str((self.final_attention.get("settings") or {}).get("units", "unit"))

    @property
    def attention_csv(self) -> Path:
        return self.run_dir / ATTENTION_CSV

    def headline(self) -> Headline:
        final = self.final_attention
        return Headline(
            acc1=_number(self.metrics.get("test/acc1")),
            min_mad=_number(final.get("min_mad_early")),
            entropy=_number(final.get("mean_entropy_early")),
        )


def read_record(run_dir: Path) -> RunRecord | None:
    """The run's record; None when the directory holds none; RecordError (one-line reason) when it is unusable."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        data = json.loads(read_regular_file(path, RECORD_SIZE_LIMIT).decode("utf-8"))
    except UnreadableFile as error:  # a FIFO or device would block a reader forever or fill its memory
        raise RecordError(f"{RESULTS_FILE} is unreadable: {error.why}; skipped") from None
    except IsADirectoryError:
        raise RecordError(f"{RESULTS_FILE} is unreadable: a directory") from None
    except PermissionError:
        raise RecordError(f"{RESULTS_FILE} is unreadable: permission denied for this user") from None
    except OSError as error:
        raise RecordError(f"{RESULTS_FILE} is unreadable: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise RecordError(f"{RESULTS_FILE} is unreadable: not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise RecordError(f"{RESULTS_FILE} is unreadable: not JSON ({error.msg}, line {error.lineno})") from None
    record = RunRecord(Path(run_dir), data)
    problem = record_problem(data)
    if problem:
        raise RecordError(f"{RESULTS_FILE} is malformed: {problem}")
    return record


def record_problem(data: Any) -> str | None:
    """Why `data` is not a usable record, or None. A complete record must carry what tables group and show by."""
    if not isinstance(data, dict):
        return f"holds a JSON {type(data).__name__}, not an object"
    status = data.get("status")
    if status not in STATUSES:
        return f"has status {status!r}, not one of {', '.join(STATUSES)}"
    if status != "complete":
        return None
    required = {
        "seed": int,
        "protocol.autoaug": bool,
        "protocol.cutmix": bool,
        "protocol.ls": (int, float),
        "data.name": str,
        "model.name": str,
        "metrics": dict,
    }
    for key, kind in required.items():
        value: Any = data
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return f"lacks {key}"
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f"has {key}={value!r} of the wrong type"
    acc1 = data["metrics"].get("test/acc1")
    if not isinstance(acc1, int | float) or not 0.0 <= acc1 <= 1.0:
        return f"has metrics.test/acc1={acc1!r}, not a fraction in [0, 1]"
    final = (data.get("attention") or {}).get("final") if isinstance(data.get("attention"), dict) else None
    if final is not None:
        if not isinstance(final, dict):
            return "has attention.final that is not an object"
        for key in ("min_mad_early", "mean_entropy_early"):
            value = final.get(key)
            if not isinstance(value, int | float) or not math.isfinite(value):
                return f"has attention.final.{key}={value!r}, not a finite number"
        early = final.get("early_layers", 2)
        if not isinstance(early, int) or isinstance(early, bool) or early < 1:
            return f"has attention.final.early_layers={early!r}, not an integer >= 1"
        for key, kind in (("per_head", dict), ("per_layer", list)):
            if key in final and not isinstance(final[key], kind):
                return f"has attention.final.{key} that is not a JSON {'object' if kind is dict else 'list'}"
    return None


@dataclass
class RunScan:
    """What a search of sweep directories found: usable complete records, and every other run with why."""

    complete: list[RunRecord]
    skipped: list[tuple[Path, str]]


def scan_records(roots: Iterable[Path]) -> RunScan:
    """Every run directory holding a results.json under `roots` (links to directories followed once).

    Raises FileNotFoundError for a root that does not exist."""
    scan = RunScan([], [])
    seen: set[Path] = set()
    for root in roots:
        root = Path(root)
        if not root.exists():
            raise FileNotFoundError(f"sweep directory {root} does not exist")
        for run_dir in _run_dirs(root):
            real = run_dir.resolve()
            if real in seen:
                continue
            seen.add(real)
            try:
                record = read_record(run_dir)
            except RecordError as error:
                scan.skipped.append((run_dir, str(error)))
                continue
            if record is None:
                continue
            if record.complete:
                scan.complete.append(record)
            else:
                scan.skipped.append((run_dir, f"status is {record.status!r}"))
    return scan


# Directories never searched for runs: W&B keeps a copy of results.json in wandb/offline-run-*/files/, which
# would count the run twice.
NOT_SCANNED = ("wandb",)


def _run_dirs(root: Path) -> list[Path]:
    """Directories under `root` (itself included) that hold a results.json, none below a `wandb` directory.
    Links to directories are followed (shared sweep layouts link run directories), each real directory once, so a
    link cycle ends."""
    found, visited, pending = [], set(), [root]
    while pending:
        directory = pending.pop()
        real = directory.resolve()
        if real in visited:
            continue
        visited.add(real)
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        if any(entry.name == RESULTS_FILE for entry in entries):
            found.append(directory)
        pending += [Path(e.path) for e in entries if e.name not in (RESULTS_FILE, *NOT_SCANNED) and _is_dir(e)]
    return sorted(found)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # follows links
    except OSError:
        return False


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
