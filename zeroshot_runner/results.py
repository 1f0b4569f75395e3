"""Reading what an agent printed: its text, the final JSON object in it, usage, a reported error.

Pure functions over strings. Three shapes are understood:

- plain output: any text; the result is its last complete top-level JSON object;
- a Claude Code result envelope (``claude -p --output-format json``, or the last line of
  ``stream-json``): ``{"type": "result", "result": "<the agent's text>", "usage": …,
  "total_cost_usd": …}``; the agent's text is ``result`` and the JSON object is read from it;
- a Codex event stream (``codex exec --json``): JSON lines of ``thread.*``/``turn.*``/``item.*``
  events; the agent's text is the last ``agent_message`` item, usage comes from
  ``turn.completed``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from zeroshot_runner.records import JSON, Completed, Failed, Outcome, Usage

_CODEX_EVENTS = frozenset(
    {
        "thread.started",
        "turn.started",
        "turn.completed",
        "turn.failed",
        "item.started",
        "item.updated",
        "item.completed",
        "error",
    }
)
# How much of the output a "no JSON object" error quotes.
_TAIL_CHARS = 500
# Where an object may begin: a brace before a key or the closing brace. Code's braces
# ({x: 1}, {'a': 1}, { return }) are passed over without decoding.
_OBJECT_START = re.compile(r'\{\s*["}]')
_FIRST_SLICE = 4096
# A decoding error this close to the end of a slice may only mean that the slice cut the object.
_CUT_MARGIN = 32
# What all attempts at finding objects may read, per character of output; a failed attempt
# costs a Python exception, counted as _ATTEMPT_COST characters.
_SCAN_FACTOR = 4
_SCAN_SLACK = 1 << 16
_ATTEMPT_COST = 64


@dataclass(frozen=True, slots=True)
class AgentOutput:
    """An agent's output, read: its own text, its final JSON object, usage, a reported error."""

    text: str
    result: dict[str, JSON] | None
    usage: Usage | None
    error: str | None = None


def read_agent_output(output: str) -> AgentOutput:
    """Read an agent's whole output (plain text, a Claude envelope or a Codex event stream)."""
    objects = list(top_level_objects(output))
    last = objects[-1] if objects else None
    if last is not None and _is_claude_envelope(last):
        return read_claude_envelope(last)
    if last is not None and _is_codex_stream(objects):
        return _read_codex_events(objects)
    return AgentOutput(
        text=output, result=last, usage=read_usage(last) if last is not None else None
    )


def outcome_from_output(output: str, *, wants_json: bool) -> Outcome:
    """Turn an agent's output into the task's outcome; a JSON agent must end with an object."""
    return outcome_from_agent_output(read_agent_output(output), wants_json=wants_json)


def outcome_from_agent_output(read: AgentOutput, *, wants_json: bool) -> Outcome:
    """The task's outcome for an already read output."""
    if read.error is not None:
        return Failed(error=f"the agent reported an error: {read.error}", retryable=True)
    if not wants_json:
        return Completed(result=None, output=read.text, usage=read.usage)
    if read.result is None:
        tail = read.text.strip()[-_TAIL_CHARS:]
        described = f"its output ends with: {tail}" if tail else "its output is empty"
        return Failed(error=f"the agent's output holds no JSON object; {described}", retryable=True)
    return Completed(result=read.result, output=read.text, usage=read.usage)


def last_json_object(text: str) -> dict[str, JSON] | None:
    """The last complete top-level JSON object in ``text``, or ``None``."""
    last = None
    for value in top_level_objects(text):
        last = value
    return last


def top_level_objects(text: str) -> Iterator[dict[str, JSON]]:
    """Every complete JSON object in ``text`` that is not inside another one, in order.

    The characters all attempts read are capped at ``_SCAN_FACTOR`` times the text, so output
    built to make every brace read far (deep, unclosed objects) ends the search early instead of
    taking seconds of CPU; each failed attempt counts ``_ATTEMPT_COST`` for its exception.
    """
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    budget = _SCAN_FACTOR * len(text) + _SCAN_SLACK
    position = 0
    while budget > 0 and (start := _OBJECT_START.search(text, position)) is not None:
        found, cost = _object_at(decoder, text, start.start())
        budget -= cost
        if found is None:
            position = start.start() + 1
            continue
        value, position = found
        yield value


