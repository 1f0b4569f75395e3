"""A message as a publisher asks for it, and its checks against SPEC §1.1."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from ledger.errors import InvalidInput, ServiceError, TooLarge
from ledger.records import JSON, TOPIC_PATTERN
from ledger.validation import (
    JsonValueError,
    json_encode_checked,
    text_problem,
    timestamp_problem,
)

TOPIC_RE = re.compile(TOPIC_PATTERN)
MESSAGE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
IDEMPOTENCY_KEY_MAX = 200


@dataclass(frozen=True, slots=True)
class MessageDraft:
    """A message as a publisher asks for it, before the ledger gives it a place."""

    topic: str
    sender: str
    receiver: str = "broadcast"
    content: dict[str, JSON] = field(default_factory=dict)
    metadata: JSON = None
    timestamp: int | None = None
    id: str | None = None
    idempotency_key: str | None = None

    def body_hash(self) -> str:
        """A digest of what the publisher asked for, to recognise an idempotent retry."""
        body = {
            "topic": self.topic,
            "sender": self.sender,
            "receiver": self.receiver,
            "content": self.content,
            "metadata": self.metadata,
            "timestamp": self.timestamp,
            "id": self.id,
        }
        encoded = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(encoded.encode()).hexdigest()


def message_draft_check(
    draft: MessageDraft, *, index: int | None = None, now: int | None = None
) -> None:
    """Check a draft against SPEC §1.1 and the ledger's bounds (``ledger.validation``); raise
    ``InvalidInput`` or ``TooLarge`` naming the field. ``now`` is the clock a timestamp may not
    run ahead of by more than ``LEDGER_MAX_CLOCK_SKEW_MS``."""
    _draft_check(draft, index=index, now=_clock(now), bounds=_Bounds.read())


def _clock(now: int | None) -> int:
    """``now``, or the server's clock in milliseconds when none is given."""
    return now if now is not None else time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class _Bounds:
    """The settings a draft is checked against, read once for a whole batch (each read goes
    through Django's lazy settings object)."""

    clock_skew_ms: int
    text_bytes: int
    json_bytes: int
    json_depth: int

    @classmethod
    def read(cls) -> _Bounds:
        return cls(
            clock_skew_ms=settings.LEDGER_MAX_CLOCK_SKEW_MS,
            text_bytes=settings.LEDGER_MAX_TEXT_BYTES,
            json_bytes=settings.LEDGER_MAX_JSON_BYTES,
            json_depth=settings.LEDGER_MAX_JSON_DEPTH,
        )


def _draft_check(draft: MessageDraft, *, index: int | None, now: int, bounds: _Bounds) -> None:
    for field_name, problem, error in _problems(draft, now=now, bounds=bounds):
        where: dict[str, Any] = {"field": field_name}
        name = field_name
        if index is not None:
            where = {"index": index, "field": field_name}
            name = f"messages[{index}].{field_name}"
        raise error(f"{name} {problem}", details=where)


def _problems(
    draft: MessageDraft, *, now: int, bounds: _Bounds
) -> Iterator[tuple[str, str, type[ServiceError]]]:
    """Each field that breaks SPEC §1.1: its name, what is wrong, and the error to raise."""
    if not isinstance(draft.topic, str) or not TOPIC_RE.match(draft.topic):
        yield (
            "topic",
            f"must match ^[A-Z][A-Z0-9_]{{0,63}}$ (e.g. PLAN_READY), got {draft.topic!r}",
            InvalidInput,
        )
    for name, value in (("sender", draft.sender), ("receiver", draft.receiver)):
        if not isinstance(value, str) or not 1 <= len(value) <= 128:
            yield name, "must be 1-128 characters", InvalidInput
        elif (problem := text_problem(value)) is not None:
            yield name, problem, InvalidInput
    if draft.id is not None and not MESSAGE_ID_RE.match(draft.id):
        yield "id", "must be 1-128 letters, digits or _.:- characters", InvalidInput
    key = draft.idempotency_key
    if key is not None and not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX:
        yield "idempotency_key", f"must be 1-{IDEMPOTENCY_KEY_MAX} characters", InvalidInput
    elif key is not None and (problem := text_problem(key)) is not None:
        yield "idempotency_key", problem, InvalidInput
    stamp = draft.timestamp
    if stamp is not None and (
        problem := timestamp_problem(stamp, now=now, max_ahead=bounds.clock_skew_ms)
    ):
        yield "timestamp", problem, InvalidInput
    yield from _content_problems(draft, bounds=bounds)


def _content_problems(
    draft: MessageDraft, *, bounds: _Bounds
) -> Iterator[tuple[str, str, type[ServiceError]]]:
    unknown = set(draft.content) - {"text", "data"}
    if unknown:
        yield "content", f"may only hold text and data, not {sorted(unknown)}", InvalidInput
    text = draft.content.get("text")
    if text is not None and not isinstance(text, str):
        yield "content.text", "must be a string", InvalidInput
    text_limit, json_limit = bounds.text_bytes, bounds.json_bytes
    if isinstance(text, str):
        if (problem := text_problem(text)) is not None:
            yield "content.text", problem, InvalidInput
        elif (len(text) if text.isascii() else len(text.encode())) > text_limit:
            yield "content.text", f"is larger than {text_limit} bytes", TooLarge
    # No metadata is stored as null: nothing to check or measure.
    values = [] if draft.metadata is None else [("metadata", draft.metadata)]
    if "data" in draft.content:
        values.insert(0, ("content.data", draft.content["data"]))
    for name, value in values:
        # Checked (and serialised once) before measuring: an unstorable value has no size.
        try:
            encoded = json_encode_checked(value, max_depth=bounds.json_depth)
        except JsonValueError as error:
            yield f"{name}{error.path}", error.problem, InvalidInput
            continue
        if len(encoded.encode()) > json_limit:
            yield name, f"is larger than {json_limit} bytes serialised", TooLarge


def drafts_check(
    drafts: Sequence[MessageDraft], *, single: bool = False, now: int | None = None
) -> None:
    """Check a batch: its length against the limit, then each draft (SPEC §1.1)."""
    if not drafts:
        raise InvalidInput("a batch needs at least one message", details={"field": "messages"})
    if len(drafts) > settings.LEDGER_MAX_BATCH:
        raise TooLarge(
            f"a batch holds at most {settings.LEDGER_MAX_BATCH} messages, got {len(drafts)}",
            details={"field": "messages", "limit": settings.LEDGER_MAX_BATCH},
        )
    clock, bounds = _clock(now), _Bounds.read()
    for index, draft in enumerate(drafts):
        _draft_check(draft, index=None if single else index, now=clock, bounds=bounds)
