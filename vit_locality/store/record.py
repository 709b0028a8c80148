"""The run record, `results.json`: its one writer and its one reader, so a malformed record is recognised once,
with one reason. A run is finished only when its record says `"status": "complete"` (docs/design.md)."""

from __future__ import annotations

import json
import math
import os
import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, get_args, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vit_locality.config.protocol import TrainingProtocol
from vit_locality.errors import VitLocalityError
from vit_locality.store.atomic import atomic_write_text
from vit_locality.store.file_read import UnreadableFile, read_regular_file

RESULTS_FILE = "results.json"
ATTENTION_CSV = "attention_stats.csv"
CHECKPOINT_DIR = "checkpoints"  # last.ckpt at epoch ends, interrupted.ckpt after a signal (run/checkpoints.py)
LAST_CHECKPOINT = "last.ckpt"
INTERRUPTED_CHECKPOINT = "interrupted.ckpt"
STATUSES = ("running", "interrupted", "failed", "complete")
REMEASURED = "remeasured"  # attention.remeasured: final measurements made after training, from last.ckpt
PREVIOUS_STOP = "previous_stop"  # a new attempt's record: why the cell's last attempt stopped (its `error`)
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
    """Write `payload` atomically with `status` last, so a reader never sees 'complete' before the rest."""
    if status not in STATUSES:
        raise ValueError(f"status={status!r}: one of {', '.join(STATUSES)}")
    record = {k: v for k, v in payload.items() if k != "status"}
    record["status"] = status
    path = Path(run_dir) / RESULTS_FILE
    atomic_write_text(path, json.dumps(record, indent=2, default=str) + "\n")
    return path


@dataclass(frozen=True)
class Headline:
    """The three figures a run is summarised by; NaN where the run did not measure it."""

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
    """One run directory's results.json, checked."""

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
    def seed(self) -> int:
        return self.data["seed"]

    @property
    def protocol(self) -> TrainingProtocol:
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
        """The final model's statistics; {} when not measured."""
        return (self.data.get("attention") or {}).get("final") or {}

    @property
    def early_layers(self) -> int:
        """How many early layers the run's headline figures used."""
        return int(self.final_attention.get("early_layers", 2))

    @property
    def stats_units(self) -> str:
        """The units of the record's distances (`attention.final.settings.units`), `unit` where unset."""
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


def measurements(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every final measurement a record holds: `attention.final`, then `attention.remeasured` (run/remeasure.py)."""
    attention = record.get("attention") or {}
    first = [attention["final"]] if isinstance(attention.get("final"), dict) else []
    return first + [entry for entry in attention.get(REMEASURED) or [] if isinstance(entry, dict)]


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


class _Section(BaseModel):
    """A part of the record: JSON types exactly (no "0" for 0, no true for 1); keys it does not name pass."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class _Flags(_Section):
    autoaug: bool
    cutmix: bool
    ls: float


class _Named(_Section):
    name: str


class _Metrics(_Section):
    acc1: float = Field(alias="test/acc1", ge=0.0, le=1.0, description="a fraction in [0, 1]")


class _FinalAttention(_Section):
    min_mad_early: float = Field(description="a finite number")
    mean_entropy_early: float = Field(description="a finite number")
    early_layers: int = Field(2, ge=1, description="an integer >= 1")
    per_head: dict = Field(default_factory=dict, description="a JSON object")
    per_layer: list = Field(default_factory=list, description="a JSON list")


class _Attention(_Section):
    final: _FinalAttention | None = Field(None, description="a JSON object")


class CompleteRecord(_Section):
    """What a complete record must carry for tables to group and show it."""

    seed: int
    protocol: _Flags
    data: _Named
    model: _Named
    metrics: _Metrics
    attention: _Attention | None = Field(None, description="a JSON object")


def record_problem(data: Any) -> str | None:
    """Why `data` is not a usable record, or None: the first of the schema's errors as one line."""
    if not isinstance(data, dict):
        return f"holds a JSON {type(data).__name__}, not an object"
    status = data.get("status")
    if status not in STATUSES:
        return f"has status {status!r}, not one of {', '.join(STATUSES)}"
    if status != "complete":
        return None
    try:
        CompleteRecord.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        loc = [str(part) for part in first["loc"]]
        key = ".".join(loc)
        if first["type"] == "missing":
            return f"lacks {key}"
        allowed = _description(CompleteRecord, loc)
        shown = reprlib.repr(first["input"])  # a whole table given where a number belongs is shown cut short
        return f"has {key}={shown}" + (f", not {allowed}" if allowed else " of the wrong type")
    return None


def _description(model: Any, loc: list[str]) -> str | None:
    """The `description` of the field `loc` leads to (by name or JSON alias), None where it has none."""
    field = None
    for part in loc:
        fields = getattr(model, "model_fields", {})
        field = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
        if field is None:
            return None
        model = next((a for a in get_args(field.annotation) if isinstance(a, type)), field.annotation)
    return field.description if field else None


@dataclass
class RunScan:
    """Usable complete records, and every other run found with why."""

    complete: list[RunRecord]
    skipped: list[tuple[Path, str]]


def scan_records(roots: Iterable[Path]) -> RunScan:
    """Every run directory holding a results.json under `roots`; FileNotFoundError for a missing root."""
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
            if record is not None and record.complete:
                scan.complete.append(record)
            elif record is not None:
                scan.skipped.append((run_dir, f"status is {record.status!r}"))
    return scan


# Not searched for runs: W&B keeps a copy of results.json in wandb/offline-run-*/files/.
NOT_SCANNED = ("wandb",)


def _run_dirs(root: Path) -> list[Path]:
    """Directories under `root` (itself included) holding a results.json; links followed, each real directory once."""
    found, visited = [], set()
    for directory, subdirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(directory)
        if real in visited:
            subdirs.clear()
            continue
        visited.add(real)
        if RESULTS_FILE in files or RESULTS_FILE in subdirs:
            found.append(Path(directory))
        subdirs[:] = [name for name in subdirs if name not in (RESULTS_FILE, *NOT_SCANNED)]
    return sorted(found)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
