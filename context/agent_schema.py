"""An agent's ``jsonSchema``: checked to be self-contained and bounded, then compiled.

A schema comes from a tenant's template, so nothing in it may reach outside it or hold the
server (``docs/decisions/0092-agent-schemas-self-contained-and-bounded.md``):

- **No retrieval.** Validators resolve references in a registry that refuses every retrieval, so
  ``{"$ref": "file:///…"}`` or ``{"$ref": "http://…"}`` never reads a file or fetches a URL, and
  template validation refuses any reference that is not local (``#…``).
- **Linear patterns.** ``pattern`` and ``patternProperties`` (and ``additionalProperties``, which
  reads them) run in RE2, whose matching time is linear in the text; a pattern RE2 cannot run
  (lookaround, backreferences) is refused. ``unevaluatedProperties`` next to
  ``patternProperties`` would run Python's backtracking engine, so that pair is refused.
- **No quadratic keyword.** ``uniqueItems`` compares items by a canonical form in a set, not
  pair by pair.
- **A time limit.** Every keyword checks a deadline, so a schema whose combinators fan out
  exponentially (``allOf`` of ``allOf`` …) stops after ``SCHEMA_TIME_LIMIT_S`` with an error.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import re2
from jsonschema import Draft202012Validator, SchemaError, ValidationError, validators
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import Unresolvable

JSON = Any

# The longest a result's check against its schema may take.
SCHEMA_TIME_LIMIT_S: Final = 1.0
# The characters of an issue's path and message kept: a message quotes the value.
ISSUE_TEXT_MAX: Final = 500
# RE2's memory budget for one compiled pattern (its default): a bigger program is refused.
PATTERN_MAX_MEMORY: Final = 8 << 20
_REF_KEYWORDS: Final = ("$ref", "$dynamicRef", "$recursiveRef")


class SchemaRefused(Exception):
    """The schema cannot be used: ``message`` says why, for a template author."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class SchemaIssue:
    """One way an instance breaks the schema: where (``$.a[0]``) and why."""

    path: str
    message: str


