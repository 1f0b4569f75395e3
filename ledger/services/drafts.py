"""A message as a publisher asks for it, and its checks against SPEC §1.1."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from ledger.errors import InvalidInput, TooLarge
from ledger.records import JSON, TOPIC_PATTERN

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


def _json_size(value: JSON) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def message_draft_check(draft: MessageDraft, *, index: int | None = None) -> None:
    """Check a draft against SPEC §1.1; raise ``InvalidInput`` or ``TooLarge`` naming the field."""

    def where(field_name: str) -> dict[str, Any]:
        return {"field": field_name} if index is None else {"index": index, "field": field_name}

    def prefix(field_name: str) -> str:
        return field_name if index is None else f"messages[{index}].{field_name}"

    if not isinstance(draft.topic, str) or not TOPIC_RE.match(draft.topic):
        raise InvalidInput(
            f"{prefix('topic')} must match ^[A-Z][A-Z0-9_]{{0,63}}$ (e.g. PLAN_READY), "
            f"got {draft.topic!r}",
            details=where("topic"),
        )
    if not isinstance(draft.sender, str) or not 1 <= len(draft.sender) <= 128:
        raise InvalidInput(f"{prefix('sender')} must be 1-128 characters", details=where("sender"))
    if not isinstance(draft.receiver, str) or not 1 <= len(draft.receiver) <= 128:
        raise InvalidInput(
            f"{prefix('receiver')} must be 1-128 characters", details=where("receiver")
        )
    if draft.id is not None and not MESSAGE_ID_RE.match(draft.id):
        raise InvalidInput(
            f"{prefix('id')} must be 1-128 letters, digits or _.:- characters",
            details=where("id"),
        )
    if draft.idempotency_key is not None and not 1 <= len(draft.idempotency_key) <= 200:
        raise InvalidInput(
            f"{prefix('idempotency_key')} must be 1-200 characters",
            details=where("idempotency_key"),
        )
    if draft.timestamp is not None and (
        isinstance(draft.timestamp, bool)
        or not isinstance(draft.timestamp, int)
        or draft.timestamp < 0
    ):
        raise InvalidInput(
            f"{prefix('timestamp')} must be a non-negative integer of milliseconds",
            details=where("timestamp"),
        )
    unknown = set(draft.content) - {"text", "data"}
    if unknown:
        raise InvalidInput(
            f"{prefix('content')} may only hold text and data, not {sorted(unknown)}",
            details=where("content"),
        )
    text = draft.content.get("text")
    if text is not None and not isinstance(text, str):
        raise InvalidInput(
            f"{prefix('content.text')} must be a string", details=where("content.text")
        )
    if isinstance(text, str) and len(text.encode()) > settings.LEDGER_MAX_TEXT_BYTES:
        raise TooLarge(
            f"{prefix('content.text')} is larger than {settings.LEDGER_MAX_TEXT_BYTES} bytes",
            details=where("content.text"),
        )
    if (
        "data" in draft.content
        and _json_size(draft.content["data"]) > settings.LEDGER_MAX_JSON_BYTES
    ):
        raise TooLarge(
            f"{prefix('content.data')} is larger than {settings.LEDGER_MAX_JSON_BYTES} bytes "
            "serialised",
            details=where("content.data"),
        )
    if _json_size(draft.metadata) > settings.LEDGER_MAX_JSON_BYTES:
        raise TooLarge(
            f"{prefix('metadata')} is larger than {settings.LEDGER_MAX_JSON_BYTES} bytes "
            "serialised",
            details=where("metadata"),
        )


def drafts_check(drafts: Sequence[MessageDraft], *, single: bool = False) -> None:
    """Check a batch: its length against the limit, then each draft (SPEC §1.1)."""
    if not drafts:
        raise InvalidInput("a batch needs at least one message", details={"field": "messages"})
    if len(drafts) > settings.LEDGER_MAX_BATCH:
        raise TooLarge(
            f"a batch holds at most {settings.LEDGER_MAX_BATCH} messages, got {len(drafts)}",
            details={"field": "messages", "limit": settings.LEDGER_MAX_BATCH},
        )
    for index, draft in enumerate(drafts):
        message_draft_check(draft, index=None if single else index)
