"""How a config field is declared: its type, its range with the words its refusal uses, and its identity mark."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, Field

from vit_locality.errors import ConfigError

# A name that becomes a directory (sweep_name, model.name, run_name): one path component, nothing a shell minds.
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
SAFE_NAME_RULE = "letters, digits and _ . + - (it names a directory), not starting with . or -, no '..'"
BOOL_RULE = "true or false"


# Marks a field whose value cannot change what a cell computes (a path, a worker count, a display choice): the run
# identity and the directory name leave it out. A field without the mark is part of the identity.
OUTSIDE_IDENTITY = "OUTSIDE_IDENTITY"


def outside_identity(hint: Any) -> Any:
    """`hint` with the OUTSIDE_IDENTITY mark (`root: outside_identity(str)`)."""
    return Annotated[hint, OUTSIDE_IDENTITY]


@dataclass(frozen=True)
class NeutralAt:
    """Marks the value at which a setting changes nothing (model.drop_path=0.0): the identity leaves it out there."""

    value: Any


def check(condition: bool, key: str, value: Any, allowed: str) -> None:
    """The one-line refusal of a rule across settings: `data.batch_size=1 is not allowed: >= 2 when ...`."""
    if not condition:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite(value: Any) -> bool:
    """A number that is not inf or nan (inf passes `> 0`)."""
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
    """An integer field in [minimum, maximum] (a bool is not one); `nullable`: null too; `below`: the words for a
    value under the minimum where they differ."""
    base = Optional[int] if nullable else int  # noqa: UP045
    extra = {"below": below} if below else None
    text = allowed or integer_rule(minimum, maximum) + (", or null" if nullable else "")
    return Annotated[
        base, Field(strict=True, ge=minimum, le=maximum, description=text, json_schema_extra=extra, **constraints)
    ]


def Number(allowed: str, **bounds: Any) -> Any:  # noqa: N802
    """A finite number (an int is taken as a float) within `bounds` (gt, ge, lt, le)."""
    return Annotated[float, Field(strict=True, allow_inf_nan=False, description=allowed, **bounds)]


def Flag() -> Any:  # noqa: N802
    return Annotated[bool, Field(strict=True, description=BOOL_RULE)]


def Choice(*names: str) -> Any:  # noqa: N802
    """One of a closed set of names (a plain string in the settings)."""
    return Annotated[Literal[names], Field(description=f"one of {', '.join(names)}")]


def Rule(test: Callable[[Any], bool], allowed: str, base: Any = Any) -> Any:  # noqa: N802
    """A field of type `base` whose value must pass `test` (what a range cannot say)."""

    def passes(value: Any) -> Any:
        if not test(value):
            raise ValueError(allowed)
        return value

    return Annotated[base, AfterValidator(passes), Field(description=allowed)]


def OneOf(choices: tuple[Any, ...], allowed: str | None = None) -> Any:  # noqa: N802
    """One of values of several types (True, False or "auto"): equal in value and in type (1 is not True)."""
    allowed = allowed or f"one of {', '.join(map(str, choices))}"
    return Rule(lambda value: any(type(value) is type(c) and value == c for c in choices), allowed)


def safe_name(value: Any) -> bool:
    """Names that end up in a run directory's path may not climb out of it or split it: `../x`, `a/b`."""
    text = str(value) if is_int(value) else value
    return isinstance(text, str) and SAFE_NAME.fullmatch(text) is not None and ".." not in text


def SafeName(base: Any = str) -> Any:  # noqa: N802
    return Rule(safe_name, SAFE_NAME_RULE, base)
