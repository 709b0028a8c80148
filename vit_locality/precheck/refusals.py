"""Hydra's composition errors as the pre-check's one line: the setting and what is allowed, read from the exception
Hydra raises (its options, the key OmegaConf names) and the override that caused it, not from its message's words.
Also what a user may pick in each config group (`--help` lists it) and the nearest real key to a mistyped one."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.types import Override
from hydra.errors import MissingConfigException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError
from pydantic import BaseModel

SPELLING_HINT = "check the spelling; `--cfg job` lists every key"
# Config choices that a Hydra plugin of an optional extra brings (pyproject.toml): (plugin, extra).
PLUGIN_EXTRAS = {("hydra/sweeper", "optuna"): ("the Optuna sweeper (hparams_search=...)", "search")}
SHARED_PART = "_"  # a group's file named so is a part its options share (conf/model/_base.yaml), not an option
SHARED_PARTS_NOTE = f"files starting with {SHARED_PART} are shared parts of the group"
# How alike (difflib's ratio) a key must be to the one typed to be offered: `did you mean stats.units?`.
CLOSE_ENOUGH = 0.6


def _group_options(conf_dir: Path, group: str) -> list[str]:
    """The values a user may pick for a config group: its files in conf/ and, while Hydra is initialised, what its
    config search path adds (the launchers and sweepers of Hydra's plugins). Names starting with `_` are bases."""
    names = {p.stem for p in (conf_dir / group).glob("*.yaml")}
    if GlobalHydra.instance().is_initialized():
        names.update(GlobalHydra.instance().config_loader().get_group_options(group))
    return sorted(name for name in names if not name.startswith(SHARED_PART))


def user_groups(conf_dir: Path) -> dict[str, list[str]]:
    """Each config group of conf/ a user picks from (a folder holding YAML files; Hydra's own `hydra/...` groups
    apart, as `--hydra-help` lists them) with its options, shared parts left out."""
    folders = {path.parent.relative_to(conf_dir).as_posix() for path in conf_dir.rglob("*.yaml")}
    groups = (folder for folder in folders if folder != "." and folder.split("/")[0] != "hydra")
    return {group: options for group in sorted(groups) if (options := _group_options(conf_dir, group))}


def config_groups_text(conf_dir: Path) -> str:
    """`group: a, b, c` per line, as Hydra's `$APP_CONFIG_GROUPS` writes them, without the shared parts (Hydra's
    list takes no filter: it would offer `data: _downloadable, _shared, ...`)."""
    return "\n".join(f"{group}: {', '.join(options)}" for group, options in user_groups(conf_dir).items())


def is_shared_part(conf_dir: Path, group: str, value: str) -> bool:
    """Whether `group=value` picks a file of the group that its options share (`data=_shared`); a name no file has
    is Hydra's to refuse (`data=_bogus`: not an option)."""
    return value.startswith(SHARED_PART) and (conf_dir / group / f"{value}.yaml").is_file()


def shared_part_refusal(conf_dir: Path, group: str, value: str) -> str:
    """`data=_shared` composes a part of every data set, not a data set: refused naming the options."""
    options = ", ".join(_group_options(conf_dir, group))
    return f"{group}={value} is not allowed: one of {options} ({SHARED_PARTS_NOTE})"


def nearest_setting(key: str, known: Iterable[str]) -> str | None:
    """The known dotted key nearest the mistyped `key`, or None: among the keys of its section, compared by their
    last part (the shared `section.` prefix would make any two keys of a section look alike), or, where its section
    has no keys (`stat.units`), among every key. The one rule for every section, the Trainer's arguments too; a key
    that is itself known (a setting of another data set or model) gets none."""
    known = list(dict.fromkeys(known))
    if key in known:  # a key of another choice (`data.train_size` of a generated set, typed for CIFAR): none nearer
        return None
    section, _, name = key.rpartition(".")
    siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == section}
    if siblings:
        close = difflib.get_close_matches(name, list(siblings), n=1, cutoff=CLOSE_ENOUGH)
        return siblings[close[0]] if close else None
    close = difflib.get_close_matches(key, known, n=1, cutoff=CLOSE_ENOUGH)
    return close[0] if close else None


def no_such_setting(key: str, known: Iterable[str] = ()) -> str:
    """`stats.unit: no such setting; did you mean stats.units?`, or the spelling hint where no known key is near."""
    nearest = nearest_setting(key, known)
    if nearest is not None:
        return f"{key}: no such setting; did you mean {nearest}?"
    return f"{key}: no such setting ({SPELLING_HINT})"


def _models_in(hint: Any) -> Iterator[type[BaseModel]]:
    """The pydantic models a field's annotation holds (`Annotated[...]`, `X | None` and the like unwrapped)."""
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        yield hint
        return
    if typing.get_origin(hint) in (typing.Annotated, typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            yield from _models_in(arg)


def schema_keys(model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Every dotted key the settings declare (config/settings.py's RunSettings; a data or model section's variants
    included), so a typo finds its key even where the composed config lacks it (`data.train_size` on CIFAR)."""
    from vit_locality.config.schema import VARIANTS
    from vit_locality.config.settings import RunSettings

    keys: list[str] = []
    for name, field in (model or RunSettings).model_fields.items():
        key = f"{prefix}{name}"
        keys.append(key)
        for section in VARIANTS.get(key) or tuple(_models_in(field.annotation)):
            keys.extend(schema_keys(section, f"{key}."))
    return list(dict.fromkeys(keys))


def dotted_keys(tree: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted key of a plain config tree (nested dicts), sections included."""
    if isinstance(tree, dict):
        for name, item in tree.items():
            key = f"{prefix}.{name}" if prefix else str(name)
            yield key
            yield from dotted_keys(item, key)


def unknown_key_override(error: Exception, overrides: Iterable[Override]) -> Override | None:
    """The override naming a key the config does not have, where that is what Hydra refused."""
    if not isinstance(error.__cause__, ConfigKeyError | ConfigAttributeError):
        return None
    return next((override for override in overrides if _names(error, override)), None)


def _names(error: Exception, override: Override) -> bool:
    """Whether Hydra's error is about this override (it names the override it could not apply)."""
    text = str(error)
    return f"'{override.key_or_group}'" in text or f" {override.input_line}" in text


def explain(error: Exception, conf_dir: Path, overrides: Iterable[Override] = ()) -> str:
    """One line for a composition error of a command with these overrides."""
    if isinstance(error, MissingConfigException) and error.missing_cfg_file:
        group, _, value = error.missing_cfg_file.rpartition("/")
        if (group, value) in PLUGIN_EXTRAS:
            plugin, extra = PLUGIN_EXTRAS[group, value]
            return f"{group}={value} needs {plugin}, which is not installed: pip install 'vit-locality[{extra}]'"
        return f"{group}={value} is not allowed: one of {', '.join(_group_options(conf_dir, group))}"
    text = str(error)
    cause = error.__cause__
    for override in overrides:
        key = override.key_or_group
        if not _names(error, override):
            continue
        if isinstance(cause, ConfigKeyError | ConfigAttributeError):  # a key the config does not have
            return no_such_setting(key, schema_keys())
        if override.is_add():
            return f"+{key}: {key} is set already; drop the + to change it, or use ++{key}= either way"
        if override.is_delete():
            if override.value() is None:
                return f"~{key}: nothing to delete ({key} is null or absent)"
            return f"~{key}={override.value()}: nothing to delete ({key} has another value)"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    full_key = getattr(error, "full_key", None)
    return f"{full_key}: {first}" if full_key and full_key not in first else first