def _object_at(
    decoder: json.JSONDecoder, text: str, start: int
) -> tuple[tuple[dict[str, JSON], int] | None, int]:
    # A JSONDecodeError counts the lines from the start of the string it was given, so decoding
    # the whole output at each brace made a long output full of braces quadratic. A slice keeps
    # a failure's cost local; it grows only while the failure is at its end (a cut object).
    size = _FIRST_SLICE
    read = 0
    while True:
        piece = text[start : start + size]
        try:
            value, end = decoder.raw_decode(piece)
        except json.JSONDecodeError as error:
            cut = start + size < len(text) and (
                error.pos >= len(piece) - _CUT_MARGIN or error.msg.startswith("Unterminated")
            )
            if not cut:
                return None, read + error.pos + _ATTEMPT_COST
            read += len(piece)
            size *= 4
            continue
        except (ValueError, RecursionError):
            # Deeper than the parser goes: no result the server would keep.
            return None, read + len(piece)
        found = (value, start + end) if isinstance(value, dict) else None
        return found, read + end


def read_usage(source: Mapping[str, JSON]) -> Usage | None:
    """Usage fields of an agent's JSON, when present: tokens, cost, model, by their usual names."""
    nested = source.get("usage")
    usage: Mapping[str, JSON] = nested if isinstance(nested, Mapping) else {}
    input_tokens = _first_count(
        usage.get("input_tokens"),
        usage.get("inputTokens"),
        usage.get("prompt_tokens"),
        source.get("inputTokens"),
        source.get("input_tokens"),
    )
    output_tokens = _first_count(
        usage.get("output_tokens"),
        usage.get("outputTokens"),
        usage.get("completion_tokens"),
        source.get("outputTokens"),
        source.get("output_tokens"),
    )
    cost = _first_amount(
        source.get("total_cost_usd"),
        source.get("costUsd"),
        usage.get("costUsd"),
        usage.get("total_cost_usd"),
    )
    if input_tokens is None and output_tokens is None and cost is None:
        return None
    return Usage(
        input_tokens=input_tokens or 0,
        output_tokens=output_tokens or 0,
        model=_model_name(source),
        cost_usd=cost,
    )


def _is_claude_envelope(value: Mapping[str, JSON]) -> bool:
    return value.get("type") == "result" and (
        isinstance(value.get("result"), str) or isinstance(value.get("structured_output"), dict)
    )


def read_claude_envelope(envelope: Mapping[str, JSON]) -> AgentOutput:
    text = envelope.get("result")
    text = text if isinstance(text, str) else ""
    structured = envelope.get("structured_output")
    error = None
    if envelope.get("is_error") is True:
        subtype = envelope.get("subtype")
        error = text.strip() or (subtype if isinstance(subtype, str) else "is_error")
    return AgentOutput(
        text=text,
        result=structured if isinstance(structured, dict) else last_json_object(text),
        usage=read_usage(envelope),
        error=error,
    )


def _is_codex_stream(objects: list[dict[str, JSON]]) -> bool:
    # Codex opens every run with thread.started; requiring it keeps an agent's own
    # {"type": "error", …} result from being read as an event stream.
    return objects[-1].get("type") in _CODEX_EVENTS and any(
        value.get("type") in ("thread.started", "turn.started") for value in objects
    )


def _read_codex_events(events: list[dict[str, JSON]]) -> AgentOutput:
    text = ""
    usage = None
    error = None
    for event in events:
        kind = event.get("type")
        item = event.get("item")
        if kind == "item.completed" and isinstance(item, Mapping):
            if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                text = item["text"]
        elif kind == "turn.completed":
            usage = read_usage(event)
        elif kind in ("turn.failed", "error"):
            error = _codex_error(event)
    return AgentOutput(text=text, result=last_json_object(text), usage=usage, error=error)


def _codex_error(event: Mapping[str, JSON]) -> str:
    detail = event.get("error")
    if isinstance(detail, Mapping) and isinstance(detail.get("message"), str):
        return str(detail["message"])
    message = event.get("message")
    return message if isinstance(message, str) else json.dumps(event)[:_TAIL_CHARS]


def _model_name(source: Mapping[str, JSON]) -> str | None:
    model = source.get("model")
    if isinstance(model, str) and model:
        return model
    # Claude's envelope names its model(s) only as the keys of modelUsage.
    per_model = source.get("modelUsage")
    if isinstance(per_model, Mapping) and per_model:
        return str(next(iter(per_model)))
    return None


def _first_count(*values: JSON) -> int | None:
    for value in values:
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return None


def _first_amount(*values: JSON) -> float | None:
    for value in values:
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return float(value)
    return None


def _reject_constant(name: str) -> JSON:
    # NaN and Infinity are not JSON; an object holding them is not a result the server can store.
    raise ValueError(f"{name} is not valid JSON")
