"""Bounds on everything that enters the ledger, shared by the API, the pages, the imports and
the commands, so that no database ever sees a value it would refuse and no page a value it
cannot show.

- Timestamps are milliseconds within 0 … 253402300799999 (9999-12-31T23:59:59.999Z, the last
  instant Python's ``datetime`` and so the pages can show) and, where a clock is given, never
  more than an allowed skew ahead of it: a far-future timestamp would become the cluster's clock
  and every later message would inherit it.
- Integers stored in 32-bit columns (iterations, budgets) stay within int32; sequences and other
  64-bit values within int64.
- Strings hold no NUL (PostgreSQL refuses it in text and in ``jsonb``) and no lone surrogate
  (no database can encode one as UTF-8); JSON holds no NaN or Infinity (not JSON: PostgreSQL
  refuses them, SQLite's ``JSON_VALID`` check too) and nests at most a bounded depth.

Django-free: each check takes what it compares against (clock, skew, depth) as arguments. A
check either returns a problem (``…_problem``: text to put after the field's name, or ``None``)
or raises ``InvalidInput`` naming the field (``…_check``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from ledger.errors import InvalidInput

TIMESTAMP_MIN = 0
TIMESTAMP_MAX = 253_402_300_799_999
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
AGENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
AGENT_ID_RE = re.compile(AGENT_ID_PATTERN)

# A Python ``str`` holds code points, so any code point in D800-DFFF is a lone surrogate (a
# valid pair from JSON's ``\ud83d\ude00`` is decoded into one astral code point).
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
_SURROGATES = re.compile("[\ud800-\udfff]")
# The same two as JSON escapes: an escaped NUL or any surrogate escape. A match only means
# "look closer": ``\\u0000`` is an escaped backslash followed by text, and a pair is valid.
_SUSPICIOUS_ESCAPES = re.compile(r"\\u0000|\\u[dD][89a-fA-F]")
_CONTAINERS = (dict, list, tuple)


def text_problem(value: str) -> str | None:
    """What makes a string unstorable: a NUL character or a lone surrogate."""
    # An ASCII string has no surrogate: a look for NUL is the whole check (both tests in C,
    # a fraction of the pattern's search; a batch checks three strings a message).
    if value.isascii() and "\x00" not in value:
        return None
    found = _BAD_CHARS.search(value)
    if found is None:
        return None
    if found.group() == "\x00":
        return "must not contain NUL (\\u0000) characters"
    return "must not contain lone surrogates (invalid UTF-16 such as \\ud800)"


def text_check(value: str, *, field: str) -> None:
    """Raise ``InvalidInput`` naming ``field`` when the string cannot be stored."""
    if (problem := text_problem(value)) is not None:
        raise InvalidInput(f"{field} {problem}", details={"field": field})


def json_text_suspicious(text: str) -> bool:
    """Whether JSON text may hold a NUL or a lone surrogate; a fast filter before a walk.

    Each test is a scan in C that most texts pass at once (no ``\\u``, ASCII only).
    """
    if "\\u" in text and _SUSPICIOUS_ESCAPES.search(text) is not None:
        return True
    if "\x00" in text:
        return True
    return not text.isascii() and _SURROGATES.search(text) is not None


def json_problem(value: Any, *, max_depth: int, strings: bool = True) -> tuple[str, str] | None:
    """The first unstorable part of a JSON value as ``(path, problem)``, or ``None``.

    The path is relative (``""``, ``.key``, ``[3].key``). Strings, keys included, are checked
    unless ``strings`` is false (the caller has ruled them out on the text, see
    ``json_text_suspicious``). Iterative, so a deep value costs no recursion. A first pass
    only looks (a large body has millions of nodes); paths are built when it found something.
    """
    if _storable_json(value, max_depth=max_depth, strings=strings):
        return None
    for path, depth, item in _walk(value):
        if depth > max_depth:
            return path, f"nests deeper than {max_depth} levels"
        if isinstance(item, float) and not math.isfinite(item):
            return path, "must be a finite number (NaN and Infinity are not JSON)"
        if strings and isinstance(item, str) and (problem := text_problem(item)) is not None:
            return path, problem
    return None


def _storable_json(value: Any, *, max_depth: int, strings: bool) -> bool:
    """``json_problem`` without the paths: True when nothing is wrong."""
    if type(value) not in _CONTAINERS:
        return _storable_scalar(value, strings=strings)
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        container, depth = stack.pop()
        if depth >= max_depth:
            return False
        if type(container) is dict:
            if strings and not all(
                type(k) is not str or _BAD_CHARS.search(k) is None for k in container
            ):
                return False
            children: Any = container.values()
        else:
            children = container
        for child in children:
            kind = type(child)
            if kind in _CONTAINERS:
                stack.append((child, depth + 1))
            elif kind is float:
                if not math.isfinite(child):
                    return False
            elif strings and kind is str and _BAD_CHARS.search(child) is not None:
                return False
    return True


def _storable_scalar(value: Any, *, strings: bool) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if strings and isinstance(value, str):
        return _BAD_CHARS.search(value) is None
    return True


def _walk(value: Any) -> Iterator[tuple[str, int, Any]]:
    """Every node of a JSON value, keys as strings of their own, with its path and depth."""
    stack: list[tuple[str, int, Any]] = [("", 0, value)]
    while stack:
        path, depth, item = stack.pop()
        yield path, depth, item
        if isinstance(item, dict):
            for key, child in item.items():
                where = f"{path}.{key}" if isinstance(key, str) else f"{path}[{key!r}]"
                # A key is a string to store like any other.
                yield f"{path}[key {key!r}]", depth + 1, key
                stack.append((where, depth + 1, child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}[{i}]", depth + 1, child) for i, child in enumerate(item))


def json_check(value: Any, *, field: str, max_depth: int, strings: bool = True) -> None:
    """Raise ``InvalidInput`` naming the field and the path inside it when ``value`` cannot be
    stored."""
    found = json_problem(value, max_depth=max_depth, strings=strings)
    if found is not None:
        path, problem = found
        where = f"{field}{path}"
        raise InvalidInput(f"{where} {problem}", details={"field": field, "path": path})


class JsonValueError(ValueError):
    """A JSON value that cannot be stored: where in it (``path``) and why (``problem``)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path} {problem}".strip())
        self.path = path
        self.problem = problem


