"""User callbacks and loggers by `_target_` (the lightning-hydra-template's form): which entries are the user's, the
rules their classes meet, and which callbacks only show or measure. A target is imported only when resolved."""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import inspect
from collections.abc import Mapping
from typing import Any

from vit_locality.errors import ConfigError, first_line

TARGET = "_target_"
CALLBACKS_MODULE = "lightning.pytorch.callbacks"
LEGACY_PREFIX = "pytorch_lightning."  # the standalone package's spelling of lightning.pytorch
# Callbacks that only show or measure (not Timer: with a duration it stops the fit).
DISPLAY_ONLY_CALLBACKS = tuple(
    f"{CALLBACKS_MODULE}.{name}"
    for name in ("LearningRateMonitor", "ModelSummary", "RichModelSummary", "DeviceStatsMonitor")
)
# A logger's arguments that say where it writes: left out or null, `<run dir>/<entry name>` (filled_directories).
LOGGER_DIRECTORIES = ("save_dir", "root_dir")
# Packages a Lightning logger needs when it is built: class name -> any one of them.
LOGGER_PACKAGES = {
    "TensorBoardLogger": ("tensorboard", "tensorboardX"),
    "MLFlowLogger": ("mlflow",),
    "CometLogger": ("comet_ml",),
    "NeptuneLogger": ("neptune",),
}


# A section's user entries: subclasses of (module, base), called `noun` in refusals.
KINDS = {
    "callbacks": (CALLBACKS_MODULE, "Callback", "callback", "LearningRateMonitor"),
    "logger": ("lightning.pytorch.loggers", "Logger", "logger", "TensorBoardLogger"),
}


