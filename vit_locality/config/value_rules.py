"""The pieces a typed config field is declared with: its range (a pydantic `Field` constraint or validator) and,
beside it, `Allowed`, the words the one-line refusal uses for what the field takes.

The sections (schema.py) are stdlib dataclasses, so that Hydra's ConfigStore types the config while composing and
pydantic's TypeAdapter checks the ranges once after (settings.py); `Annotated` carries the pydantic metadata, which
OmegaConf ignores (it sees the plain type). Torch-free and Lightning-free.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Optional

from pydantic import AfterValidator, Field

from vit_locality.errors import ConfigError

# A name that becomes a directory (sweep_name, model.name, run_name): one path component, nothing a shell minds.
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
SAFE_NAME_RULE = "letters, digits and _ . + - (it names a directory), not starting with . or -, no '..'"
BOOL_RULE = "true or false"


@dataclass(frozen=True)
class Allowed:
    """What a field allows, in the words of its one-line refusal (`model.depth=0 is not allowed: <text>`); `below`:
    the words for a value under its minimum, where they differ (a count >= 1 with a large cap says so)."""

    text: str
    below: str | None = None


class OutsideIdentity:
    """Marks a field whose value cannot change what a cell computes (a path, a worker count, a display or logging
    choice, device placement): the run identity and the directory name leave it out (identity.NOT_IDENTITY is read
    from these marks). A field without the mark is part of the identity, so a new setting is unless marked."""

    def __repr__(self) -> str:
        return "OUTSIDE_IDENTITY"


OUTSIDE_IDENTITY = OutsideIdentity()


def outside_identity(hint: Any) -> Any:
    """`hint` with the OUTSIDE_IDENTITY mark (`root: outside_identity(str)`)."""
    return Annotated[hint, OUTSIDE_IDENTITY]


class StrChoice(str, Enum):
    """A closed set of names: each member equals its string, and prints and formats as it (`f"{units}"` gives
    `grid`, not `Units.grid`), so code comparing or formatting the setting as a string works unchanged."""

    __str__ = str.__str__
    __format__ = str.__format__


def check(condition: bool, key: str, value: Any, allowed: str) -> None:
    """The one-line refusal of a rule across settings: `data.batch_size=1 is not allowed: >= 2 when ...`."""
    if not condition:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite(value: Any) -> bool:
    """A number that is not inf or nan (inf passes `> 0`; a learning rate of inf trains nothing but NaNs)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def integer_rule(minimum: int, maximum: int | None = None) -> str:
    return f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"


def Int(  # noqa: N802
    minimum: int,
    maximum: int | None = None,
    allowed: str | None = None,
    nullable: bool = False,
    below: str | None = None,
    **constraints: Any,
) -> Any:
    """An integer field in [minimum, maximum] (a bool is not one); `nullable`: null too."""
    rule = Allowed(allowed or integer_rule(minimum, maximum), below)
    base = Optional[int] if nullable else int  # noqa: UP045 (OmegaConf reads Optional, not `int | None`)
    return Annotated[base, Field(strict=True, ge=minimum, le=maximum, **constraints), rule]


def Number(allowed: str, **bounds: Any) -> Any:  # noqa: N802
    """A finite number (an int is taken as a float) within `bounds` (gt, ge, lt, le)."""
    return Annotated[float, Field(strict=True, allow_inf_nan=False, **bounds), Allowed(allowed)]


def Flag() -> Any:  # noqa: N802
    return Annotated[bool, Field(strict=True), Allowed(BOOL_RULE)]


def Rule(test: Callable[[Any], bool], allowed: str, base: Any = Any) -> Any:  # noqa: N802
    """A field of type `base` whose value must pass `test` (what a range cannot say: a set of values of several
    types, a pattern); `base` Any where the values span types OmegaConf cannot express (it has no unions)."""

    def passes(value: Any) -> Any:
        if not test(value):
            raise ValueError(allowed)
        return value

    return Annotated[base, AfterValidator(passes), Allowed(allowed)]


def OneOf(choices: Iterable[Any], allowed: str | None = None, base: Any = str) -> Any:  # noqa: N802
    choices = tuple(choices)
    return Rule(lambda value: value in choices, allowed or f"one of {', '.join(map(str, choices))}", base)


def safe_name(value: Any) -> bool:
    """Names that end up in a run directory's path may not climb out of it or split it: `../x`, `a/b`."""
    text = str(value) if is_int(value) else value
    return isinstance(text, str) and SAFE_NAME.fullmatch(text) is not None and ".." not in text


def SafeName(base: Any = str) -> Any:  # noqa: N802
    return Rule(safe_name, SAFE_NAME_RULE, base)
