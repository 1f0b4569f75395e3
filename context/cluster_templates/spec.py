"""What a template declares (SPEC §4): its error, its params and the checks of a param value."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from ledger.errors import InvalidInput

JSON = Any

PARAM_TYPES: Final = ("string", "number", "integer", "boolean")

# Collects one problem: (field path, message).
Report = Callable[[str, str], None]


class TemplateError(InvalidInput, ValueError):
    """A template or its params are invalid; ``details["errors"]`` lists every problem found.

    Each problem is ``{"field": "agents[1].prompt", "message": "..."}``.
    """

    code = "template_invalid"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details=details)


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One declared template param."""

    name: str
    type: str
    enum: tuple[JSON, ...] | None = None
    default: JSON = None
    has_default: bool = False
    description: str = ""

    @property
    def required(self) -> bool:
        return not self.has_default


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """A checked template; ``raw`` is a private deep copy of the source JSON."""

    name: str
    description: str
    params: tuple[ParamSpec, ...]
    agents: tuple[dict[str, JSON], ...]
    raw: dict[str, JSON] = field(repr=False, compare=False)

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def required_params(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.required)


# --- param values --------------------------------------------------------------------------------


def is_number(value: JSON) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def has_type(kind: str, value: JSON) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return is_number(value)


def value_error(param: ParamSpec, value: JSON) -> str | None:
    if not has_type(param.type, value):
        return f"{param.name} must be of type {param.type}, got {show(value)}"
    if param.enum is not None and not any(same_value(value, option) for option in param.enum):
        options = ", ".join(show(option) for option in param.enum)
        return f"{param.name} must be one of {options}, got {show(value)}"
    return None


def same_value(left: JSON, right: JSON) -> bool:
    """Strict equality: ``true`` is not ``1``, but ``2`` equals ``2.0``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if is_number(left) and is_number(right):
        return bool(left == right)
    return type(left) is type(right) and bool(left == right)


def show(value: JSON) -> str:
    return json.dumps(value, default=repr, ensure_ascii=False)


def template_error(problems: list[dict[str, str]]) -> TemplateError:
    first = problems[0]["message"]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return TemplateError(f"{first}{more}", {"errors": problems})
