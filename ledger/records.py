"""Plain records of the ledger, detached from the ORM.

Other apps import them through ``ledger.interfaces``; they never touch ``ledger.models``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger.topics import Topic

# A JSON value as produced by ``json.loads``.
JSON = Any

TOPIC_PATTERN = r"^[A-Z][A-Z0-9_]{0,63}$"
# A search snippet marks each matched word with these two characters (Unicode private use, so
# that no language's text needs them); ``SearchHit.parts`` splits on them.
MATCH_START = "\ue000"
MATCH_END = "\ue001"


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One stored ledger message (SPEC §1.1), detached from the ORM.

    ``content`` is the content object exactly as stored: it may hold ``text`` (a string) and
    ``data`` (any JSON value, including ``0``, ``false`` or ``{}``); a missing key means the field
    was never given. ``content`` is ``{}`` when the message has neither.
    """

    id: str
    cluster_id: str
    sequence: int
    timestamp: int
    topic: str
    sender: str
    receiver: str = "broadcast"
    content: dict[str, JSON] = field(default_factory=dict)
    metadata: JSON = None

    @property
    def text(self) -> str | None:
        value = self.content.get("text")
        return value if isinstance(value, str) else None

    @property
    def data(self) -> JSON:
        return self.content.get("data")

    @classmethod
    def from_wire(cls, wire: dict[str, JSON]) -> MessageRecord:
        """The record behind a message's wire shape (SPEC §1.1), as the bus pushes it."""
        content = wire.get("content")
        return cls(
            id=str(wire["id"]),
            cluster_id=str(wire["cluster_id"]),
            sequence=int(wire["sequence"]),
            timestamp=int(wire["timestamp"]),
            topic=str(wire["topic"]),
            sender=str(wire["sender"]),
            receiver=str(wire.get("receiver", "broadcast")),
            content=content if isinstance(content, dict) else {},
            metadata=wire.get("metadata"),
        )

    def to_wire(self) -> dict[str, JSON]:
        """The JSON shape of the API, the websocket and exports (SPEC §1.1)."""
        wire: dict[str, JSON] = {
            "id": self.id,
            "sequence": str(self.sequence),
            "timestamp": self.timestamp,
            "cluster_id": self.cluster_id,
            "topic": self.topic,
            "sender": self.sender,
            "receiver": self.receiver,
        }
        if self.content:
            wire["content"] = dict(self.content)
        wire["metadata"] = self.metadata
        return wire


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A message that a full-text search found, with the words that matched marked in a snippet.

    ``snippet`` is a piece of ``content.text`` around the matches, each match between
    ``MATCH_START`` and ``MATCH_END``; empty when the database gave none.
    """

    message: MessageRecord
    snippet: str = ""

    @property
    def parts(self) -> list[tuple[str, bool]]:
        """The snippet as ``(text, matched)`` pieces, for a template to mark up and escape."""
        parts: list[tuple[str, bool]] = []
        for i, chunk in enumerate(self.snippet.split(MATCH_START)):
            if i == 0:
                parts.append((chunk.replace(MATCH_END, ""), False))
                continue
            matched, _, rest = chunk.partition(MATCH_END)
            parts.append((matched, True))
            parts.append((rest.replace(MATCH_END, ""), False))
        return [(text, matched) for text, matched in parts if text]


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    """One cluster (SPEC §1.2), detached from the ORM."""

    id: str
    created_at: int
    state: str
    config: dict[str, JSON]
    template: str | None = None
    params: dict[str, JSON] = field(default_factory=dict)
    message_count: int = 0
    last_sequence: int = 0
    last_activity: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # The stored config it runs (SPEC §7.7): 1 until a ``CLUSTER_OPERATIONS`` chain changes it.
    config_version: int = 1
    # The config's JSON text as stored, when the record was read from it: the key of work kept
    # per config (``context.completion.running_agents``), so that the config need not be
    # written out again to find it. Not part of the record's value.
    config_text: str | None = field(default=None, compare=False, repr=False)

    @property
    def agent_count(self) -> int:
        return len(self.agents)

    @property
    def agents(self) -> list[dict[str, JSON]]:
        agents = self.config.get("agents") if isinstance(self.config, dict) else None
        return [a for a in agents if isinstance(a, dict)] if isinstance(agents, list) else []


@dataclass(frozen=True, slots=True)
class ConfigVersionRecord:
    """One stored config of a cluster (SPEC §7.7), detached from the ORM."""

    version: int
    config: dict[str, JSON]
    sender: str
    message_id: str
    diff: list[JSON]
    created_at: int

    @property
    def agents(self) -> list[dict[str, JSON]]:
        agents = self.config.get("agents") if isinstance(self.config, dict) else None
        return [a for a in agents if isinstance(a, dict)] if isinstance(agents, list) else []


def replay_allowed(*, topic: str, content: dict[str, JSON] | None, metadata: JSON) -> bool:
    """The replay policy (SPEC §1.5): may this message enter an agent's context?"""
    if isinstance(metadata, dict) and isinstance(metadata.get("contextSafe"), bool):
        return bool(metadata["contextSafe"])
    data = content.get("data") if isinstance(content, dict) else None
    if isinstance(data, dict) and isinstance(data.get("contextSafe"), bool):
        return bool(data["contextSafe"])
    policy = metadata.get("replayPolicy") if isinstance(metadata, dict) else None
    if policy == "raw_log_only":
        return False
    if policy == "context":
        return True
    return topic != Topic.AGENT_OUTPUT


def event_of(content: dict[str, JSON] | None) -> str:
    """``content.data.event`` when it is a short string, else ``""`` (stored for lookups)."""
    data = content.get("data") if isinstance(content, dict) else None
    event = data.get("event") if isinstance(data, dict) else None
    return event if isinstance(event, str) and len(event) <= 64 else ""


@dataclass(frozen=True, slots=True)
class PipelineLag:
    """How far a cluster's post-commit pipeline is behind its ledger (``ledger/pipeline.py``).

    ``undispatched`` messages are committed but not yet offered to the stages (the snapshot,
    triggers); ``oldest_age_ms`` is how long the first of them has waited (``None`` when
    caught up).
    """

    cluster_id: str
    last_sequence: int
    pipeline_sequence: int
    oldest_timestamp: int | None
    oldest_age_ms: int | None

    @property
    def undispatched(self) -> int:
        return max(0, self.last_sequence - self.pipeline_sequence)
