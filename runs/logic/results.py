"""Reading an agent's result from its output and checking it against its ``jsonSchema``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from jsonschema import Draft202012Validator, SchemaError, validators

from runs.logic.records import JSON, LogicError, ParsedResult, SchemaIssue

# An AGENT_SCHEMA_WARNING lists this many mismatches at most.
SCHEMA_ISSUES_MAX: Final = 50


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
    stripped = text.strip()
    if not stripped:
        return LogicError("output", "the agent's output is empty; a JSON object was expected")
    try:
        whole = _DECODER.decode(stripped)
    except ValueError:
        pass
    else:
        if isinstance(whole, dict):
            return whole
        kind = type(whole).__name__ if whole is not None else "null"
        return LogicError("output", f"the agent's output is JSON ({kind}), not a JSON object")
    found = _last_object(text)
    if found is None:
        return LogicError("output", "the agent's output holds no JSON object")
    return found


def _last_object(text: str) -> dict[str, JSON] | None:
    # Scan forward from each "{" and skip over every object found, so that an object nested in
    # a later one is never mistaken for the result.
    last: dict[str, JSON] | None = None
    position = text.find("{")
    while position != -1:
        try:
            value, end = _DECODER.raw_decode(text, position)
        except ValueError:
            position = text.find("{", position + 1)
            continue
        last = value
        position = text.find("{", end)
    return last


def _schema_issues(data: dict[str, JSON], schema: JSON) -> tuple[SchemaIssue, ...] | LogicError:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            return LogicError("schema", f"the agent's jsonSchema is not JSON: {exc}")
    if not isinstance(schema, Mapping | bool):
        return LogicError("schema", "the agent's jsonSchema must be an object")
    validator_class = validators.validator_for(schema, default=Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except SchemaError as exc:
        return LogicError("schema", f"the agent's jsonSchema is invalid: {exc.message}")
    found = sorted(
        validator_class(schema).iter_errors(data), key=lambda e: (e.json_path, e.message)
    )
    return tuple(
        SchemaIssue(path=e.json_path, message=e.message) for e in found[:SCHEMA_ISSUES_MAX]
    )
