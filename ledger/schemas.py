"""The wire shapes of the ledger's API (SPEC §1.1, §6.1), shared by every app's router."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Field, Schema
from pydantic import ConfigDict, StrictInt

from ledger.filters import DEFAULT_PAGE, MAX_PAGE, MessageFilter
from ledger.records import TOPIC_PATTERN
from ledger.services import MessageDraft


class MessageIn(Schema):
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(pattern=TOPIC_PATTERN, description="e.g. PLAN_READY")
    sender: str = Field(min_length=1, max_length=128)
    receiver: str = Field("broadcast", min_length=1, max_length=128)
    content: dict[str, Any] | None = Field(None, description="{text?: string, data?: any JSON}")
    metadata: dict[str, Any] | None = None
    timestamp: StrictInt | None = Field(None, ge=0, description="ms since the epoch")
    id: str | None = Field(None, min_length=1, max_length=128)
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)

    def draft(self) -> MessageDraft:
        return MessageDraft(
            topic=self.topic,
            sender=self.sender,
            receiver=self.receiver,
            content=dict(self.content or {}),
            metadata=self.metadata,
            timestamp=self.timestamp,
            id=self.id,
            idempotency_key=self.idempotency_key,
        )


class BatchIn(Schema):
    model_config = ConfigDict(extra="forbid")

    messages: list[MessageIn]


class MessageOut(Schema):
    id: str
    sequence: str = Field(description="decimal digits; a string so that it stays exact")
    timestamp: int
    cluster_id: str
    topic: str
    sender: str
    receiver: str
    content: dict[str, Any] | None = None
    metadata: Any = None


class MessagePageOut(Schema):
    items: list[MessageOut]
    next_after: str | None = Field(
        description="pass as `after` to read the next page; null when this page is the last"
    )


class MessageQueryIn(Schema):
    topic: str | None = None
    sender: str | None = None
    receiver: str | None = None
    since: int | None = Field(None, description="timestamp >= since (ms)")
    until: int | None = Field(None, description="timestamp <= until (ms)")
    after: int | None = Field(None, description="sequence > after: the cursor for tailing")
    q: str | None = Field(
        None,
        max_length=500,
        description="full-text search over content.text: every word must match, by stem or "
        "prefix; matches come in sequence order",
    )
    limit: int = Field(DEFAULT_PAGE, ge=1, le=MAX_PAGE)
    order: Literal["asc", "desc"] = "asc"

    def to_filter(self) -> MessageFilter:
        return MessageFilter(
            topic=self.topic,
            sender=self.sender,
            receiver=self.receiver,
            since=self.since,
            until=self.until,
            after=self.after,
            q=self.q,
        )


class ClusterOut(Schema):
    """Read from a ``ClusterRecord`` as it is."""

    id: str
    state: str
    template: str | None
    created_at: int
    message_count: int
    last_activity: int | None
    agent_count: int


class ClusterDetailOut(ClusterOut):
    agents: list[dict[str, Any]]
    params: dict[str, Any]
