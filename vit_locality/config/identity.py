"""What makes two cells the same cell: the run identity, hashed from the validated config.

The identity is the whole config minus the settings that cannot change a result (paths, worker counts, loggers,
progress display, device placement), each marked so on its field in the schema, so a new setting is part of it
unless someone decides otherwise: a quick check (`trainer.limit_train_batches=1`) is never mistaken for a full run,
and a checkpoint is resumed only under the config that wrote it. What the config cannot cover, the data actually read,
is the data's fingerprint (data/fingerprint.py); a run directory's name is the pre-check's (precheck/names.py).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from enum import Enum
from typing import Any

from vit_locality.config.settings import RESUME_MODE, RunSettings, identity_marks

# Settings that do not change what a cell computes (dotted keys; a key covers everything below it): the fields the
# schema marks OUTSIDE_IDENTITY, and the few keys it does not declare; and settings left out at a neutral value.
NOT_IDENTITY, NEUTRAL = identity_marks()


def covered_by_not_identity(key: str) -> bool:
    """Whether the dotted `key` is a setting that cannot change a result (NOT_IDENTITY)."""
    return _covered(key, NOT_IDENTITY)


def _covered(key: str, prefixes: Iterable[str]) -> bool:
    return any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)


def run_identity(cfg: RunSettings | Mapping[str, Any]) -> dict[str, Any]:
    """The settings that define the cell, as plain data (dotted key -> value), each as validated (`loss.ls=0` and
    `0.0` are one value). `cfg`: the cell's settings, or a record's config (validated when it was run)."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        elif not _covered(prefix, NOT_IDENTITY) and not (prefix in NEUTRAL and node == NEUTRAL[prefix]):
            flat[prefix] = node

    walk({k: v for k, v in _config_of(cfg).items() if k not in ("hydra", "run_name")}, "")
    return _stored_units(flat)


HASH_CHARS = 10  # hex digits of a hash shown in a name (a run directory's, a start checkpoint's)
START_NAME = "ckpt"  # `..._ckpt-<content hash>`: a cell started from a checkpoint's weights


STORED_UNITS = "unit"  # the convention every record stores its distances in (attention.units.STORED)


def _stored_units(flat: dict[str, Any]) -> dict[str, Any]:
    """`stats.units` only chooses how logs and pictures show distances; the record stores the unit square whatever
    it says, so the identity holds the stored convention: cells that differ only in it are one cell, and the hashes
    of unit-square cells are the ones they always were."""
    if "stats.units" in flat:
        flat["stats.units"] = STORED_UNITS
    return flat


def _config_of(cfg: RunSettings | Mapping[str, Any]) -> Mapping[str, Any]:
    """The plain config of settings (RunSettings.as_record), or a record's config as it is."""
    return cfg if isinstance(cfg, Mapping) else cfg.as_record()


# What the same settings compute changes with the code's random streams: 2 draws every training batch's CutMix,
# MixUp and on-device augmentation from (seed, epoch, batch) (exact mid-epoch resume). Part of the hash, so a
# checkpoint or record of an older stream is never resumed or skipped as if it were this one.
RANDOM_STREAM_VERSION = 2


def processes(cfg: RunSettings | Mapping[str, Any]) -> int | str:
    """How many processes share the cell, as far as the config says (devices x nodes; `auto` and -1 as written).
    Under DDP each process mixes its own share of the batch (CutMix, MixUp), so a cell on 2 devices computes other
    numbers than the cell on 1: the count is part of the identity, though `trainer.devices` itself is not (a list
    of device indices and a count of the same size are one cell)."""
    trainer = _config_of(cfg).get("trainer") or {}
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    if isinstance(devices, list):
        devices = len(devices)
    if isinstance(devices, int) and devices > 0 and isinstance(nodes, int):
        return devices * nodes
    return f"{devices}x{nodes}"


CONTENT_HASH_CHARS = 16


