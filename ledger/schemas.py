"""The wire shapes of the ledger's API (SPEC §1.1, §6.1), shared by every app's router."""

from __future__ import annotations

from typing import Any, Literal

from django.conf import settings
from ninja import Field, Schema
from pydantic import ConfigDict, StrictInt, model_validator

from ledger.errors import TooLarge
from ledger.filters import DEFAULT_PAGE, MAX_PAGE, MessageFilter
from ledger.records import TOPIC_PATTERN
from ledger.services import MessageDraft
from ledger.validation import INT64_MAX, TIMESTAMP_MAX


class ErrorOut(Schema):
    """Every error of the API (SPEC §6.1); ``code`` is stable, ``message`` is for people."""

    code: str = Field(description="e.g. validation_error, not_found, conflict, too_large")
    message: str
    details: Any = None


# Every operation: a bad key, a bad query or path value, a rate limit.
ANY_ERRORS = (401, 422, 429)
# Operations on one cluster (or another named thing): also scoped keys and missing things.
READ_ERRORS = (*ANY_ERRORS, 403, 404)
# Operations with a body: also unreadable and oversized bodies.
BODY_ERRORS = (*ANY_ERRORS, 400, 413)


def error_responses(*statuses: int) -> dict[int, type[ErrorOut]]:
    """``response=`` entries documenting that an operation answers these statuses with the
    error shape."""
    return dict.fromkeys(sorted(set(statuses)), ErrorOut)


class MessageIn(Schema):
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(pattern=TOPIC_PATTERN, description="e.g. PLAN_READY")
    sender: str = Field(min_length=1, max_length=128)
    receiver: str = Field("broadcast", min_length=1, max_length=128)
    content: dict[str, Any] | None = Field(None, description="{text?: string, data?: any JSON}")
    metadata: dict[str, Any] | None = None
    timestamp: StrictInt | None = Field(
        None,
        ge=0,
        le=TIMESTAMP_MAX,
        description="ms since the epoch; at most LEDGER_MAX_CLOCK_SKEW_MS ahead of the server",
    )
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

    messages: list[MessageIn] = Field(description="at most LEDGER_MAX_BATCH (1,000) messages")

    @model_validator(mode="before")
    @classmethod
    def _batch_length(cls, data: Any) -> Any:
        batch_length_check(data)
        return data


def batch_length_check(data: Any) -> None:
    """Refuse a batch body over ``LEDGER_MAX_BATCH`` messages before any message is validated:
    a batch of a million messages is refused at once, not after building a million objects.
    ``TooLarge`` is not a ValueError, so that it is not wrapped as a 422."""
    messages = data.get("messages") if isinstance(data, dict) else None
    if isinstance(messages, list) and len(messages) > settings.LEDGER_MAX_BATCH:
        raise TooLarge(
            f"a batch holds at most {settings.LEDGER_MAX_BATCH} messages, got {len(messages)}",
            details={"field": "messages", "limit": settings.LEDGER_MAX_BATCH},
        )


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
    topic: str | None = Field(None, max_length=64)
    sender: str | None = Field(None, max_length=128)
    receiver: str | None = Field(None, max_length=128)
    since: int | None = Field(None, ge=0, le=TIMESTAMP_MAX, description="timestamp >= since (ms)")
    until: int | None = Field(None, ge=0, le=TIMESTAMP_MAX, description="timestamp <= until (ms)")
    after: int | None = Field(
        None, ge=0, le=INT64_MAX, description="sequence > after: the cursor for tailing"
    )
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
    labels: dict[str, str] = Field(
        default_factory=dict, description="which runner pool serves it (SPEC §7.4)"
    )


class ClusterDetailOut(ClusterOut):
    agents: list[dict[str, Any]]
    params: dict[str, Any]
    config_version: int = Field(
        1, description="the stored config it runs: 1, then one more per CLUSTER_OPERATIONS change"
    )