def user_entries(section: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The section's user entries as given, by name: every key whose value is a mapping with a `_target_` string."""
    entries = {name: value for name, value in section.items() if isinstance(value, Mapping)}
    return {str(name): dict(value) for name, value in entries.items() if isinstance(value.get(TARGET), str)}


def check_entry_shape(section: str, name: str, value: Any) -> None:
    """A key the section does not declare must be a user entry (a mapping with a `_target_` class path) or null."""
    module, _, noun, example = KINDS[section]
    rule = f"a user {noun} is a mapping with _target_, its class: +{section}.{name}._target_=<class path>"
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise ConfigError(f"{section}.{name}: no such setting ({rule})")
    if TARGET not in value:
        raise ConfigError(f"{section}.{name}.{TARGET}: missing ({rule})")
    target = value[TARGET]
    if not (isinstance(target, str) and all(part.isidentifier() for part in target.split(".")) and "." in target):
        allowed = f"a dotted class path such as {module}.{example}"
        raise ConfigError(f"{section}.{name}.{TARGET}={target!r} is not allowed: {allowed}")


def modern_spelling(target: str) -> str:
    """`pytorch_lightning.X` as `lightning.pytorch.X`: one class, two packages' spellings."""
    return "lightning.pytorch." + target[len(LEGACY_PREFIX) :] if target.startswith(LEGACY_PREFIX) else target


@functools.lru_cache(maxsize=256)
def locate(target: str) -> Any:
    """The object a dotted path names, importing the longest module prefix that is a module; ImportError in one line
    where it cannot."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            found = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name and (module_name + ".").startswith(error.name + "."):
                continue  # this prefix is not a module: the rest may be attributes of a shorter one
            raise ImportError(f"importing {module_name} fails: {error}") from None
        except Exception as error:  # the module's own code fails: its first line says why
            raise ImportError(f"importing {module_name} fails: {first_line(error)}") from None
        return _attribute(found, module_name, parts[cut:])
    raise ImportError(f"no module named {parts[0]}")


def _attribute(module: Any, module_name: str, names: list[str]) -> Any:
    """`module.a.b` for names [a, b]; ImportError naming the nearest attribute where one is missing."""
    found = module
    for name in names:
        if not hasattr(found, name):
            close = difflib.get_close_matches(name, [n for n in dir(found) if not n.startswith("_")], n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ImportError(f"{module_name} has no {'.'.join(names)}{hint}")
        found = getattr(found, name)
    return found


@functools.lru_cache(maxsize=256)
def display_only(target: str) -> bool:
    """Whether `target` names a DISPLAY_ONLY_CALLBACKS class in any spelling (`pytorch_lightning.callbacks.X`,
    `lightning.pytorch.callbacks.<module>.X`); a subclass may do anything."""
    spelled = modern_spelling(target)
    if spelled in DISPLAY_ONLY_CALLBACKS:
        return True
    if not spelled.startswith(CALLBACKS_MODULE + "."):
        return False
    try:
        return any(locate(spelled) is locate(known) for known in DISPLAY_ONLY_CALLBACKS)
    except ImportError:
        return False


def check_user_entries(section: str, entries: Mapping[str, Mapping[str, Any]]) -> None:
    """Each user entry's class against the installed packages, before any cell starts: it imports, it is a Lightning
    callback (logger) that does not clash with the cell's own, its packages are there and it takes the arguments."""
    for name, entry in entries.items():
        cls = entry_class(section, name, entry[TARGET])
        clash = CLASHES[section](cls)
        if clash:
            raise ConfigError(f"{section}.{name}.{TARGET}={entry[TARGET]!r} is not allowed: {clash}")
        check_arguments(section, name, entry, cls)


def entry_class(section: str, name: str, target: str) -> type:
    """The class `target` names; ConfigError unless it imports and is a subclass of the section's Lightning base."""
    module, base_name, noun, _ = KINDS[section]
    key = f"{section}.{name}.{TARGET}={target!r} is not allowed"
    try:
        cls = locate(target)
    except ImportError as error:
        raise ConfigError(f"{key}: it does not import: {error}") from None
    base = getattr(importlib.import_module(module), base_name)
    if not (inspect.isclass(cls) and issubclass(cls, base)):
        legacy = modern_spelling(target) != target
        hint = f"; spell it {modern_spelling(target)}: the cell's Trainer is lightning.pytorch's" if legacy else ""
        raise ConfigError(f"{key}: not a Lightning {noun} (a subclass of {module}.{base_name}){hint}")
    return cls


def callback_clash(cls: type) -> str | None:
    """Why a user callback class would clash with the cell's own (two progress bars, two checkpointers)."""
    from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar

    if issubclass(cls, ProgressBar):
        return "the cell has its own progress display: choose it with callbacks.progress_bar=tqdm|rich|none"
    if issubclass(cls, ModelCheckpoint):
        return (
            "the cell has its own ModelCheckpoint (checkpoints/last.ckpt, what resuming reads): set how often it "
            "writes with callbacks.checkpoint_every_n_epochs"
        )
    return None


def logger_clash(cls: type) -> str | None:
    """Why a user logger class would clash with the cell's own loggers, or cannot be built here."""
    if any(base.__name__ == "WandbLogger" for base in cls.__mro__):
        return "W&B is logger=wandb (one run per cell, resumed with it: docs/wandb.md)"
    needed = next((LOGGER_PACKAGES[b.__name__] for b in cls.__mro__ if b.__name__ in LOGGER_PACKAGES), ())
    if needed and not any(importlib.util.find_spec(package) for package in needed):
        return f"it needs {' or '.join(needed)} installed (pip install {needed[0]})"
    return None


CLASHES = {"callbacks": callback_clash, "logger": logger_clash}


def check_arguments(section: str, name: str, entry: Mapping[str, Any], cls: type) -> None:
    """The entry's arguments against the class's signature: each one a parameter (unless it takes **kwargs), each
    required one given (a logger's directory is filled in); Hydra's own keys (`_x_`) pass."""
    parameters = inspect.signature(cls).parameters
    given = [key for key in entry if not (key.startswith("_") and key.endswith("_"))]
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        for key in given:
            if key not in parameters:
                close = difflib.get_close_matches(key, list(parameters), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise ConfigError(f"{section}.{name}.{key} is not an argument of {cls.__name__}{hint}")
    filled = LOGGER_DIRECTORIES if section == "logger" else ()
    for parameter in parameters.values():
        required = parameter.default is parameter.empty and parameter.kind in (
            parameter.POSITIONAL_OR_KEYWORD,
            parameter.KEYWORD_ONLY,
        )
        if required and parameter.name not in given and parameter.name not in filled:
            raise ConfigError(f"{section}.{name}.{parameter.name}: missing, and {cls.__name__} needs it")


def filled_directories(entry: Mapping[str, Any], directory: str) -> dict[str, str]:
    """The directory arguments a user logger's entry leaves out or null, each set to `directory` (in the run's)."""
    parameters = inspect.signature(locate(entry[TARGET])).parameters
    return {name: directory for name in LOGGER_DIRECTORIES if name in parameters and entry.get(name) is None}
