"""Single new messages on PostgreSQL: one statement each, or one for those that wait together.

A publish of one new message (no id of the publisher's, no idempotency key, no ending topic)
needs no look-up under the cluster's lock: its place and its row are one statement outside any
transaction (``statements.cluster_claim_insert``), which commits on its own. Publishes to one
cluster commit one after the other under its delivery lock (``bus.ordered_commit``), and each
commit waits for the disk; the ones that queue for the lock meanwhile are committed by whichever
of them takes it first, in the order they queued, in one such statement: one commit for all of
them (docs/decisions/0267). Each publisher returns once the statement that holds its message has
committed, and every message is delivered after that commit, in sequence order, as
``cluster_append`` delivers. A failure (a missing cluster, the database) fails every message of
its statement, none of which was stored.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from ledger.bus import bus
from ledger.records import MessageRecord
from ledger.services.drafts import MessageDraft
from ledger.services.writer import (
    STATE_BY_TOPIC,
    cluster_missing,
    cluster_named,
    message_ids_new,
    message_row,
    stamp_floor,
)
from ledger.statements import autocommit_possible, cluster_claim_insert

# The most messages one statement takes; publishers queued beyond it wait for the next.
TOGETHER_MAX = 256


@dataclass(slots=True)
class _Waiting:
    """A checked message waiting for its statement, and what became of it."""

    draft: MessageDraft
    now: int
    record: MessageRecord | None = None
    error: BaseException | None = None


_queues: dict[str, list[_Waiting]] = {}
_queues_lock = threading.Lock()


def publishable_alone(draft: MessageDraft) -> bool:
    """Whether ``draft`` (checked) can be stored by ``message_publish_together`` here: a new
    message stamped by the server's clock (a requested stamp is its own publisher's: it must
    not move the others of a statement) that leaves the cluster's state as it is, on a
    database where one statement is its own transaction (``autocommit_possible``)."""
    return (
        draft.id is None
        and draft.idempotency_key is None
        and draft.timestamp is None
        and draft.topic not in STATE_BY_TOPIC
        and autocommit_possible()
    )


def message_publish_together(cluster_id: str, draft: MessageDraft, *, now: int) -> MessageRecord:
    """Store one message (``publishable_alone``, checked with ``now``) and deliver it after its
    commit, with the messages queued for the same cluster at that moment."""
    waiting = _Waiting(draft, now)
    with _queues_lock:
        _queues.setdefault(cluster_id, []).append(waiting)
    with bus.ordered_commit(cluster_id):
        while waiting.record is None and waiting.error is None:
            _commit_queued(cluster_id)
    if waiting.error is not None:
        raise waiting.error
    return waiting.record  # type: ignore[return-value]  # set when no error is


def _commit_queued(cluster_id: str) -> None:
    """Store the cluster's queued messages (the first ``TOGETHER_MAX``) in one statement and
    deliver them; the caller holds the cluster's ``ordered_commit``."""
    with _queues_lock:
        queued = _queues.pop(cluster_id)
        if len(queued) > TOGETHER_MAX:
            _queues[cluster_id] = queued[TOGETHER_MAX:]
            queued = queued[:TOGETHER_MAX]
    try:
        records = _claim_insert(cluster_id, queued)
    except BaseException as error:
        for waiting in queued:
            waiting.error = error
        return
    for waiting, record in zip(queued, records, strict=True):
        waiting.record = record
    # Committed: handed to the bus under the same lock, in sequence order.
    bus.deliver_committed(records)


def _claim_insert(cluster_id: str, queued: list[_Waiting]) -> list[MessageRecord]:
    """The queued messages stored, numbered and stamped in queue order, as SPEC §1.1 stamps
    messages stored one after the other at the latest of their clocks' readings (each was
    read before the message was stored): that reading, or one after the previous stamp."""
    if not cluster_named(cluster_id):
        raise cluster_missing(cluster_id)
    drafts = [waiting.draft for waiting in queued]
    # The database stamps them: their ids start with the clock they are stamped from.
    ids = message_ids_new([waiting.now for waiting in queued])
    unplaced = [
        MessageRecord(
            id=new_id,
            cluster_id=cluster_id,
            sequence=0,
            timestamp=0,
            topic=draft.topic,
            sender=draft.sender,
            receiver=draft.receiver,
            content=draft.content,
            metadata=draft.metadata,
        )
        for new_id, draft in zip(ids, drafts, strict=True)
    ]
    placed = cluster_claim_insert(
        cluster_id,
        [
            message_row(record, draft, "", cursor=None)
            for record, draft in zip(unplaced, drafts, strict=True)
        ],
        floor=stamp_floor(drafts, now=max(waiting.now for waiting in queued)),
    )
    if not placed:
        raise cluster_missing(cluster_id)
    return [
        replace(record, sequence=placed[record.id][0], timestamp=placed[record.id][1])
        for record in unplaced
    ]
