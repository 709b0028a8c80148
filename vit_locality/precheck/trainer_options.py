"""Every Lightning `Trainer` argument as a `trainer.<name>` setting, checked against the installed Trainer: its
name against `Trainer.__init__`'s signature, its value by pydantic against the Trainer's own annotation, so a typo
or a wrong type is one line before any cell starts. Lightning is imported only for a command that needs it."""

from __future__ import annotations

import difflib
import functools
import inspect
import logging
import re
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

from pydantic import ConfigDict, TypeAdapter, ValidationError

from vit_locality.errors import ConfigError
from vit_locality.upstream import accelerator_connector_class

# Arguments the cell runner sets itself: the run directory, loggers, callbacks, checkpoint plugin and progress
# display follow from other settings (callbacks.progress_bar, logger=...), so they are not `trainer.*` keys.
RESERVED = {
    "logger": "choose loggers with logger=csv|wandb",
    "callbacks": "add each callback as +callbacks.<name>._target_=<class> (docs/training.md)",
    "default_root_dir": "the run directory is hydra.run.dir / hydra.sweep.dir",
    "plugins": "the cell writes checkpoints through its own atomic plugin",
    "enable_progress_bar": "use callbacks.progress_bar=tqdm|rich|none",
    "enable_checkpointing": "last.ckpt is what resuming needs; set callbacks.checkpoint_every_n_epochs instead",
    "barebones": "it turns off the loggers, checkpoints and progress display every cell has; "
    "callbacks.progress_bar=none is the quiet run",
}
# Arguments whose strings Lightning accepts from a closed list (others are checked by type only).
CHOICES = {
    "gradient_clip_algorithm": ("norm", "value"),
    "profiler": ("simple", "advanced", "pytorch", "xla"),
}
# The accelerators and strategy a plain command uses: judged without Lightning (the connector check imports it).
PLAIN_ACCELERATORS = ("auto", "cpu")
PLAIN_STRATEGIES = ("auto",)
MAX_TIME_RULE = "DD:HH:MM:SS (e.g. 00:12:00:00) or a mapping such as {hours: 12}, as Lightning's Timer reads it"


class TrainerArgument(NamedTuple):
    """One `Trainer.__init__` argument: a strict validator of its annotation (pydantic's, so a value must already be
    of a type the Trainer takes: `True` is not a count of steps) and the annotation as a reader wants it."""

    check: TypeAdapter
    shown: str


@functools.cache
def trainer_parameters() -> dict[str, TrainerArgument]:
    """The installed `Trainer.__init__`'s keyword arguments (imports Lightning)."""
    try:
        import lightning
    except ImportError:
        raise ConfigError("trainer.*: Lightning is not installed in this environment (pip install lightning)") from None
    strict = ConfigDict(arbitrary_types_allowed=True, strict=True)
    parameters = list(inspect.signature(lightning.Trainer.__init__).parameters.values())[1:]  # after self
    found = {}
    for p in (p for p in parameters if p.kind is not p.VAR_KEYWORD):
        annotation = Any if p.annotation is p.empty else p.annotation
        shown = re.sub(r"\b(?:[A-Za-z_]\w*\.)+(\w+)", r"\1", inspect.formatannotation(annotation))  # no module paths
        found[p.name] = TrainerArgument(TypeAdapter(annotation, config=strict), shown)
    return found


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
        try:
            parameters[name].check.validate_python(value)
        except ValidationError:
            shown = parameters[name].shown
            raise ConfigError(f"trainer.{name}={value!r} is not allowed: the Trainer takes {shown}") from None
        if name in CHOICES and value is not None and value not in CHOICES[name]:
            raise ConfigError(f"trainer.{name}={value!r} is not allowed: one of {', '.join(CHOICES[name])} or null")
    if trainer.get("max_time") is not None:
        _check_max_time(trainer["max_time"])


def _check_max_time(value: Any) -> None:
    """Parsed by Lightning's own Timer, which the Trainer builds from `max_time` (a string that is not four
    colon-separated integers fails there, after the data and the model are built)."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.callbacks import Timer

    try:
        Timer(duration=value)
    except (ValueError, TypeError, MisconfigurationException):
        raise ConfigError(f"trainer.max_time={value!r} is not allowed: {MAX_TIME_RULE}") from None


def needs_lightning(trainer: Mapping[str, Any]) -> bool:
    """Whether the accelerator or strategy is one only Lightning can judge against this machine."""
    return trainer["accelerator"] not in PLAIN_ACCELERATORS or trainer["strategy"] not in PLAIN_STRATEGIES


def check_accelerator_and_strategy(trainer: Mapping[str, Any]) -> None:
    """Raise ConfigError when Lightning would refuse this accelerator, strategy, device count and precision on this
    machine (`mps` where there is none, `fsdp` on a CPU, DeepSpeed not installed), asked of Lightning's own
    connector, which the Trainer builds first: its rules stay Lightning's, with no model, data or process started."""
    devices = trainer["devices"]
    arguments = (
        str(trainer["accelerator"]),
        str(trainer["strategy"]),
        tuple(devices) if isinstance(devices, list | tuple) else devices,
        int(trainer["num_nodes"]),
        _resolved_precision(trainer["precision"], str(trainer["accelerator"])),
    )
    problem = _connector_problem(*arguments)
    if problem is not None:
        accelerator, strategy = arguments[:2]
        strategy_named = strategy not in PLAIN_STRATEGIES and strategy.split("_")[0] in problem.lower()
        key, value = ("strategy", strategy) if strategy_named else ("accelerator", accelerator)
        raise ConfigError(f"trainer.{key}={value!r} is not allowed here: Lightning says: {problem}")


def _resolved_precision(precision: Any, accelerator: str) -> Any:
    """The project's `auto` as run.builders.resolve_precision gives it: bf16-mixed on CUDA, 32-true elsewhere."""
    if precision != "auto":
        return precision
    import torch

    cuda = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    return "bf16-mixed" if cuda else "32-true"


@functools.cache
def _connector_problem(accelerator: str, strategy: str, devices: Any, num_nodes: int, precision: Any) -> str | None:
    """Lightning's first line of refusal for these arguments, or None; asked once per distinct combination."""
    connector = accelerator_connector_class()
    shown_devices = list(devices) if isinstance(devices, tuple) else devices
    try:
        with _lightning_quiet():
            connector(
                accelerator=accelerator,
                strategy=strategy,
                devices=shown_devices,
                num_nodes=num_nodes,
                precision=precision,
            )
    except Exception as error:  # noqa: BLE001 - Lightning refuses with several types (Misconfiguration, Value, Import)
        lines = str(error).strip().splitlines()
        return lines[0] if lines else type(error).__name__
    return None


@contextmanager
def _lightning_quiet() -> Iterator[None]:
    """The connector reports what it chose ("Using bfloat16 ...") as the Trainer would: not for a pre-check."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
