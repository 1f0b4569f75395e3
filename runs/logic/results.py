"""Reading an agent's result from its output and checking it against its ``jsonSchema``."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final

from context.agent_schema import SchemaRefused, schema_issues
from ledger.validation import JsonValueError, json_encode_checked
from runs.logic.records import JSON, LogicError, ParsedResult, SchemaIssue

# An AGENT_SCHEMA_WARNING lists this many mismatches at most.
SCHEMA_ISSUES_MAX: Final = 50
# The output a result is read from (the API's bound on a completion's output and result text).
OUTPUT_MAX_CHARS: Final = 2_000_000
# A result kept with its task and shown by the API: its JSON text and its nesting.
RESULT_MAX_BYTES: Final = 1 << 20
RESULT_MAX_DEPTH: Final = 64
# The characters all attempts at finding the last object may read, per character of output.
_SCAN_FACTOR: Final = 4
_SCAN_SLACK: Final = 1 << 16
_FIRST_SLICE: Final = 512
# A failed attempt costs a Python exception: counted as this many characters read.
_ATTEMPT_COST: Final = 64
# Where an object can start: a brace before a key or before its end.
_OBJECT_START: Final = re.compile(r'\{\s*["}]')
_CUT_MARGIN: Final = 16


def _no_constant(name: str) -> JSON:
    # NaN and Infinity are not JSON; Python's parser would accept them.
    raise ValueError(f"{name} is not JSON")


_DECODER: Final = json.JSONDecoder(parse_constant=_no_constant)


def result_parse(
    output_text: str,
    *,
    output_format: str = "json",
    json_schema: JSON = None,
    strict: bool = False,
) -> ParsedResult | LogicError:
    """Read the result object from an agent's output and check it against ``json_schema``.

    With ``outputFormat: "text"`` there is no result object. Otherwise the whole output must be a
    JSON object, or else the last JSON object written in it (after any prose, inside a code
    fence, on the last line of a stream of JSON lines) is the result.
    """
    if output_format == "text":
        return ParsedResult(data=None)
    data = _result_object(output_text)
    if isinstance(data, LogicError):
        return data
    if json_schema is None:
        return ParsedResult(data=data)
    issues = _schema_issues(data, json_schema)
    if isinstance(issues, LogicError):
        return issues
    return ParsedResult(data=data, schema_issues=issues, accepted=not (strict and issues))


def _result_object(text: str) -> dict[str, JSON] | LogicError:
    if len(text) > OUTPUT_MAX_CHARS:
        return LogicError(
            "output",
            f"the text the result is read from is {len(text)} characters; "
            f"at most {OUTPUT_MAX_CHARS}",
        )
    stripped = text.strip()
    if not stripped:
        return LogicError("output", "the agent's output is empty; a JSON object was expected")
    try:
        whole = _DECODER.decode(stripped)
    except (ValueError, RecursionError):
        pass
    else:
        if isinstance(whole, dict):
            return _bounded(whole)
        kind = type(whole).__name__ if whole is not None else "null"
        return LogicError("output", f"the agent's output is JSON ({kind}), not a JSON object")
    found = last_json_object(text)
    if found is None:
        return LogicError("output", "the agent's output holds no JSON object")
    return _bounded(found)


def _bounded(data: dict[str, JSON]) -> dict[str, JSON] | LogicError:
    try:
        encoded = json_encode_checked(data, max_depth=RESULT_MAX_DEPTH)
    except JsonValueError as error:
        where = error.path.lstrip(".") or "the result"
        return LogicError("output", f"the result cannot be kept: {where} {error.problem}")
    size = len(encoded.encode("utf-8"))
    if size > RESULT_MAX_BYTES:
        return LogicError(
            "output", f"the result is {size} bytes of JSON; at most {RESULT_MAX_BYTES} are kept"
        )
    return data


def last_json_object(text: str) -> dict[str, JSON] | None:
    """The last JSON object of ``text`` that is not inside another one, in linear time.

    Each ``{`` is tried in turn and every object found is skipped over, so that an object nested
    in a later one is never mistaken for the result. A failed attempt is decoded from a slice
    (a decode error counts lines from the start of the string it was given) that grows only while
    the failure is at its end, and the characters all attempts read are capped at
    ``_SCAN_FACTOR`` times the text: text built to make every ``{`` read to the end (deep,
    unclosed objects) ends the search early instead of taking seconds of CPU.
    """
    last: dict[str, JSON] | None = None
    budget = _SCAN_FACTOR * len(text) + _SCAN_SLACK
    start = _OBJECT_START.search(text)
    while start is not None and budget > 0:
        found, cost = _object_at(text, start.start())
        budget -= cost
        if found is None:
            start = _OBJECT_START.search(text, start.start() + 1)
            continue
        value, end = found
        if isinstance(value, dict):
            last = value
        start = _OBJECT_START.search(text, end)
    return last


def _object_at(text: str, start: int) -> tuple[tuple[JSON, int] | None, int]:
    """The JSON value that starts at ``start`` and where it ends, and the characters read."""
    size = _FIRST_SLICE
    read = 0
    while True:
        piece = text[start : start + size]
        try:
            value, end = _DECODER.raw_decode(piece)
        except ValueError as error:
            pos = getattr(error, "pos", 0)
            cut = pos >= len(piece) - _CUT_MARGIN or str(getattr(error, "msg", "")).startswith(
                "Unterminated"
            )
            if cut and start + size < len(text):
                read += len(piece)
                size *= 4
                continue
            return None, read + pos + _ATTEMPT_COST
        except RecursionError:
            # Deeper than the parser goes, so deeper than any result kept.
            return None, read + len(piece)
        return (value, start + end), read + end


def _schema_issues(data: dict[str, JSON], schema: JSON) -> tuple[SchemaIssue, ...] | LogicError:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            return LogicError("schema", f"the agent's jsonSchema is not JSON: {exc}")
    if not isinstance(schema, Mapping | bool):
        return LogicError("schema", "the agent's jsonSchema must be an object")
    try:
        found = schema_issues(data, schema, limit=SCHEMA_ISSUES_MAX)
    except SchemaRefused as exc:
        return LogicError("schema", f"the agent's jsonSchema is invalid: {exc.message}")
    return tuple(SchemaIssue(path=issue.path, message=issue.message) for issue in found)
