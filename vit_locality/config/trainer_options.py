"""Every Lightning `Trainer` argument as a `trainer.<name>` setting, checked against the installed Trainer.

The settings conf/trainer/default.yaml declares are typed by the schema (schema.TrainerConfig). Any other one
(`+trainer.max_steps=3`, or one a debug config sets) is checked here against `inspect.signature(Trainer.__init__)`:
a typo (`+trainer.max_step=3`) or a wrong type (`+trainer.max_steps=abc`) is a one-line error before any cell starts,
and a Lightning release that adds an argument makes it settable here with no change to this project. Importing
Lightning takes seconds, so it happens only for a command that uses such a setting.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import types
import typing
from collections.abc import Mapping
from typing import Any

from vit_locality.errors import ConfigError

# Arguments the cell runner sets itself: the run directory, loggers, callbacks, checkpoint plugin and progress
# display follow from other settings (callbacks.progress_bar, logger=...), so they are not `trainer.*` keys.
RESERVED = {
    "logger": "choose loggers with logger=csv|wandb",
    "callbacks": "callbacks come from the callbacks group",
    "default_root_dir": "the run directory is hydra.run.dir / hydra.sweep.dir",
    "plugins": "the cell writes checkpoints through its own atomic plugin",
    "enable_progress_bar": "use callbacks.progress_bar=tqdm|rich|none",
    "enable_checkpointing": "last.ckpt is what resuming needs; set callbacks.checkpoint_every_n_epochs instead",
}
# Arguments whose strings Lightning accepts from a closed list (others are checked by type only).
CHOICES = {
    "gradient_clip_algorithm": ("norm", "value"),
    "profiler": ("simple", "advanced", "pytorch", "xla"),
}
# The types in the signature that a config value (YAML scalar or list) can stand for, by name.
PLAIN_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "None": type(None), "list": list, "dict": dict}
PATH_TYPES = {"Path", "PathLike"}  # a string in a config


def _type_names(annotation: Any) -> set[str]:
    """`Optional[Union[int, float]]` -> {"int", "float", "None"}; `Literal["warn"]` -> {"str"}; `list[int]` ->
    {"list"}; other classes keep their own names (a value from a config never matches them)."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {"object"}
    if annotation is None or annotation is type(None):
        return {"None"}
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_type_names(part) for part in typing.get_args(annotation)))
    if origin is typing.Literal:
        return {"None" if value is None else type(value).__name__ for value in typing.get_args(annotation)}
    if origin is not None:  # list[int], dict[str, int], Iterable[Logger] ...
        return _type_names(origin)
    if isinstance(annotation, type):
        if annotation.__name__ in PATH_TYPES:
            return {"str"}
        if issubclass(annotation, list | tuple) or annotation.__name__ in ("Sequence", "Iterable"):
            return {"list"}
        if issubclass(annotation, dict):
            return {"dict"}
        return {annotation.__name__}
    return {"object"}


@functools.cache
def trainer_parameters() -> dict[str, frozenset[str]]:
    """The installed `Trainer.__init__`'s keyword arguments and the type names each accepts (imports Lightning)."""
    try:
        import lightning
    except ImportError:
        raise ConfigError("trainer.*: Lightning is not installed in this environment (pip install lightning)") from None
    parameters = list(inspect.signature(lightning.Trainer.__init__).parameters.values())[1:]  # after self
    return {p.name: frozenset(_type_names(p.annotation)) for p in parameters if p.kind is not p.VAR_KEYWORD}


def _accepts(value: Any, names: frozenset[str]) -> bool:
    if "object" in names or "Any" in names:
        return True
    for name in names:
        kind = PLAIN_TYPES.get(name)
        if kind is None:
            continue
        if kind is bool and isinstance(value, bool):
            return True
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            return True
        if kind in (str, list, dict, type(None)) and isinstance(value, kind):
            return True
    return False


def _describe(names: frozenset[str]) -> str:
    shown = [name if name != "None" else "null" for name in sorted(names) if name in PLAIN_TYPES]
    return " or ".join(dict.fromkeys("a string" if n == "str" else n for n in shown))


def check_trainer_options(trainer: Mapping[str, Any]) -> None:
    """Raise ConfigError for the first `trainer.<name>` that the installed Trainer does not take, that the cell
    sets itself, or whose value has a type (or, for a few, a string) the Trainer does not accept."""
    parameters = trainer_parameters()
    for name, value in trainer.items():
        if name in RESERVED:
            raise ConfigError(f"trainer.{name} is not a setting here: {RESERVED[name]}")
        if name not in parameters:
            close = difflib.get_close_matches(name, [p for p in parameters if p not in RESERVED], n=3, cutoff=0.7)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ConfigError(f"trainer.{name} is not an argument of the installed Lightning Trainer{hint}")
        names = parameters[name]
        if not _accepts(value, names):
            raise ConfigError(f"trainer.{name}={value!r} is not allowed: the Trainer takes {_describe(names)}")
        if name in CHOICES and value is not None and value not in CHOICES[name]:
            raise ConfigError(f"trainer.{name}={value!r} is not allowed: one of {', '.join(CHOICES[name])} or null")


def trainer_arguments(trainer: Mapping[str, Any]) -> dict[str, Any]:
    """The `trainer.*` settings as Trainer keyword arguments (unset optional ones left to Lightning's defaults)."""
    return {name: value for name, value in trainer.items() if name not in RESERVED}
