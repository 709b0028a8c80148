"""The run identity, hashed from the validated config: what can change a cell's weights (the config minus the
settings marked outside it, the `stats` section and settings that cannot act). docs/runs.md says, key by key, why."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

from vit_locality.config.extensions import TARGET, display_only, modern_spelling, user_entries
from vit_locality.config.protocol import AugConfig
from vit_locality.config.schema import StatsConfig
from vit_locality.config.settings import RESUME_MODE, RunSettings, applies_when_marks, identity_marks

NOT_IDENTITY, NEUTRAL = identity_marks()
HASH_CHARS = 10  # hex digits of a hash shown in a name (a run directory's, a start checkpoint's)
START_NAME = "ckpt"  # `..._ckpt-<content hash>`: a cell started from a checkpoint's weights
CONTENT_HASH_CHARS = 16
ID_NAME = "id"  # a run directory's `..._id-<hex>`: the start of the cell's identity hash, what tells cells apart
ID_CHARS = 8
ID_SUFFIX = re.compile(rf"_{ID_NAME}-([0-9a-f]{{{ID_CHARS}}})$")
# The code's random streams' version, hashed: a checkpoint of another stream is never resumed as this one.
RANDOM_STREAM_VERSION = 2
MEASUREMENT_SECTION = "stats"  # how a cell is measured, never what it trains
APPLIES_WHEN = applies_when_marks()  # a setting -> the flag it acts under


def covered_by_not_identity(key: str) -> bool:
    """Whether the dotted `key` is a setting that cannot change a result (NOT_IDENTITY)."""
    return _covered(key, NOT_IDENTITY)


def _covered(key: str, prefixes: Iterable[str]) -> bool:
    return any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)


def _config_of(cfg: RunSettings | Mapping[str, Any]) -> Mapping[str, Any]:
    """The plain config of settings (RunSettings.as_record), or a record's config as it is."""
    return cfg if isinstance(cfg, Mapping) else cfg.as_record()


def inert_keys(cfg: RunSettings | Mapping[str, Any]) -> list[str]:
    """The `applies_when` settings whose flag is off (`aug.cutmix_alpha` with `aug.cutmix=false`)."""
    config = _config_of(cfg)

    def value(key: str) -> Any:
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        return node

    return [key for key, flag in APPLIES_WHEN.items() if value(flag) is False]


def outside_training(key: str, inert: Iterable[str] = ()) -> bool:
    """Whether the dotted `key` leaves the identity (NOT_IDENTITY, the `stats` section or one of `inert`)."""
    return _covered(key, (*NOT_IDENTITY, MEASUREMENT_SECTION, *inert))


def run_identity(cfg: RunSettings | Mapping[str, Any], previous_release: bool = False) -> dict[str, Any]:
    """The settings that define the cell (dotted key -> value, as validated); `previous_release`: as that release
    counted them, with the `stats` section and the inert settings (`stats.units` as the stored unit)."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        elif not _covered(prefix, NOT_IDENTITY) and not (prefix in NEUTRAL and node == NEUTRAL[prefix]):
            flat[prefix] = node

    walk({k: v for k, v in _config_of(cfg).items() if k not in ("hydra", "run_name")}, "")
    if previous_release:
        if "stats.units" in flat:
            flat["stats.units"] = "unit"
        return flat
    inert = inert_keys(cfg)
    kept = {key: value for key, value in flat.items() if not outside_training(key, inert)}
    return {**kept, **result_changing_callbacks(_config_of(cfg))}


TIMER = "lightning.pytorch.callbacks.Timer"


def result_changing_callbacks(config: Mapping[str, Any]) -> dict[str, Any]:
    """The user's callbacks that can change a result: all but the display-only and a Timer without a duration."""
    section = config.get("callbacks")
    entries = user_entries(section) if isinstance(section, Mapping) else {}

    def acts(entry: dict[str, Any]) -> bool:
        target = modern_spelling(str(entry[TARGET]))
        if target in (TIMER, "lightning.pytorch.callbacks.timer.Timer"):
            return entry.get("duration") is not None
        return not display_only(target)

    return {f"callbacks.{name}": canonical_value(entry) for name, entry in sorted(entries.items()) if acts(entry)}


def processes(cfg: RunSettings | Mapping[str, Any]) -> int | str:
    """How many processes share the cell (devices x nodes; `auto` and -1 as written): each mixes its own share."""
    trainer = _config_of(cfg).get("trainer") or {}
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    devices = len(devices) if isinstance(devices, list) else devices
    if isinstance(devices, int) and devices > 0 and isinstance(nodes, int):
        return devices * nodes
    return f"{devices}x{nodes}"


