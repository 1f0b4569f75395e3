"""Publishing messages (SPEC §1.1): stored in one transaction, delivered after its commit."""

from __future__ import annotations

import time
from collections.abc import Sequence

from ledger.records import MessageRecord
from ledger.services.drafts import MessageDraft, drafts_check
from ledger.services.together import message_publish_together, publishable_alone
from ledger.services.writer import cluster_append


def now_ms() -> int:
    """The server's clock in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def message_publish(*, cluster_id: str, draft: MessageDraft) -> MessageRecord:
    """Store one message and deliver it after commit; an idempotent retry returns the original."""
    now = now_ms()
    # Checked before the cluster's lock is taken: other publishers wait for less.
    drafts_check([draft], single=True, now=now)
    if publishable_alone(draft):
        return message_publish_together(cluster_id, draft, now=now)
    return cluster_append(cluster_id, [draft], now=now, single=True)[0]


def message_publish_batch(
    *, cluster_id: str, drafts: Sequence[MessageDraft]
) -> list[MessageRecord]:
    """Store messages all or nothing, consecutive and 1 ms apart; deliver them after commit."""
    now = now_ms()
    drafts_check(drafts, now=now)
    return cluster_append(cluster_id, drafts, now=now)
