"""Cleaning the values of a message's structured output: bounded lines, texts and lists."""

from __future__ import annotations

import math
from typing import Any

from snapshots.state.shape import JSON, LIMITS


def as_dict(value: JSON) -> dict[str, JSON]:
    return value if isinstance(value, dict) else {}


def as_list(value: JSON) -> list[JSON]:
    return value if isinstance(value, list) else []


def keep_last(items: list[Any], limit: int) -> list[Any] | None:
    kept = [item for item in items if item]
    return kept[-limit:] or None


def string_list(value: JSON, limit: int) -> list[str] | None:
    return keep_last([one_line(item, LIMITS.list_item) for item in as_list(value)], limit)


def _scalar_text(value: JSON) -> str | None:
    """Strings as they are, finite numbers written out; anything else is not text."""
    if isinstance(value, str):
        return value
    number = finite_number(value)
    return number_text(number) if number is not None else None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def trimmed_text(value: JSON, limit: int) -> str | None:
    """Multi-line text, trimmed and cut to ``limit``."""
    text = _scalar_text(value)
    text = text.strip() if text is not None else None
    return _cut(text, limit) if text else None


def one_line(value: JSON, limit: int = LIMITS.summary) -> str | None:
    """One line: runs of whitespace (newlines included) become one space, cut to ``limit``."""
    text = _scalar_text(value)
    text = " ".join(text.split()) if text is not None else None
    return _cut(text, limit) if text else None


def first_line(value: JSON, limit: int = LIMITS.summary) -> str | None:
    """The first non-empty line of a text, without its Markdown heading marks."""
    text = _scalar_text(value)
    for raw_line in (text or "").splitlines():
        if line := one_line(raw_line.strip().lstrip("#"), limit):
            return line
    return None


def as_boolean(value: JSON) -> bool | None:
    """A boolean, or the strings "true"/"false" that a stringified placeholder produces."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def finite_number(value: JSON) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def number_text(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)
