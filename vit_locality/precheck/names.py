"""A run directory's name: its base (data, model, the three flags, seed) and every identity setting that differs from
the config of the cell's data and model choices alone, fitted within what a file system takes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vit_locality.config.identity import (
    HASH_CHARS,
    NOT_IDENTITY,
    RESUME_MODE,
    START_NAME,
    _covered,
    canonical_text,
    canonical_value,
    file_content_hash,
    processes,
    run_identity,
    start_checkpoint,
)

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

MAX_NAME_CHARS = 120
Lookup = Callable[[str], Any]
ABSENT = object()  # what a Lookup returns for a key the config lacks


def _override_key(override: str) -> str:
    """`+trainer.fast_dev_run=true` -> `trainer.fast_dev_run`; a group path `hydra/launcher` -> `hydra.launcher`."""
    return override.split("=", 1)[0].lstrip("+~").replace("/", ".")


def _name_part(text: str) -> str:
    """A value as it may appear in a directory name: no '=' or '/' (nor anything a shell or file system minds)."""
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_") or "_"


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
