"""A run directory's name: its base (data, model, the three flags, seed), the identity settings its command sets (as
validated: `optim.lr=1e-3` and `0.001` read alike) and the short identity hash, which alone tells cells apart. A
directory of the same identity already in the parent (an older name, another spelling) is the cell's."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from vit_locality.config.identity import (
    HASH_CHARS,
    ID_CHARS,
    ID_NAME,
    ID_SUFFIX,
    RESUME_MODE,
    START_NAME,
    canonical_text,
    file_content_hash,
    holds_cell,
    identities_of,
    inert_keys,
    outside_training,
    record_training_identity,
)
from vit_locality.config.settings import RunSettings
from vit_locality.run.lock import way_out
from vit_locality.store.record import RecordError, read_record

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
# Identity settings whose value the identity does not follow: `stats.units` only chooses how distances are shown (the
# identity holds the stored unit whatever it says), so naming it would tell one cell apart from itself.
NOT_NAMED = ("stats.units",)

MAX_NAME_CHARS = 120
Lookup = Callable[[str], Any]
ABSENT = object()  # what a Lookup returns for a key the config lacks


def _override_key(override: str) -> str:
    """`+trainer.fast_dev_run=true` -> `trainer.fast_dev_run`; a group path `hydra/launcher` -> `hydra.launcher`."""
    return override.split("=", 1)[0].lstrip("+~").replace("/", ".")


def _name_part(text: str) -> str:
    """A value as it may appear in a directory name: no '=' or '/' (nor anything a shell or file system minds)."""
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_") or "_"


def named_settings(overrides: Iterable[str], value_of: Lookup | None = None, inert: Iterable[str] = ()) -> dict:
    """The settings a directory name shows after its base, key -> canonical text, sorted by key: every setting the
    command sets (the last of two for one key) that can change the weights and that the base name does not show, with
    its value (`value_of(key)`, the validated config's; else the override's). `inert`: settings that cannot act under
    the config's other values (identity.inert_keys), left out like the measurement's."""
    inert = tuple(inert)
    chosen: dict[str, str] = {}
    starts = False  # whether the command sets ckpt_path or ckpt_mode: a start from weights is named by its hash
    for override in overrides:
        key = _override_key(override)
        chosen.pop(key, None)  # the last override of a key wins, as in the config
        starts = starts or key in START_KEYS
        skipped = key in IN_BASE_NAME or key in GROUPS_NOT_NAMED or key in NOT_NAMED or outside_training(key, inert)
        if "=" not in override or skipped:
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


def _lookup(lookup: Lookup | None, key: str) -> Any:
    if lookup is None:
        return ABSENT
    try:
        return lookup(key)
    except Exception:  # a key the config lacks, or a value that does not resolve there
        return ABSENT


def _setting_parts(settings: dict[str, str]) -> list[str]:
    return [f"_{_name_part(key)}-{_name_part(value)}" for key, value in settings.items()]


def fitted_name(base: str, settings: dict[str, str], identity: str) -> str:
    """`base`, a part per setting (in key order) as far as they fit within MAX_NAME_CHARS, and `_id-<hex>`."""
    marker = f"_{ID_NAME}-{identity[:ID_CHARS]}"
    room = MAX_NAME_CHARS - len(marker)
    name = base[:room]
    for part in _setting_parts(settings):
        if len(name) + len(part) > room:
            break
        name += part
    return name + marker


def _typed_lookup(config: dict[str, Any]) -> Lookup:
    """A Lookup of the validated config (`settings.as_record()`): a dotted key's value, ABSENT where it has none."""

    def value_of(key: str) -> Any:
        node: Any = config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return ABSENT
            node = node[part]
        return node

    return value_of


def existing_directory(parent: Path, base: str, identities: tuple[str, ...]) -> str | None:
    """The name of a directory in `parent` that holds this cell (`identities`: identity.identities_of, today's
    first): one whose name ends in one of its ids; else one starting with `base` whose record says one of them (a name
    from before names held ids) or trained the same cell (the previous release named a cell measured with other
    `stats` settings apart)."""
    try:
        children = sorted(child.name for child in parent.iterdir() if child.is_dir())
    except OSError:
        return None
    shorts = [identity[:ID_CHARS] for identity in identities]
    by_id = {match.group(1): name for name in children if (match := ID_SUFFIX.search(name))}
    found = next((by_id[short] for short in shorts if short in by_id), None)
    if found is not None:
        return found
    for name in children:
        if not (name == base or name.startswith(base + "_")):
            continue
        try:
            record = json.loads((parent / name / "results.json").read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict):
            continue
        if record.get("identity_hash") in identities and not ID_SUFFIX.search(name):
            return name
        if ID_SUFFIX.search(name) and record_training_identity(record) == identities[0]:
            return name
    return None


def cell_name(base: str, overrides: Iterable[str], settings: RunSettings, parent: Path | None) -> str:
    """The run directory name of the cell whose validated settings are `settings` and whose command set
    `overrides`, in `parent` (None: no directory to look in)."""
    identities = identities_of(settings)
    existing = existing_directory(parent, base, identities) if parent is not None else None
    if existing is not None:
        return existing
    config = settings.as_record()
    return fitted_name(base, named_settings(overrides, _typed_lookup(config), inert_keys(config)), identities[0])


def occupied_problem(
    run_dir: Path | None, identities: tuple[str, ...] | None, multirun: bool, dirs: dict[str, str]
) -> str | None:
    """One line when `run_dir` holds a complete run of another cell than the one of `identities` (identities_of);
    None otherwise or when either is unknown here. `dirs`: the output directories the command line sets (they
    decide the advice)."""
    if run_dir is None or not identities:
        return None
    try:
        record = read_record(run_dir)
    except RecordError:
        return None
    if record is None or not record.complete or holds_cell(record.data, identities):
        return None
    return (
        f"run directory {run_dir} already holds a complete run with a different config (nothing has run); move that "
        f"directory away or {way_out(run_dir, multirun, 'hydra.sweep.dir' in dirs)}"
    )