def start_checkpoint(cfg: RunSettings | Mapping[str, Any]) -> str | None:
    """The checkpoint whose weights start this cell (`ckpt_path` with `ckpt_mode=weights`), or None."""
    cfg = _config_of(cfg)
    path = cfg.get("ckpt_path")
    return None if path in (None, "") or str(cfg.get("ckpt_mode")) == RESUME_MODE else str(path)


def file_content_hash(path: str) -> str:
    """The sha256 of a file's bytes (hex, shortened), cached by path, inode, size and times."""
    path = os.path.realpath(os.path.expanduser(path))
    status = os.stat(path)
    return _content_hash(path, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def bytes_content_hash(data: bytes) -> str:
    """`file_content_hash` of bytes already read."""
    return hashlib.sha256(data).hexdigest()[:CONTENT_HASH_CHARS]


@functools.lru_cache(maxsize=16)
def _content_hash(path: str, *_status: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:CONTENT_HASH_CHARS]


def _held_values() -> dict[str, Any]:
    """The defaults the previous release hashed under the keys that have left the identity since: hashed at these
    whatever the cell says, a default cell keeps its hash (and so its directory, checkpoints and record)."""
    stats = StatsConfig().model_dump(mode="json")
    held = {f"{MEASUREMENT_SECTION}.{k}": v for k, v in stats.items() if not _covered(f"stats.{k}", NOT_IDENTITY)}
    aug = AugConfig().model_dump(mode="json")
    held.update({key: aug[key.split(".", 1)[1]] for key in APPLIES_WHEN if key.startswith("aug.")})
    return {key: value for key, value in held.items() if not (key in NEUTRAL and NEUTRAL[key] == value)}


HELD_VALUES = _held_values()


def identity_hash(cfg: RunSettings | Mapping[str, Any], previous_release: bool = False) -> str:
    """The cell's identity: its settings, process count, random streams' version and start checkpoint's content hash;
    `previous_release`: the hash that release gave (identities_of)."""
    settings = run_identity(cfg, previous_release)
    if not previous_release:
        before = run_identity(cfg, previous_release=True)
        settings = {**{k: v for k, v in HELD_VALUES.items() if k in before and k not in settings}, **settings}
    identity = {"settings": settings, "processes": processes(cfg), "random_stream": RANDOM_STREAM_VERSION}
    if isinstance(cfg, RunSettings) and cfg.compiles:  # inductor's draws: the same distributions, another stream
        identity["random_stream"] = f"{RANDOM_STREAM_VERSION}-compiled-step"
    if isinstance(cfg, RunSettings) and cfg.packs:  # batched kernels round otherwise, the draws come from the step
        identity["random_stream"] = f"{RANDOM_STREAM_VERSION}-packed"
    start = start_checkpoint(cfg)
    if start is not None:  # the bytes a running cell read, else the file's
        read = cfg.start_sha256 if isinstance(cfg, RunSettings) else None
        identity["start_weights"] = read or file_content_hash(start)
    blob = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def identities_of(cfg: RunSettings | Mapping[str, Any]) -> tuple[str, ...]:
    """The hashes a record or checkpoint of this cell may carry: today's, then the previous release's where it
    differs."""
    return tuple(dict.fromkeys((identity_hash(cfg), identity_hash(cfg, previous_release=True))))


def record_training_identity(record: Mapping[str, Any]) -> str | None:
    """The identity of the cell a record trained: its config's hash where the config reproduces the hash the record
    carries, else the hash it carries."""
    stored = record.get("identity_hash")
    config = record.get("config")
    if not isinstance(config, Mapping):
        return stored if isinstance(stored, str) else None
    try:
        settings = RunSettings.from_record(config)
        known = identities_of(settings)
    except Exception:  # a config this release cannot read, or a start checkpoint gone: the stored hash stands
        return stored if isinstance(stored, str) else None
    return known[0] if stored in known else stored if isinstance(stored, str) else None


def holds_cell(record: Mapping[str, Any], identities: tuple[str, ...]) -> bool:
    """Whether a record is of the cell whose hashes are `identities`: it carries one, or its config trained it."""
    stored = record.get("identity_hash")
    return stored in identities or (stored is not None and record_training_identity(record) == identities[0])


def canonical_value(value: Any) -> Any:
    """One value, one spelling: a string that spells a number or a bool as Hydra's grammar reads it (`1e-3` ->
    0.001); ints and floats stay apart."""
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, dict):
        return {str(key): canonical_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [canonical_value(item) for item in value]
    if not isinstance(value, str):
        return value
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_override(f"k={value}").value()
    except Exception:  # not one value in the grammar: the text is the value
        return value
    return parsed if isinstance(parsed, bool | int | float) else value


def canonical_text(value: Any) -> str:
    """The spelling of a canonical value in names and identities: `0.001`, `1e+30`, `true`, `[0.9,0.99]`."""
    value = canonical_value(value)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