def schema_problems(schema: JSON) -> list[str]:
    """Why ``schema`` cannot be an agent's ``jsonSchema``; empty when it can. The answer is kept
    per schema text: every completion of an agent checks the same schema again."""
    try:
        text = json.dumps(schema, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return _schema_problems(schema)
    return list(_schema_problems_of(text))


@functools.lru_cache(maxsize=256)
def _schema_problems_of(text: str) -> tuple[str, ...]:
    try:
        schema = json.loads(text)
    except RecursionError:
        return ("it is nested too deeply",)
    return tuple(_schema_problems(schema))


def _schema_problems(schema: JSON) -> list[str]:
    if not isinstance(schema, Mapping | bool):
        return ["it must be an object"]
    validator_class = validators.validator_for(schema, default=Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except SchemaError as exc:
        return [exc.message]
    except RecursionError:
        return ["it is nested too deeply"]
    problems: list[str] = []
    has_unevaluated = has_pattern_properties = False
    for key, value in _schema_entries(schema):
        if key in _REF_KEYWORDS and isinstance(value, str) and not value.startswith("#"):
            problems.append(
                f"{key} {json.dumps(value)[:200]} points outside the schema; only local "
                "references (#/$defs/…) are allowed"
            )
        elif key == "pattern" and isinstance(value, str):
            problems.extend(_pattern_problem(value))
        elif key == "patternProperties" and isinstance(value, Mapping):
            has_pattern_properties = True
            for name in value:
                problems.extend(_pattern_problem(name))
        elif key == "unevaluatedProperties":
            has_unevaluated = True
    if has_unevaluated and has_pattern_properties:
        problems.append(
            "unevaluatedProperties together with patternProperties is not supported: its "
            "patterns would run without a time bound"
        )
    return problems


def schema_issues(
    instance: JSON, schema: JSON, *, limit: int, time_limit: float = SCHEMA_TIME_LIMIT_S
) -> tuple[SchemaIssue, ...]:
    """How ``instance`` breaks ``schema`` (at most ``limit`` issues), or ``SchemaRefused``."""
    problems = schema_problems(schema)
    if problems:
        raise SchemaRefused(problems[0])
    validator = _bounded_class(validators.validator_for(schema, default=Draft202012Validator))(
        schema, registry=_REGISTRY
    )
    _DEADLINE.at = time.monotonic() + time_limit
    try:
        found = sorted(validator.iter_errors(instance), key=lambda e: (e.json_path, e.message))
    except _TimeUp:
        raise SchemaRefused(
            f"checking the result against the jsonSchema took more than {time_limit:g} s"
        ) from None
    except Unresolvable as exc:
        raise SchemaRefused(f"the jsonSchema has a reference it cannot resolve: {exc}") from None
    except RecursionError:
        raise SchemaRefused("the jsonSchema refers to itself without end") from None
    finally:
        _DEADLINE.at = None
    return tuple(
        SchemaIssue(path=_cut(e.json_path), message=_cut(e.message)) for e in found[:limit]
    )


def _cut(text: str) -> str:
    # A message quotes the value it is about, which may be a mebibyte of result; its end says
    # what is wrong.
    if len(text) <= ISSUE_TEXT_MAX:
        return text
    half = (ISSUE_TEXT_MAX - 1) // 2
    return f"{text[:half]}…{text[-half:]}"


def _schema_entries(schema: JSON) -> Iterator[tuple[str, JSON]]:
    # Every key of every object in the schema, without recursion (a schema may be deep).
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                yield key, value
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


def _pattern_problem(pattern: str) -> list[str]:
    try:
        _compiled(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        return [
            f"pattern {json.dumps(pattern)[:200]} cannot run in a linear-time engine ({reason}); "
            "lookaround and backreferences are not supported"
        ]
    return []


_RE2_OPTIONS: Final = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.max_mem = PATTERN_MAX_MEMORY


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _RE2_OPTIONS)


def _search(pattern: str, text: str) -> bool:
    return _compiled(pattern).search(text) is not None


# A registry's own retrieval refuses every URI; jsonschema's default one reads files and URLs.
_REGISTRY: Final[Registry[JSON]] = Registry()


class _TimeUp(Exception):
    """The deadline of the running check has passed."""


class _Deadline:
    """When the check running on this thread must stop (a thread-local: checks run in parallel)."""

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def at(self) -> float | None:
        return getattr(self._local, "at", None)

    @at.setter
    def at(self, value: float | None) -> None:
        self._local.at = value


_DEADLINE: Final = _Deadline()
Keyword = Callable[[Any, Any, Any, Any], Iterator[ValidationError] | None]


def _timed(keyword: Keyword) -> Keyword:
    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        deadline = _DEADLINE.at
        if deadline is not None and time.monotonic() > deadline:
            raise _TimeUp
        return keyword(validator, value, instance, schema) or iter(())

    return run


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    # jsonschema's own, with its patterns read by RE2.
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [
        key
        for key in instance
        if key not in properties and not any(_search(p, key) for p in patterns)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            listed = ", ".join(repr(each) for each in sorted(patterns))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")
        else:
            shown = ", ".join(repr(extra) for extra in extras)
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({shown} {verb} unexpected)"
            )


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    # jsonschema compares unsortable items (objects) pair by pair: quadratic in a 1 MiB array.
    if unique and validator.is_type(instance, "array") and not _all_unique(instance):
        yield ValidationError(f"{instance!r} has non-unique elements")


def _all_unique(items: list[Any]) -> bool:
    seen = set()
    for item in items:
        key = _canonical(item)
        if key in seen:
            return False
        seen.add(key)
    return True


def _canonical(value: Any) -> Any:
    """A hashable value equal for JSON-equal values: 1 and 1.0 alike, true and 1 apart."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return ("object", frozenset((key, _canonical(item)) for key, item in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_canonical(item) for item in value))
    return value


_OWN: Final[dict[str, Keyword]] = {
    "uniqueItems": _unique_items,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


@functools.cache
def _bounded_class(validator_class: type[Validator]) -> type[Validator]:
    keywords = {
        **validator_class.VALIDATORS,
        **{name: own for name, own in _OWN.items() if name in validator_class.VALIDATORS},
    }
    bounded: type[Validator] = validators.extend(
        validator_class, {name: _timed(keyword) for name, keyword in keywords.items()}
    )
    return bounded
