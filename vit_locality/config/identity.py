"""What makes two cells the same cell: the run identity, the data fingerprint, and the settings a directory name
must show.

The identity is the whole config minus the settings that cannot change a result (paths, worker counts, loggers,
progress display, device placement), each marked so on its field in the schema, so a new setting is part of it
unless someone decides otherwise: a quick check (`trainer.limit_train_batches=1`) is never mistaken for a full run,
and a checkpoint is resumed only under the config that wrote it. The fingerprint covers what the config cannot:
the data actually read.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from enum import Enum
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vit_locality.config.settings import outside_identity_keys

# Settings that do not change what a cell computes (dotted keys; a key covers everything below it): the fields the
# schema marks OUTSIDE_IDENTITY, and the few keys it does not declare.
NOT_IDENTITY = outside_identity_keys()
# Keys (exact) the base of a run directory's name already shows (`<data>_<model>_aa<0|1>_cm<0|1>_ls<eps>_s<seed>`):
# the data and model choices, the three flags and their presets, the seed; and config groups that only hold settings
# outside the identity.
IN_BASE_NAME = (
    "data",
    "data.name",
    "model",
    "model.name",
    "aug.autoaug",
    "aug.cutmix",
    "loss.ls",
    "seed",
    "protocol",
    "experiment",
)
GROUPS_NOT_NAMED = ("trainer", "logger", "callbacks", "hydra")


def covered_by_not_identity(key: str) -> bool:
    """Whether the dotted `key` is a setting that cannot change a result (NOT_IDENTITY)."""
    return _covered(key, NOT_IDENTITY)


def _covered(key: str, prefixes: Iterable[str]) -> bool:
    return any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)


def run_identity(cfg: Any) -> dict[str, Any]:
    """The settings that define the cell, as plain data (dotted key -> value). `cfg`: the composed config, the
    resolved config as plain data, or the cell's typed settings (read through their plain `config`)."""
    cfg = _config_of(cfg)
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        elif not _covered(prefix, NOT_IDENTITY):
            flat[prefix] = node

    if not OmegaConf.is_config(cfg):
        walk({k: v for k, v in cfg.items() if k not in ("hydra", "run_name")}, "")
        return _stored_units(flat)
    container = OmegaConf.to_container(cfg, resolve=False)
    walk({k: v for k, v in container.items() if k not in ("hydra", "run_name")}, "")
    resolved = {key: OmegaConf.select(cfg, key) for key in flat}  # resolve each kept value only
    return _stored_units(
        {key: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for key, v in resolved.items()}
    )


STORED_UNITS = "unit"  # the convention every record stores its distances in (attention.units.STORED)


def _stored_units(flat: dict[str, Any]) -> dict[str, Any]:
    """`stats.units` only chooses how logs and pictures show distances; the record stores the unit square whatever
    it says, so the identity holds the stored convention: cells that differ only in it are one cell, and the hashes
    of unit-square cells are the ones they always were."""
    if "stats.units" in flat:
        flat["stats.units"] = STORED_UNITS
    return flat


def _config_of(cfg: Any) -> Any:
    """A composed config or a plain mapping as it is; typed settings (config.settings.RunSettings) as their plain
    resolved config."""
    return cfg if OmegaConf.is_config(cfg) or isinstance(cfg, Mapping) else cfg.config


# What the same settings compute changes with the code's random streams: 2 draws every training batch's CutMix,
# MixUp and on-device augmentation from (seed, epoch, batch) (exact mid-epoch resume). Part of the hash, so a
# checkpoint or record of an older stream is never resumed or skipped as if it were this one.
RANDOM_STREAM_VERSION = 2


def processes(cfg: Any) -> int | str:
    """How many processes share the cell, as far as the config says (devices x nodes; `auto` and -1 as written).
    Under DDP each process mixes its own share of the batch (CutMix, MixUp), so a cell on 2 devices computes other
    numbers than the cell on 1: the count is part of the identity, though `trainer.devices` itself is not (a list
    of device indices and a count of the same size are one cell)."""
    trainer = _config_of(cfg).get("trainer") or {}
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    if OmegaConf.is_list(devices) or isinstance(devices, list):
        devices = len(devices)
    if isinstance(devices, int) and devices > 0 and isinstance(nodes, int):
        return devices * nodes
    return f"{devices}x{nodes}"


RESUME_MODE = "resume"  # ckpt_mode that continues the checkpoint's own cell; any other starts a new one from it
CONTENT_HASH_CHARS = 16


def start_checkpoint(cfg: Any) -> str | None:
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


def identity_hash(cfg: Any) -> str:
    """The cell's identity: its settings (run_identity), its process count, this version of the random streams and,
    for a cell started from a checkpoint's weights, that checkpoint's content hash (never a from-scratch cell's)."""
    identity = {"settings": run_identity(cfg), "processes": processes(cfg), "random_stream": RANDOM_STREAM_VERSION}
    start = start_checkpoint(cfg)
    if start is not None:
        identity["start_weights"] = file_content_hash(start)
    blob = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


