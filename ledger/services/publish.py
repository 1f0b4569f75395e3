"""Publishing messages (SPEC §1.1): stored in one transaction, delivered after its commit."""

from __future__ import annotations

import time
from collections.abc import Sequence

from ledger.records import MessageRecord
from ledger.services.drafts import MessageDraft
from ledger.services.writer import cluster_transaction


def now_ms() -> int:
    """The server's clock in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def message_publish(*, cluster_id: str, draft: MessageDraft) -> MessageRecord:
    """Store one message and deliver it after commit; an idempotent retry returns the original."""
    with cluster_transaction(cluster_id) as writer:
        return writer.append([draft], now=now_ms(), single=True)[0]


def message_publish_batch(
    *, cluster_id: str, drafts: Sequence[MessageDraft]
) -> list[MessageRecord]:
    """Store messages all or nothing, consecutive and 1 ms apart; deliver them after commit."""
    with cluster_transaction(cluster_id) as writer:
        return writer.append(drafts, now=now_ms())
