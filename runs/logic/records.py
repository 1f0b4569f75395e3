"""The plain values that logic scripts take and give back, and the one error value they share."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

# A JSON value as produced by ``json.loads``.
JSON = Any

# SPEC §7.2: the text of an ``AGENT_ERROR`` is at most this long.
ERROR_TEXT_MAX: Final = 2_000

ErrorKind = Literal[
    "script", "timeout", "memory", "crash", "return", "placeholder", "output", "schema"
]


@dataclass(frozen=True, slots=True)
class LogicError:
    """Why a script, a hook config or an agent's output could not be used.

    ``kind`` is ``script`` (it threw or did not compile), ``timeout``, ``memory``, ``crash`` (its
    sandbox process died), ``return`` (it returned a value of the wrong shape), ``placeholder``
    (a hook placeholder left unresolved),
    ``output`` (the agent's output is not a JSON object) or ``schema`` (the agent's ``jsonSchema``
    is itself invalid). ``message`` is ready for ``AGENT_ERROR``: at most 2,000 characters.
    """

    kind: ErrorKind
    message: str

    def __post_init__(self) -> None:
        if len(self.message) > ERROR_TEXT_MAX:
            object.__setattr__(self, "message", self.message[: ERROR_TEXT_MAX - 1] + "…")


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """The ``agent`` a script sees: ``{id, role, iteration}``."""

    id: str
    role: str | None = None
    iteration: int = 0

    def to_json(self) -> dict[str, JSON]:
        """Return the object scripts read."""
        return {"id": self.id, "role": self.role, "iteration": self.iteration}


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """The cluster a script sees: its id and the agents of its config, in config order."""

    id: str
    agents: tuple[Mapping[str, JSON], ...] = ()
    # Serialised once: a pipeline evaluates many scripts against the same cluster.
    agents_json: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "agents", tuple(self.agents))
        object.__setattr__(self, "agents_json", json.dumps([dict(a) for a in self.agents]))

    @classmethod
    def of(cls, *, id: str, config: Mapping[str, JSON] | None) -> ClusterInfo:
        """Build from a cluster id and its config (``{agents: [...]}``), skipping non-objects."""
        agents = config.get("agents") if config else None
        listed: Sequence[JSON] = agents if isinstance(agents, list) else []
        return cls(id=id, agents=tuple(a for a in listed if isinstance(a, Mapping)))


# SPEC §7.1: what CLUSTER_COMPLETE says when the stop_cluster logic gives no reason of its own.
DEFAULT_STOP_REASON: Final = "all_validators_approved"


@dataclass(frozen=True, slots=True)
class TriggerOutcome:
    """A trigger script's verdict: ``passed`` is the JavaScript truthiness of what it returned.

    ``reason`` is the string ``reason`` of a returned object, read by ``stop_cluster`` triggers.
    """

    passed: bool
    reason: str | None = None

    @property
    def stop_reason(self) -> str:
        """The ``data.reason`` of the ``CLUSTER_COMPLETE`` a ``stop_cluster`` trigger publishes."""
        return self.reason or DEFAULT_STOP_REASON


@dataclass(frozen=True, slots=True)
class TransformMessage:
    """The message a hook ``transform`` returns: ``{topic, content, receiver?, metadata?}``."""

    topic: str
    content: dict[str, JSON]
    receiver: str | None = None
    metadata: dict[str, JSON] | None = None


@dataclass(frozen=True, slots=True)
class SchemaIssue:
    """One way an agent's result breaks its ``jsonSchema``: where (``$.a[0]``) and why."""

    path: str
    message: str

    @property
    def text(self) -> str:
        """``path: message``, as an ``AGENT_SCHEMA_WARNING`` lists it."""
        return f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class ParsedResult:
    """An agent's result read from its output (SPEC §7.5).

    ``data`` is the result object (``None`` for ``outputFormat: "text"``); ``schema_issues`` are
    its mismatches with the agent's ``jsonSchema``; ``accepted`` is false when the schema is
    strict and the result breaks it, and the task then fails as retryable.
    """

    data: dict[str, JSON] | None
    schema_issues: tuple[SchemaIssue, ...] = ()
    accepted: bool = True
