"""The one-line refusal every check gives, and the small tests of a value's type and range the checks share."""

from __future__ import annotations

import math
import re
from typing import Any

from omegaconf import DictConfig

from vit_locality.errors import ConfigError

# A name that becomes a directory (sweep_name, model.name, run_name): one path component, nothing a shell minds.
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


SAFE_NAME_RULE = "letters, digits and _ . + - (it names a directory), not starting with . or -, no '..'"


def check(condition: bool, key: str, value: Any, allowed: str) -> None:
    if not condition:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite(value: Any) -> bool:
    """inf passes `> 0`; a learning rate or a weight decay of inf trains nothing but NaNs."""
    return is_number(value) and math.isfinite(value)


def integer(section: DictConfig, prefix: str, name: str, minimum: int, maximum: int | None = None) -> None:
    value = section[name]
    within = is_int(value) and value >= minimum and (maximum is None or value <= maximum)
    allowed = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
    check(within, f"{prefix}.{name}" if prefix else name, value, allowed)


def flags(section: DictConfig, prefix: str, *names: str) -> None:
    for name in names:
        check(is_bool(section[name]), f"{prefix}.{name}", section[name], "true or false")


def one_of(key: str, value: Any, choices: tuple[str, ...]) -> None:
    check(isinstance(value, str) and value in choices, key, value, f"one of {', '.join(choices)}")


def safe_name(key: str, value: Any) -> None:
    """Names that end up in a run directory's path may not climb out of it or split it: `../x`, `a/b`."""
    text = str(value) if is_int(value) else value
    safe = isinstance(text, str) and SAFE_NAME.fullmatch(text) is not None and ".." not in text
    check(safe, key, value, SAFE_NAME_RULE)
