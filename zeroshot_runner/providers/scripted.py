"""Canned results from a JSON file, keyed by agent and iteration: for demos and tests.

The file maps agent ids (``"*"``: any other agent) to their entries, either as a list (the
n-th entry serves iteration n, the last one every later iteration) or as an object keyed by
iteration (``"1"``, ``"2"``, …; ``"*"`` for the others, else the highest one)::

    {
      "worker": [{"result": {"summary": "first try"}}, {"result": {"summary": "fixed"}}],
      "validator": {
        "1": {"result": {"approved": false}, "output": ["checking…"], "delay": 1.5},
        "*": {"result": {"approved": true}, "usage": {"inputTokens": 900, "outputTokens": 40}}
      },
      "*": [{"fail": {"error": "no script for this agent", "retryable": false}}]
    }

An entry may give ``result`` (an object; ``{}`` when left out), ``output`` (lines, or one
string, streamed as the agent's output), ``delay`` (seconds the run takes, spread over the
lines), ``usage`` (the work API's usage object) and ``fail`` (``{error, retryable?}`` or a
string) to simulate a failure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from zeroshot_runner.providers.base import Job
from zeroshot_runner.records import JSON, Completed, Failed, Outcome, Usage

FALLBACK = "*"


class ScriptError(ValueError):
    """The script file cannot be read or does not have the documented shape."""


@dataclass(frozen=True, slots=True)
class ScriptEntry:
    """What one scripted run does."""

    result: dict[str, JSON]
    output: tuple[str, ...] = ()
    delay: float = 0.0
    usage: Usage | None = None
    failure: Failed | None = None


@dataclass(frozen=True, slots=True)
class AgentScript:
    """An agent's entries by iteration, and the one that serves any other iteration."""

    by_iteration: Mapping[int, ScriptEntry]
    fallback: ScriptEntry

    def entry(self, iteration: int) -> ScriptEntry:
        """The entry for ``iteration``."""
        return self.by_iteration.get(iteration, self.fallback)


class ScriptedProvider:
    """Plays a script: each task gets its agent's entry for its iteration."""

    def __init__(self, script: Mapping[str, AgentScript]) -> None:
        self.script = script

    @classmethod
    def from_file(cls, path: Path) -> ScriptedProvider:
        """Load and check a script file; raises ScriptError."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ScriptError(f"{path}: {error}") from error
        return cls(script_from_json(data, source=str(path)))

    def run(self, job: Job) -> Outcome:
        """Emit the entry's lines over its delay, then hand back its result or failure."""
        claim = job.claim
        agent_script = self.script.get(claim.agent_id, self.script.get(FALLBACK))
        if agent_script is None:
            return Failed(
                error=f"the script has no entry for agent {claim.agent_id}", retryable=False
            )
        entry = agent_script.entry(claim.iteration)
        pause = entry.delay / (len(entry.output) + 1)
        for line in entry.output:
            if job.stop.wait(pause):
                return Failed(error="the runner stopped the scripted agent", retryable=True)
            job.emit(line)
        if job.stop.wait(pause):
            return Failed(error="the runner stopped the scripted agent", retryable=True)
        if entry.failure is not None:
            return entry.failure
        text = "\n".join(entry.output) if entry.output else json.dumps(entry.result)
        return Completed(
            result=entry.result if claim.agent.wants_json else None,
            output=text,
            usage=entry.usage,
        )

    def close(self) -> None:
        """Nothing to release."""


def script_from_json(data: JSON, *, source: str = "script") -> dict[str, AgentScript]:
    """Check a parsed script file and turn it into per-agent scripts; raises ScriptError."""
    if not isinstance(data, dict) or not data:
        raise ScriptError(f"{source}: must be a non-empty object keyed by agent id")
    return {
        agent: _agent_script(entries, where=f"{source}: {agent}") for agent, entries in data.items()
    }


def _agent_script(entries: JSON, *, where: str) -> AgentScript:
    if isinstance(entries, list):
        if not entries:
            raise ScriptError(f"{where}: has no entries")
        parsed = [_entry(item, where=f"{where}[{n}]") for n, item in enumerate(entries)]
        return AgentScript(
            by_iteration=dict(enumerate(parsed, start=1)),
            fallback=parsed[-1],
        )
    if isinstance(entries, dict) and entries:
        by_iteration: dict[int, ScriptEntry] = {}
        fallback = None
        for key, item in entries.items():
            entry = _entry(item, where=f'{where}["{key}"]')
            if key == FALLBACK:
                fallback = entry
            elif key.isdigit() and int(key) > 0:
                by_iteration[int(key)] = entry
            else:
                raise ScriptError(f'{where}: key "{key}" is neither an iteration nor "*"')
        if fallback is None:
            fallback = by_iteration[max(by_iteration)]
        return AgentScript(by_iteration=by_iteration, fallback=fallback)
    raise ScriptError(f"{where}: must be a non-empty list or object of entries")


def _entry(item: JSON, *, where: str) -> ScriptEntry:
    if not isinstance(item, dict):
        raise ScriptError(f"{where}: an entry must be an object")
    unknown = set(item) - {"result", "output", "delay", "usage", "fail"}
    if unknown:
        raise ScriptError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    result = item.get("result", {})
    if not isinstance(result, dict):
        raise ScriptError(f"{where}.result: must be an object")
    output = item.get("output", [])
    if isinstance(output, str):
        output = output.splitlines()
    if not isinstance(output, list) or not all(isinstance(line, str) for line in output):
        raise ScriptError(f"{where}.output: must be a string or a list of strings")
    delay = item.get("delay", 0)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not delay >= 0:
        raise ScriptError(f"{where}.delay: must be a number of seconds, 0 or more")
    return ScriptEntry(
        result=result,
        output=tuple(output),
        delay=float(delay),
        usage=_usage(item.get("usage"), where=f"{where}.usage"),
        failure=_failure(item.get("fail"), where=f"{where}.fail"),
    )


def _usage(value: JSON, *, where: str) -> Usage | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ScriptError(f"{where}: must be an object")
    tokens = [value.get("inputTokens", 0), value.get("outputTokens", 0)]
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in tokens):
        raise ScriptError(f"{where}: inputTokens and outputTokens must be counts")
    model = value.get("model")
    cost = value.get("costUsd")
    if model is not None and not isinstance(model, str):
        raise ScriptError(f"{where}.model: must be a string")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float)):
        raise ScriptError(f"{where}.costUsd: must be a number")
    return Usage(
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        model=model,
        cost_usd=None if cost is None else float(cost),
    )


def _failure(value: JSON, *, where: str) -> Failed | None:
    if value is None:
        return None
    if isinstance(value, str):
        return Failed(error=value, retryable=True)
    if not isinstance(value, dict) or not isinstance(value.get("error"), str):
        raise ScriptError(f"{where}: must be a string or an object with an error text")
    retryable = value.get("retryable", True)
    if not isinstance(retryable, bool):
        raise ScriptError(f"{where}.retryable: must be true or false")
    return Failed(error=value["error"], retryable=retryable)