def start_checkpoint(cfg: RunSettings | Mapping[str, Any]) -> str | None:
    """The checkpoint whose weights start this cell (`ckpt_path` with `ckpt_mode=weights`), or None: a cell from
    scratch, or one that resumes its own checkpoint (`ckpt_mode=resume`, the same cell)."""
    cfg = _config_of(cfg)
    path = cfg.get("ckpt_path")
    return None if path in (None, "") or str(cfg.get("ckpt_mode")) == RESUME_MODE else str(path)


def file_content_hash(path: str) -> str:
    """The sha256 of a file's bytes (hex, shortened): a copy of a checkpoint is the same start, a retrained one is
    not. While a cell runs (`pinned_content_hash`), the hash of the bytes it read and loads from; otherwise cached
    by path, inode, size and modification and change times, since a run name and an identity both ask for it (a
    file replaced by `os.replace` is another inode with its own change time, never a stale hit)."""
    path = os.path.realpath(os.path.expanduser(path))
    if path in _PINNED:
        return _PINNED[path]
    status = os.stat(path)
    return _content_hash(path, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def bytes_content_hash(data: bytes) -> str:
    """`file_content_hash` of bytes already read."""
    return hashlib.sha256(data).hexdigest()[:CONTENT_HASH_CHARS]


_PINNED: dict[str, str] = {}  # real path -> the content hash a running cell read (pinned_content_hash)


@contextlib.contextmanager
def pinned_content_hash(path: str, digest: str) -> Iterator[None]:
    """Within the block, `file_content_hash(path)` is `digest`: the hash of the bytes a cell read once and starts
    from, whatever the file holds by then, so the identity, the checkpoints' stamp, the record's run name and the
    W&B run all name the weights that were loaded."""
    key = os.path.realpath(os.path.expanduser(path))
    previous = _PINNED.get(key)
    _PINNED[key] = digest
    try:
        yield
    finally:
        if previous is None:
            _PINNED.pop(key, None)
        else:
            _PINNED[key] = previous


@functools.lru_cache(maxsize=16)
def _content_hash(path: str, inode: int, size: int, mtime_ns: int, ctime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:CONTENT_HASH_CHARS]


def identity_hash(cfg: RunSettings | Mapping[str, Any]) -> str:
    """The cell's identity: its settings (run_identity), its process count, this version of the random streams and,
    for a cell started from a checkpoint's weights, that checkpoint's content hash (never a from-scratch cell's)."""
    identity = {"settings": run_identity(cfg), "processes": processes(cfg), "random_stream": RANDOM_STREAM_VERSION}
    start = start_checkpoint(cfg)
    if start is not None:
        identity["start_weights"] = file_content_hash(start)
    blob = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


ID_NAME = "id"  # a run directory's `..._id-<hex>`: the start of the cell's identity hash, what tells cells apart
ID_CHARS = 8
ID_SUFFIX = re.compile(rf"_{ID_NAME}-([0-9a-f]{{{ID_CHARS}}})$")


def canonical_value(value: Any) -> Any:
    """One value, one spelling: a string that spells a number or a bool as that number or bool (`1e-3` -> 0.001,
    `True` -> true); ints and floats stay apart (a count of batches is not a fraction)."""
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, str):
        return _parsed_scalar(value)
    if isinstance(value, dict):
        return {str(key): canonical_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [canonical_value(item) for item in value]
    return value


def _parsed_scalar(text: str) -> Any:
    """A command-line value as Hydra's grammar reads it (`1e-3` a float, `true` a bool); the text where it is not
    a single number or bool."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        value = OverridesParser.create().parse_override(f"k={text}").value()
    except Exception:  # not something the grammar reads as one value: the text is the value
        return text
    return value if isinstance(value, bool | int | float) else text


def canonical_text(value: Any) -> str:
    """The spelling of a canonical value in names and identities: `0.001`, `1e+30`, `true`, `[0.9,0.99]`."""
    value = canonical_value(value)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
