"""What a run was trained with, as reports compare it, and whether it is a quick or debug run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vit_locality.attention.units import STORED
from vit_locality.config.identity import HASH_CHARS, RESUME_MODE, inert_keys, outside_training
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.store.record import RunRecord

Settings = tuple[tuple[str, str], ...]
# Values of a trainer limit that mean "the whole run", the same as unset.
WHOLE_RUN = {
    "trainer.limit_train_batches": (1.0,),
    "trainer.limit_val_batches": (1.0,),
    "trainer.limit_test_batches": (1.0,),
    "trainer.max_steps": (-1,),
    "trainer.overfit_batches": (0, 0.0),
    "trainer.fast_dev_run": (False, 0),
}
CONFIG_KEY, NO_CONFIG = "config", "not recorded"  # the one setting of a run without a recorded config
DEBUG_SWEEP = "debug"  # what conf/debug/*.yaml set as sweep_name, and where they write
START_KEY, SCRATCH = "start", "scratch"  # where a run's weights began; a run trained from initialisation
UNSET = "unset"  # a setting one run of a cell lacks


@dataclass(frozen=True)
class GroupKey:
    """Data set, model, the protocol's grouped fields and this group's values of the settings that split its cell."""

    data: str
    model: str
    protocol: TrainingProtocol
    settings: Settings = ()

    @property
    def cell(self) -> str:
        return self.protocol.cell_name

    @property
    def variant(self) -> str:
        """The settings that set this group apart from the cell's other groups (`optim.lr=0.01`), or ''."""
        return ", ".join(f"{key}={value}" for key, value in self.settings)


def group_key(run: RunRecord, settings: Settings = ()) -> GroupKey:
    return GroupKey(data=run.data_name, model=run.model_name, protocol=run.protocol.group_key(), settings=settings)


def _not_a_measurement(run: RunRecord) -> str | None:
    """Why a run is left out of every report before anything else is looked at, or None."""
    quick = quick_run(run)
    return debug_run_note(run) or old_units_note(run) or (f"a quick run ({quick}), not counted" if quick else None)


def old_units_note(run: RunRecord) -> str | None:
    """Why a record whose distances are not stored on the unit square (older than the previous release) is not read."""
    if run.stats_units == STORED:
        return None
    return f"distances stored in stats.units={run.stats_units}, from before the one stored unit: not read"


def debug_run_note(run: RunRecord) -> str | None:
    """Why a run of a `debug=...` check (sweep_name `debug`, or below a `debug/` directory) is not counted, or None."""
    if (run.config or {}).get("sweep_name") == DEBUG_SWEEP:
        how = f"sweep_name={DEBUG_SWEEP}"
    elif DEBUG_SWEEP in Path(run.run_dir).parts:
        how = f"written below a {DEBUG_SWEEP}/ directory"
    else:
        return None
    return f"a debug run ({how}), not counted"


def run_settings(run: RunRecord) -> dict[str, str]:
    """The run's settings that can change a result (dotted key -> value as printed), one spelling per value: not
    how it is measured (`stats`, measurement.py picks the measurement) nor a setting that cannot act under the others
    (`aug.cutmix_alpha` while `aug.cutmix=false`), which the training identity leaves out too."""
    if run.config is None:
        return {CONFIG_KEY: NO_CONFIG, "loss.ls": _shown(_canonical(float(run.protocol.ls))), START_KEY: run_start(run)}
    inert = inert_keys(run.config)
    covered = lambda key: key == "seed" or outside_training(key, inert)
    flat = {key: value for key, value in flat_config(run.config).items() if not covered(key)}
    flat["loss.ls"] = run.protocol.ls
    settings = {key: _shown(_canonical(value)) for key, value in flat.items() if not _whole_run(key, value)}
    return {**settings, START_KEY: run_start(run)}


def run_start(run: RunRecord) -> str:
    """Where the run's weights began: `scratch`, `weights <hash or path>`, or `resume <hash>` of another identity."""
    start = run.data.get("start")
    if not isinstance(start, dict):
        config = run.config or {}
        path, mode = config.get("ckpt_path"), str(config.get("ckpt_mode") or "weights")
        return SCRATCH if path in (None, "") or mode == RESUME_MODE else f"weights {path}"
    mode = str(start.get("ckpt_mode") or "weights")
    sha = start.get("ckpt_sha256")
    shown = str(sha)[:HASH_CHARS] if isinstance(sha, str) and sha else str(start.get("ckpt_path", "unknown file"))
    if mode != RESUME_MODE:
        return f"weights {shown}"
    return SCRATCH if start.get("ckpt_identity") in (None, run.identity_hash) else f"{RESUME_MODE} {shown}"