_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False
)


def json_encode_checked(value: Any, *, max_depth: int) -> str:
    """Compact JSON text of a storable value, or ``JsonValueError`` saying what is not.

    The value is serialised once, in C; only when the text looks suspicious (an escaped NUL, a
    surrogate, more brackets than the depth allows) or cannot be made is it walked in Python
    to find the precise problem, so clean values cost one ``json.dumps``.
    """
    try:
        text: str | None = _ENCODER.encode(value)
    except (ValueError, TypeError, RecursionError):
        text = None
    if text is None or json_text_suspicious(text) or _may_nest_deeper(text, max_depth):
        found = json_problem(value, max_depth=max_depth)
        if found is not None:
            raise JsonValueError(*found)
        if text is None:
            raise JsonValueError("", "is not a JSON value")
    return text


def _may_nest_deeper(text: str, max_depth: int) -> bool:
    # Brackets inside strings count too: this only decides whether to look closer.
    return text.count("{") + text.count("[") > max_depth


def integer_problem(value: object, *, minimum: int, maximum: int) -> str | None:
    """What is wrong with an integer that must lie within ``minimum`` … ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return "must be an integer"
    if not minimum <= value <= maximum:
        return f"must be between {minimum} and {maximum}, got {value}"
    return None


def integer_check(value: object, *, field: str, minimum: int, maximum: int) -> None:
    """Raise ``InvalidInput`` naming ``field`` when ``value`` is not an integer in bounds."""
    problem = integer_problem(value, minimum=minimum, maximum=maximum)
    if problem is not None:
        raise InvalidInput(f"{field} {problem}", details={"field": field, "value": repr(value)})


def timestamp_problem(
    value: object, *, now: int | None = None, max_ahead: int | None = None
) -> str | None:
    """What is wrong with a timestamp in ms: out of 0 … 9999-12-31, or too far ahead of ``now``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return "must be an integer of milliseconds since the epoch"
    if not TIMESTAMP_MIN <= value <= TIMESTAMP_MAX:
        return (
            f"must be between {TIMESTAMP_MIN} and {TIMESTAMP_MAX} "
            f"(9999-12-31T23:59:59.999Z), got {value}"
        )
    if now is not None and max_ahead is not None and value > now + max_ahead:
        return (
            f"is {value - now} ms ahead of the server's clock; at most {max_ahead} ms "
            "ahead is accepted"
        )
    return None


