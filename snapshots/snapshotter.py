"""The live state snapshot (SPEC §5): a STATE_SNAPSHOT after each committed trigger message.

The thin edge around the pure fold of ``snapshots.state``. Each refresh runs in one transaction
under the cluster's row lock (the lock publishers take): it reads the newest snapshot, folds on
top of it every trigger message it does not cover yet, in sequence order, and publishes the
result unless the state is unchanged. Whoever runs last has seen every committed trigger, so
concurrent publishers, in threads or in processes, end on the fold of all of them in sequence
order (docs/decisions/0010-snapshotter-concurrency.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from ledger import interfaces as ledger
from ledger.interfaces import MessageRecord, NotFound, Subscription
from snapshots.state import (
    JSON,
    SNAPSHOT_SECTIONS,
    SNAPSHOT_SENDER,
    SNAPSHOT_TOPIC,
    SNAPSHOT_TRIGGER_TOPICS,
    snapshot_apply,
    snapshot_content,
    snapshot_equal,
)

logger = logging.getLogger(__name__)

PAGE = 500
_MEMO_LIMIT = 10_000


def snapshot_latest(*, cluster_id: str) -> MessageRecord | None:
    """The newest STATE_SNAPSHOT message of a cluster, or ``None``."""
    return ledger.message_latest(cluster_id=cluster_id, topics=[SNAPSHOT_TOPIC])


@dataclass(frozen=True, slots=True)
class _Folded:
    """What a refresh proved: the newest snapshot already holds every trigger up to a message."""

    snapshot_id: str | None
    sequence: int
    message_id: str


class StateSnapshotter:
    """Republishes a cluster's STATE_SNAPSHOT when one of its trigger messages is committed."""

    def __init__(self) -> None:
        self._subscription: Subscription | None = None
        self._lock = threading.Lock()
        # Only a shortcut: without it a refresh folds from the snapshot's source message, which
        # re-reads the triggers that changed nothing since then. Entries are checked against the
        # ledger before use, so a stale one (another process, a re-created cluster) is ignored.
        self._memo: dict[str, _Folded] = {}

    def connect(self) -> None:
        """Subscribe to the trigger topics; imported history never triggers a snapshot."""
        if self._subscription is None:
            self._subscription = ledger.bus.subscribe(
                self.on_message, topics=SNAPSHOT_TRIGGER_TOPICS, include_imported=False
            )

    def disconnect(self) -> None:
        """Stop reacting to trigger messages."""
        if self._subscription is not None:
            ledger.bus.unsubscribe(self._subscription)
            self._subscription = None

    def on_message(self, message: MessageRecord) -> None:
        """The bus callback: refresh the cluster of a committed trigger message."""
        self.refresh(cluster_id=message.cluster_id)

    def refresh(self, *, cluster_id: str) -> MessageRecord | None:
        """Fold the uncovered trigger messages; publish and return a new snapshot if changed."""
        with ledger.cluster_transaction(cluster_id) as writer:
            latest = snapshot_latest(cluster_id=cluster_id)
            latest_id = latest.id if latest is not None else None
            base = _state_of(latest)
            after = self._recall(cluster_id=cluster_id, snapshot_id=latest_id)
            if after is None:
                after = _covered_sequence(cluster_id=cluster_id, snapshot=latest)
            state: Mapping[str, JSON] | None = base
            last: MessageRecord | None = None
            while True:
                page = ledger.message_tail_topics(
                    cluster_id=cluster_id, topics=SNAPSHOT_TRIGGER_TOPICS, after=after, limit=PAGE
                )
                for message in page:
                    state = snapshot_apply(state, message, cluster_id=cluster_id)
                if page:
                    last = page[-1]
                    after = last.sequence
                if len(page) < PAGE:
                    break
            published: MessageRecord | None = None
            if state is not None and not _same_state(state, base):
                draft = ledger.MessageDraft(
                    topic=SNAPSHOT_TOPIC, sender=SNAPSHOT_SENDER, content=snapshot_content(state)
                )
                [published] = writer.append([draft], now=ledger.now_ms(), single=True)
        if last is not None:
            snapshot_id = published.id if published is not None else latest_id
            self._remember(
                cluster_id, _Folded(snapshot_id, sequence=last.sequence, message_id=last.id)
            )
        return published

    def _recall(self, *, cluster_id: str, snapshot_id: str | None) -> int | None:
        with self._lock:
            folded = self._memo.get(cluster_id)
        if folded is None or folded.snapshot_id != snapshot_id:
            return None
        # Message ids are random per message, so this also tells a re-created cluster apart.
        try:
            at = ledger.message_at_sequence(cluster_id=cluster_id, sequence=folded.sequence)
        except NotFound:
            return None
        return folded.sequence if at.id == folded.message_id else None

    def _remember(self, cluster_id: str, folded: _Folded) -> None:
        with self._lock:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[cluster_id] = folded


def _state_of(snapshot: MessageRecord | None) -> dict[str, JSON] | None:
    data = snapshot.data if snapshot is not None else None
    return data if isinstance(data, dict) else None


def _covered_sequence(*, cluster_id: str, snapshot: MessageRecord | None) -> int:
    """The sequence of the trigger message the snapshot was made from (0 without a snapshot)."""
    if snapshot is None:
        return 0
    data = snapshot.data if isinstance(snapshot.data, dict) else {}
    source = data.get("sourceMessageId")
    if isinstance(source, str) and source:
        try:
            return ledger.message_get(cluster_id=cluster_id, message_id=source).sequence
        except NotFound:
            pass
    # A snapshot whose source is not in this ledger covers at least what came before it.
    return snapshot.sequence


def _same_state(state: Mapping[str, JSON], base: Mapping[str, JSON] | None) -> bool:
    """Whether publishing ``state`` would say nothing new; no sections is no state at all."""
    if base is None:
        return not any(state.get(name) for name in SNAPSHOT_SECTIONS)
    return snapshot_equal(state, base)


snapshotter = StateSnapshotter()
