"""Tasks as plain records, detached from the ORM."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

JSON = Any

# How each state of ``runs.models.TaskState`` reads on the wire: SPEC §7.3 names five, and a
# task's own state is also given as ``state_detail`` (docs/decisions/0084-task-state-machine.md).
WIRE_STATE = {"expired": "queued", "dropped": "cancelled"}
# The states only ``state_detail`` names: a ``?state=`` filter on one of them selects it alone.
DETAIL_STATES = frozenset(WIRE_STATE)


def wire_state(state: str) -> str:
    """The SPEC's name of a task state."""
    return WIRE_STATE.get(state, state)


def states_matching(asked: str, known: Iterable[str]) -> list[str]:
    """The states of ``known`` a ``?state=`` filter selects: a state the wire shows takes every
    state shown as it (``queued`` takes ``expired``), an own state only itself."""
    if asked in DETAIL_STATES:
        return [asked]
    return [state for state in known if wire_state(state) == asked]


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task (SPEC §7.3)."""

    id: str
    cluster_id: str
    agent_id: str
    role: str
    iteration: int
    state: str
    trigger_message_id: str
    trigger_topic: str
    trigger_sequence: int
    build_id: int | None
    attempts: int
    lease_id: str
    lease_expires_at: int | None
    worker: str
    created_at: int
    available_at: int
    claimed_at: int | None
    finished_at: int | None
    result: JSON
    error: str
    usage: JSON
    # A list's task holds no result, only its size (characters of JSON) and its first characters.
    result_chars: int | None = None
    result_preview: str | None = None
    summary: bool = False
    trigger_sender: str = ""

    def to_wire(self, *, with_lease: bool = False) -> dict[str, JSON]:
        """The JSON shape of the work API; the lease id only for the worker holding it.

        A summary (a task of a list) has ``result_chars`` and ``result_preview`` instead of
        ``result``: the full result is one task's read (``GET /tasks/{id}``).
        """
        wire: dict[str, JSON] = {
            "id": self.id,
            "cluster_id": self.cluster_id,
            "agent_id": self.agent_id,
            "role": self.role,
            "iteration": self.iteration,
            "state": wire_state(self.state),
            "state_detail": self.state,
            "triggering_message": {
                "id": self.trigger_message_id,
                "topic": self.trigger_topic,
                "sequence": str(self.trigger_sequence),
            },
            "build_id": self.build_id,
            "attempts": self.attempts,
            "lease_expires_at": self.lease_expires_at,
            "worker": self.worker,
            "created_at": self.created_at,
            "claimed_at": self.claimed_at,
            "finished_at": self.finished_at,
            "result": self.result,
            "error": self.error or None,
            "usage": self.usage,
        }
        if self.summary:
            del wire["result"]
            wire["result_chars"] = self.result_chars
            wire["result_preview"] = self.result_preview
        if with_lease:
            wire["lease_id"] = self.lease_id
        return wire


@dataclass(frozen=True, slots=True)
class RunnerRecord:
    """A runner as the server saw it (SPEC §7.4): what it serves, what it holds, what it did."""

    name: str
    first_seen_at: int
    last_seen_at: int
    labels: dict[str, str]
    providers: tuple[str, ...]
    holding: int
    claimed: int
    completed: int
    failed: int

    def to_wire(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "first_seen_at": self.first_seen_at,
            "last_seen_at": self.last_seen_at,
            "labels": dict(self.labels),
            "providers": list(self.providers),
            "holding": self.holding,
            "claimed": self.claimed,
            "completed": self.completed,
            "failed": self.failed,
        }