def timestamp_check(
    value: object, *, field: str, now: int | None = None, max_ahead: int | None = None
) -> None:
    """Raise ``InvalidInput`` naming ``field`` when ``value`` is not an acceptable timestamp."""
    problem = timestamp_problem(value, now=now, max_ahead=max_ahead)
    if problem is not None:
        raise InvalidInput(f"{field} {problem}", details={"field": field})


def agent_id_problem(value: object) -> str | None:
    """What is wrong with an agent id (SPEC §4: ``^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$``)."""
    if not isinstance(value, str):
        return "must be a string"
    if AGENT_ID_RE.fullmatch(value) is None:
        shown = value if len(value) <= 80 else value[:77] + "..."
        return (
            "must be 1-64 letters, digits or _.- characters, starting with a letter or a "
            f"digit (got {shown!r})"
        )
    return None


def agent_ids_problems(agents: object, *, where: str = "agents") -> list[tuple[str, str]]:
    """``(field, problem)`` for each agent of a config whose id breaks SPEC §4."""
    if not isinstance(agents, list):
        return []
    problems = []
    for index, agent in enumerate(agents):
        if isinstance(agent, dict) and (problem := agent_id_problem(agent.get("id"))) is not None:
            problems.append((f"{where}[{index}].id", problem))
    return problems


# --- making tenant text storable ----------------------------------------------------------------

REPLACEMENT = "\ufffd"
ELLIPSIS = "…"


def text_storable(value: str, *, max_chars: int | None = None, max_bytes: int | None = None) -> str:
    """Text from a script, a hook or an agent as it may be stored: each NUL and lone surrogate
    replaced by U+FFFD, then cut to ``max_chars`` code points and ``max_bytes`` bytes of UTF-8,
    a cut text ending in ``…``.

    The check functions above refuse such text from a client, who can send it again; text the
    server makes from a tenant's script has no one to refuse it to, and a draft that cannot be
    stored would lose the message that reports the failure.
    """
    if _BAD_CHARS.search(value) is not None:
        value = _BAD_CHARS.sub(REPLACEMENT, value)
    if max_chars is not None and len(value) > max_chars:
        value = value[: max(max_chars - 1, 0)] + ELLIPSIS
    if max_bytes is not None and len(value) * 4 > max_bytes:
        encoded = value.encode("utf-8")
        if len(encoded) > max_bytes:
            room = max(max_bytes - len(ELLIPSIS.encode("utf-8")), 0)
            value = encoded[:room].decode("utf-8", errors="ignore") + ELLIPSIS
    return value


def json_storable(value: Any) -> Any:
    """A JSON value with every string, keys included, made storable (``text_storable`` without a
    bound): the value itself when nothing needed a change. Iterative, so depth costs no stack."""
    if type(value) is str:
        return text_storable(value)
    if type(value) not in _CONTAINERS or _storable_json(value, max_depth=2**31, strings=True):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, key = stack.pop()
        if type(item) is str:
            parent[key] = text_storable(item)
        elif type(item) is dict:
            copied: dict[Any, Any] = {}
            parent[key] = copied
            for name, child in item.items():
                fixed = text_storable(name) if type(name) is str else name
                copied[fixed] = None
                stack.append((child, copied, fixed))
        elif type(item) in (list, tuple):
            listed: list[Any] = [None] * len(item)
            parent[key] = listed
            stack.extend((child, listed, i) for i, child in enumerate(item))
        else:
            parent[key] = item
    return root[0]
