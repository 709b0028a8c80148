"""pydantic's errors as the project's one line: `model.depth=0 is not allowed: an integer in [1, 64]`."""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from vit_locality.config.schema import VARIANTS, variant_of
from vit_locality.errors import ConfigError

TYPE_WORDS = {
    "float_type": "a number",
    "float_parsing": "a number",
    "int_type": "an integer",
    "int_parsing": "an integer",
}


@functools.cache
def _adapter(cls: Any) -> TypeAdapter:
    return TypeAdapter(cls)


def refusal(error: ValidationError, cls: Any, values: Any, prefix: str = "") -> ConfigError:
    """pydantic's first error as the dotted setting, its value as composed and what the field allows (its
    description), or the rule's own ConfigError where a model validator raised one."""
    first = error.errors(include_url=False)[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):
        return cause
    loc = [str(part) for part in first["loc"]]
    if first["type"] == "missing":
        return missing(".".join(part for part in (prefix, *loc) if part))
    if first["type"] == "extra_forbidden":
        return ConfigError(f"{'.'.join(part for part in (prefix, *loc) if part)}: no such setting")
    path, field = _declared_field(cls, values, loc)
    below = (field.json_schema_extra or {}).get("below") if field is not None else None
    under = first["type"] in ("greater_than", "greater_than_equal") and below
    allowed = below if under else field.description if field is not None else None
    if allowed and first["type"] in TYPE_WORDS and allowed[:1] in "<>":  # `abc` for `> 0`: say the type first
        allowed = f"{TYPE_WORDS[first['type']]} {allowed}"
    if not allowed and isinstance(cause, ValueError):  # a rule's own words (a field inside Optional[...])
        allowed = str(cause)
    value = values
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else first["input"]
    key = ".".join([prefix, *path] if prefix else path)
    return ConfigError(f"{key}={value!r} is not allowed: {allowed or first['msg']}")


def _declared_field(cls: Any, values: Any, loc: list[str]) -> tuple[list[str], Any]:
    """The path down to the deepest declared field on `loc`, and that field's FieldInfo (None if none)."""
    path: list[str] = []
    field = None
    model: Any = cls
    for part in loc:
        model = _model_in(model, path[-1] if path else "", values)
        if model is None or part not in model.model_fields:
            break
        path.append(part)
        field = model.model_fields[part]
        values = values.get(part) if isinstance(values, Mapping) else None
        model = field.annotation
    return path, field


def _model_in(hint: Any, section: str, values: Any) -> Any:
    """The section model a field's type holds (`Optional[WandbConfig]` -> WandbConfig; a data or model section's
    variant), or None."""
    if section in VARIANTS and isinstance(hint, type) and issubclass(hint, BaseModel) and hint in VARIANTS[section]:
        return variant_of(section, values)
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def typed_section(cls: Any, values: Any, prefix: str) -> Any:
    """One section's values validated into `cls` (raises the one-line ConfigError)."""
    try:
        return _adapter(cls).validate_python(values)
    except ValidationError as error:
        raise refusal(error, cls, values, prefix) from None


def missing(key: str) -> ConfigError:
    return ConfigError(f"{key}: missing, and the run needs it (deleted with ~{key}?)")
