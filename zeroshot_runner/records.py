"""Plain records of the work API: a claimed task, its agent, and what running it produced."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

# A JSON value as produced by ``json.loads``.
JSON = Any

# The largest timeout (ms) or lease (s) the runner takes from a claim: about 31 years of ms.
NUMBER_MAX: Final = 10**12


class ProtocolError(Exception):
    """The server answered with a body the runner cannot read."""


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """The agent's config as the claim hands it over (SPEC §7.4), every field kept in ``config``."""

    id: str
    role: str
    model: str | None
    output_format: str
    timeout_ms: int | None
    config: Mapping[str, JSON]

    @property
    def wants_json(self) -> bool:
        # zeroshot's formats are "json" (the default), "stream-json" and "text"; only "text"
        # agents hand back free text, the others end with a JSON object.
        return self.output_format != "text"


@dataclass(frozen=True, slots=True)
class Claim:
    """One claimed task: what to run, and the lease every later call must carry."""

    task_id: str
    lease_id: str
    cluster_id: str | None
    agent_id: str
    iteration: int
    prompt: str
    agent: AgentSpec
    lease_seconds: float | None


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and cost of one task, as the work API's ``usage`` object carries them."""

    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    cost_usd: float | None = None

    def to_wire(self) -> dict[str, JSON]:
        """The ``usage`` object of ``POST /tasks/{id}/complete``."""
        wire: dict[str, JSON] = {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
        }
        if self.model is not None:
            wire["model"] = self.model
        if self.cost_usd is not None:
            wire["costUsd"] = self.cost_usd
        return wire


@dataclass(frozen=True, slots=True)
class Completed:
    """The agent finished: its parsed JSON object (``None`` for a text agent) and its raw text."""

    result: dict[str, JSON] | None
    output: str
    usage: Usage | None = None
    # How often the agent was asked again for a usable answer (output repair).
    repairs: int = 0


@dataclass(frozen=True, slots=True)
class Failed:
    """The agent did not finish; ``retryable`` asks the server to queue the task again."""

    error: str
    retryable: bool
    repairs: int = 0


Outcome = Completed | Failed


def claim_from_wire(body: JSON) -> Claim:
    """Read the 200 body of ``POST /tasks/claim``; raises ProtocolError when a field is missing."""
    if not isinstance(body, Mapping):
        raise ProtocolError("claim answer is not a JSON object")
    task = _mapping(body, "task")
    agent = body.get("agent")
    agent = agent if isinstance(agent, Mapping) else {}
    agent_id = task.get("agent_id", agent.get("id"))
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise ProtocolError("claim answer has no prompt text")
    iteration = task.get("iteration", 1)
    if not isinstance(iteration, int) or isinstance(iteration, bool):
        raise ProtocolError("claim answer has a task iteration that is not a number")
    spec = AgentSpec(
        id=_text(agent_id, "task.agent_id"),
        role=_optional_text(agent.get("role")) or "",
        model=_optional_text(agent.get("model")),
        output_format=_optional_text(agent.get("outputFormat")) or "json",
        timeout_ms=_optional_int(_positive_number(agent.get("timeout"))),
        config=dict(agent),
    )
    return Claim(
        task_id=_text(task.get("id"), "task.id"),
        lease_id=_text(task.get("lease_id"), "task.lease_id"),
        # The server names it cluster_id (its TaskOut); "cluster" is read as well.
        cluster_id=_optional_text(task.get("cluster_id")) or _optional_text(task.get("cluster")),
        agent_id=spec.id,
        iteration=iteration,
        prompt=prompt,
        agent=spec,
        lease_seconds=_positive_number(task.get("lease_seconds")),
    )


def _mapping(body: Mapping[str, JSON], key: str) -> Mapping[str, JSON]:
    value = body.get(key)
    if not isinstance(value, Mapping):
        raise ProtocolError(f"claim answer has no {key} object")
    return value


def _text(value: JSON, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"claim answer has no {name}")
    return value


def _optional_text(value: JSON) -> str | None:
    return value if isinstance(value, str) and value else None


def _positive_number(value: JSON) -> float | None:
    # A tenant's config may hold any JSON number (10**400, 1e400): one past NUMBER_MAX is
    # ignored, as if absent, rather than crash the slot that reads it.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 0 < value <= NUMBER_MAX:
        return None
    return float(value)


def _optional_int(value: float | None) -> int | None:
    return None if value is None else int(value)
