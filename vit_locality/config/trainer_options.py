"""Every Lightning `Trainer` argument as a `trainer.<name>` setting, checked against the installed Trainer.

The check reads the parameter list and type hints of `Trainer.__init__` from Lightning's source file, without
importing Lightning (which takes seconds): a typo (`+trainer.max_step=3`) or a wrong type (`trainer.max_steps=abc`)
is a one-line error before any cell starts, and a Lightning release that adds an argument makes it settable here
with no change to this project.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
from collections.abc import Mapping
from pathlib import Path
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
# Type names in the signature that a config value (YAML scalar or list) can stand for.
PLAIN_TYPES = {
    "int": int,
    "float": float,
    "bool": bool,
    "str": str,
    "None": type(None),
    "list": list,
    "dict": dict,
    "_PATH": str,
    "_LITERAL_WARN": str,
    "_PRECISION_INPUT": str,
}


def _trainer_source() -> Path:
    spec = importlib.util.find_spec("lightning")  # a top-level lookup: does not import the package
    if spec is None or spec.origin is None:
        raise ConfigError("trainer.*: Lightning is not installed in this environment (pip install lightning)")
    return Path(spec.origin).parent / "pytorch" / "trainer" / "trainer.py"


def _type_names(annotation: ast.expr | None) -> set[str]:
    """`Optional[Union[int, float]]` -> {"int", "float", "None"}; unknown classes keep their own names."""
    if annotation is None:
        return {"object"}
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return {"None"}
    if isinstance(annotation, ast.Name):
        return {annotation.id}
    if isinstance(annotation, ast.Attribute):
        return {annotation.attr}
    if isinstance(annotation, ast.BinOp):  # int | None
        return _type_names(annotation.left) | _type_names(annotation.right)
    if isinstance(annotation, ast.Subscript):
        outer = _type_names(annotation.value)
        if outer & {"Optional", "Union"}:
            inner = annotation.slice
            parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            names = {"None"} if "Optional" in outer else set()
            for part in parts:
                names |= _type_names(part)
            return names
        return (
            {"list"}
            if outer & {"list", "List", "Sequence", "Iterable"}
            else {"dict"}
            if outer & {"dict", "Dict"}
            else outer
        )
    return {"object"}


@functools.cache
def trainer_parameters() -> dict[str, frozenset[str]]:
    """The installed `Trainer.__init__`'s keyword arguments and the type names each accepts."""
    source = _trainer_source()
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"trainer.*: cannot read Lightning's Trainer ({source}): {error}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Trainer":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    arguments = [*item.args.args[1:], *item.args.kwonlyargs]
                    return {arg.arg: frozenset(_type_names(arg.annotation)) for arg in arguments}
    raise ConfigError(f"trainer.*: no Trainer.__init__ found in {source}; this Lightning version is not supported")


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
    return " or ".join(
        dict.fromkeys("a string" if n in ("str", "_PATH", "_LITERAL_WARN", "_PRECISION_INPUT") else n for n in shown)
    )


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