def _canonical_identity(run: RunRecord) -> str | None:
    """The run's cell, seed and settings in one spelling each (`loss.ls=0` is 0.0); None without a config."""
    if run.config is None:
        return None
    key = group_key(run)
    settings = sorted(run_settings(run).items())
    return json.dumps([key.data, key.model, key.cell, run.seed, settings], default=str)


def _canonical(value: Any) -> Any:
    """One spelling of a number: an integral float as an int (0.0 -> 0)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _whole_run(key: str, value: Any) -> bool:
    """The value of a trainer limit that means no limit (same as unset)."""
    if value is None:
        return key in WHOLE_RUN
    return any(value == v and type(value) is type(v) for v in WHOLE_RUN.get(key, ()))


def differing_settings(runs: Iterable[RunRecord]) -> list[str]:
    """The settings (sorted) in which the runs that record a config differ; a key one run lacks counts as `unset`."""
    all_settings = [run_settings(run) for run in runs if run.config is not None]
    keys = sorted({key for settings in all_settings for key in settings})
    return [key for key in keys if len({settings.get(key, UNSET) for settings in all_settings}) > 1]


def split_keys(runs: list[RunRecord]) -> list[str]:
    """The settings that split the runs of one cell, and `start` when any run did not start from scratch."""
    keys = differing_settings(runs)
    if START_KEY not in keys and any(run_start(run) != SCRATCH for run in runs):
        keys = sorted([*keys, START_KEY])
    return keys


def split_by_settings(runs: list[RunRecord]) -> dict[Settings, list[RunRecord]]:
    """The runs of one cell by their values of `split_keys`, so the runs of one part differ in their seed alone."""
    keys = split_keys(runs)
    parts: dict[Settings, list[RunRecord]] = {}
    for run in runs:
        settings = run_settings(run)
        if run.config is None and any(other.config is not None for other in runs):
            parts.setdefault(((CONFIG_KEY, NO_CONFIG),), []).append(run)
        else:
            parts.setdefault(tuple((key, settings.get(key, UNSET)) for key in keys), []).append(run)
    return parts


def quick_run(run: RunRecord) -> str | None:
    """The trainer settings that make `run` a quick check (`trainer.limit_train_batches=1`), or None."""
    trainer = (run.config or {}).get("trainer")
    if not isinstance(trainer, dict):
        return None
    limits = ("limit_train_batches", "limit_val_batches", "limit_test_batches")
    found = [(key, trainer.get(key)) for key in limits if not _whole_run(f"trainer.{key}", trainer.get(key))]
    for key in ("overfit_batches", "fast_dev_run"):
        value = trainer.get(key)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if (number and value > 0) or (key == "fast_dev_run" and value is True):
            found.append((key, value))
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
    """One line per setting in which the runs of one cell differ, naming each value and its seeds."""
    notes = []
    unrecorded = sum(run.config is None for run in runs)
    if 0 < unrecorded < len(runs):
        notes.append(f"{label}: {unrecorded} of {len(runs)} runs record no config; they are a row of their own")
    recorded = [(run.seed, run_settings(run)) for run in runs if run.config is not None]
    for key in differing_settings(runs):  # each has two or more values among `recorded`
        seeds_by_value: dict[str, list[int]] = {}
        for seed, settings in recorded:
            seeds_by_value.setdefault(settings.get(key, UNSET), []).append(seed)
        values = "; ".join(
            f"{value} (seed{'s' if len(seeds) > 1 else ''} {', '.join(str(s) for s in sorted(seeds))})"
            for value, seeds in sorted(seeds_by_value.items())
        )
        notes.append(f"{label} is split by {key}: {values}")
    return notes


def _shown(value: Any) -> str:
    """A setting's value as printed: strings bare, everything else as JSON (true, null, [0.9, 0.999])."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def slug(text: str) -> str:
    """A file-name-safe form of data set and model names."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)