SPLITS = ("train", "eval", "test")
DATA_PARTS = ("pixels", "labels")


def _as_array(values: Any) -> Any:
    """A tensor or array as a C-contiguous numpy array (hashable by its buffer, without a copy where it is one)."""
    import numpy as np

    array = values.detach().cpu().numpy() if hasattr(values, "detach") else values
    return np.ascontiguousarray(array)


def data_fingerprint(splits: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """What a cell trains and is measured on, split by split: sizes, and sha256 hashes of the uint8 pixels and of the
    labels as read (`splits`: name -> (images, labels), names from SPLITS). Equal configs on different files differ
    here; `data_difference` says which part. `labels_sha256` is computed as records before pixel hashes had it, so
    such a record is still compared on what it holds."""
    labels_digest = hashlib.sha256()
    sizes, parts = {}, {}
    pixel_hashes: dict[int, str] = {}  # the evaluation split is often the test set itself: hashed once
    for name in SPLITS:
        images, labels = splits[name]
        label_array = _as_array(labels).astype("int64")
        labels_digest.update(name.encode())
        labels_digest.update(label_array.tobytes())
        sizes[name] = int(len(label_array))
        if id(images) not in pixel_hashes:
            pixel_array = _as_array(images)
            pixels = hashlib.sha256(f"{pixel_array.dtype}{pixel_array.shape}".encode())
            pixels.update(memoryview(pixel_array).cast("B"))
            pixel_hashes[id(images)] = pixels.hexdigest()[:16]
        parts[name] = {
            "pixels": pixel_hashes[id(images)],
            "labels": hashlib.sha256(label_array.tobytes()).hexdigest()[:16],
        }
    return {"sizes": sizes, "labels_sha256": labels_digest.hexdigest()[:16], "sha256": parts}


def data_difference(recorded: Any, current: dict[str, Any]) -> str | None:
    """What differs between a record's data fingerprint and this data's, as a phrase (`the train split's pixels
    differ`), or None when it is the same data. A record without a fingerprint cannot say it is; one written before
    pixels were hashed is compared on its sizes and labels alone."""
    if not isinstance(recorded, dict) or not recorded:
        return "its data fingerprint (none) differs from this data's"
    sizes = recorded.get("sizes") or {}
    if sizes != current["sizes"]:
        changed = [name for name in SPLITS if sizes.get(name) != current["sizes"][name]] or list(SPLITS)
        return f"the number of images of the {' and '.join(changed)} split{'s' if len(changed) > 1 else ''} differs"
    parts = recorded.get("sha256")
    if not isinstance(parts, dict):
        same = recorded.get("labels_sha256") == current["labels_sha256"]
        return None if same else "the labels differ (a record without pixel hashes)"
    changed = [
        f"the {name} split's {part}"
        for name in SPLITS
        for part in DATA_PARTS
        if (parts.get(name) or {}).get(part) != current["sha256"][name][part]
    ]
    return f"{', '.join(changed)} differ" if changed else None


# A run directory's name stays readable and within what every file system takes (255 bytes a component).
MAX_NAME_CHARS = 120
HASH_CHARS = 10  # hex digits of the hash that stands for the settings a long name cannot show
Lookup = Callable[[str], Any]
ABSENT = object()  # what a Lookup returns for a key the config lacks


def _override_key(override: str) -> str:
    """`+trainer.fast_dev_run=true` -> `trainer.fast_dev_run`; a group path `hydra/launcher` -> `hydra.launcher`."""
    return override.split("=", 1)[0].lstrip("+~").replace("/", ".")


def _name_part(text: str) -> str:
    """A value as it may appear in a directory name: no '=' or '/' (nor anything a shell or file system minds)."""
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_") or "_"


def canonical_value(value: Any) -> Any:
    """One value, one spelling: a config node as plain data, a string that spells a number or a bool as that number
    or bool (`1e-3` -> 0.001, `True` -> true); ints and floats stay apart (a count of batches is not a fraction)."""
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
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


def named_settings(overrides: Iterable[str], value_of: Lookup | None = None) -> dict:
    """The settings a directory name shows where no reference config is at hand (a job no entry point started), key
    -> canonical text, sorted by key: every setting the command sets (the last of two for one key) that changes the
    result and that the base name does not show, with its value (`value_of(key)`, the composed config's; else the
    override's)."""
    chosen: dict[str, str] = {}
    starts = False  # whether the command sets ckpt_path or ckpt_mode: a start from weights is named by its hash
    for override in overrides:
        key = _override_key(override)
        chosen.pop(key, None)  # the last override of a key wins, as in the config
        starts = starts or key in START_KEYS
        if "=" not in override or key in IN_BASE_NAME or key in GROUPS_NOT_NAMED or _covered(key, NOT_IDENTITY):
            continue
        value = _lookup(value_of, key)
        value = override.split("=", 1)[1] if value is ABSENT else value
        chosen[key] = canonical_text(value)
    start = _start_name(overrides, value_of) if starts else None
    if start is not None:
        chosen[START_NAME] = start
    return dict(sorted(chosen.items()))


START_KEYS = ("ckpt_path", "ckpt_mode")
START_NAME = "ckpt"  # `..._ckpt-<content hash>`: a cell started from a checkpoint's weights


def _start_name(overrides: Iterable[str], value_of: Lookup | None) -> str | None:
    """The content hash (HASH_CHARS) of the checkpoint whose weights start the cell, for its directory name; None
    when none does (or the file cannot be read, which the pre-check refuses anyway)."""
    given = {_override_key(o): o.split("=", 1)[1] for o in overrides if "=" in o}
    path, mode = (_lookup(value_of, key) for key in START_KEYS)
    path = given.get("ckpt_path") if path is ABSENT else path
    mode = given.get("ckpt_mode") if mode is ABSENT else mode
    if path in (None, "", "null") or str(mode) == RESUME_MODE:
        return None
    try:
        return file_content_hash(str(path))[:HASH_CHARS]
    except OSError:
        return None


PROCESSES_NAME = "processes"  # `..._processes-2`: a cell whose processes (devices x nodes) differ from the reference's
DELETED = "deleted"  # the value a name shows for an identity setting the config removed (`~key`)
REFERENCE_GROUPS = ("data", "model")  # the group choices the base of a name shows; the reference is composed from them


def identity_settings(cfg: Any, reference: Any) -> dict[str, str]:
    """The settings a directory name shows beyond its base, key -> canonical text, sorted by key: every identity
    setting (run_identity) whose value differs from `reference`'s (the config of the cell's data and model choices
    alone), its process count where that differs, and the content hash of a checkpoint whose weights start it.
    Whatever set a value (command line, experiment, preset), the name follows the identity: two configs of one
    identity share a name, and two of different identities never do (when all cannot be shown, fitted_name's hash
    stands for them)."""
    mine = run_identity(cfg)
    theirs = run_identity(reference)
    chosen: dict[str, str] = {}
    for key in mine.keys() | theirs.keys():
        if key in IN_BASE_NAME:
            continue
        value = canonical_value(mine[key]) if key in mine else DELETED
        if key in theirs and canonical_value(theirs[key]) == value:
            continue
        chosen[key] = DELETED if key not in mine else canonical_text(value)
    if processes(cfg) != processes(reference):
        chosen[PROCESSES_NAME] = str(processes(cfg))
    start = start_checkpoint(cfg)
    if start is not None:
        with contextlib.suppress(OSError):  # the pre-check refuses a checkpoint it cannot read
            chosen[START_NAME] = file_content_hash(start)[:HASH_CHARS]
    return dict(sorted(chosen.items()))


def reference_choices(choices: Any) -> tuple[str, ...]:
    """The group choices a cell's reference config is composed from (`data=glyphs`, `model=vit_tiny`), read from
    Hydra's record of the job's choices (`hydra.runtime.choices`)."""
    return tuple(f"{group}={choices[group]}" for group in REFERENCE_GROUPS if choices.get(group) is not None)


def _lookup(lookup: Lookup | None, key: str) -> Any:
    if lookup is None:
        return ABSENT
    try:
        return lookup(key)
    except Exception:  # a key the config lacks, or a value that does not resolve there
        return ABSENT


def config_lookup(cfg: DictConfig | None) -> Lookup | None:
    """A Lookup reading `cfg` (ABSENT for a key it lacks)."""
    if cfg is None:
        return None
    return lambda key: OmegaConf.select(cfg, key, default=ABSENT, throw_on_missing=True)


def _setting_parts(settings: dict[str, str]) -> list[str]:
    return [f"_{_name_part(key)}-{_name_part(value)}" for key, value in settings.items()]


def fitted_name(base: str, settings: dict[str, str]) -> str:
    """`base` plus a part per setting, within MAX_NAME_CHARS: where they do not all fit, the settings that fit (in
    key order) and `_hash-<hex>`, a hash of every setting, so two different cells never share a name. The full
    settings are in the run's record (its config)."""
    parts = _setting_parts(settings)
    name = base + "".join(parts)
    if len(name) <= MAX_NAME_CHARS:
        return name
    blob = json.dumps({"base": base, "settings": settings}, sort_keys=True)
    marker = f"_hash-{hashlib.sha256(blob.encode()).hexdigest()[:HASH_CHARS]}"
    room = MAX_NAME_CHARS - len(marker)
    name = base[:room]
    for part in parts:
        if len(name) + len(part) > room:
            break
        name += part
    return name + marker
