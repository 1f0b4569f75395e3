"""The live state snapshot (SPEC §5): a STATE_SNAPSHOT after committed trigger messages.

A stage of the ledger's post-commit pipeline (``ledger/pipeline.py``), the first one: publishers
never wait for it. For each batch of new messages that holds a trigger message, it reads the
newest snapshot, folds on top of it every trigger message it does not cover yet, in sequence
order, and writes the result, unless the state is unchanged, in the pipeline's own transaction.
The pipeline runs a cluster's messages once and in sequence order, so concurrent publishers, in
threads or in processes, end on the fold of all of them in sequence order; a burst of triggers
that arrives in one batch gets one snapshot (docs/decisions/0010-snapshotter-concurrency.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from ledger import interfaces as ledger
from ledger.interfaces import (
    Batch,
    ClusterRecord,
    ClusterWriter,
    MessageDraft,
    MessageFilter,
    MessageRecord,
    NotFound,
)
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

_TRIGGER_TOPICS = frozenset(SNAPSHOT_TRIGGER_TOPICS)

PAGE = 500
_MEMO_LIMIT = 10_000
# Runs before every other stage: agents are offered a message after the snapshotter saw it.
STAGE_ORDER = 10


def snapshot_latest(*, cluster_id: str, up_to_sequence: int | None = None) -> MessageRecord | None:
    """The newest STATE_SNAPSHOT message of a cluster (up to a sequence), or ``None``."""
    return ledger.message_latest(
        cluster_id=cluster_id,
        topics=[SNAPSHOT_TOPIC],
        where=MessageFilter(up_to_sequence=up_to_sequence),
    )


@dataclass(frozen=True, slots=True)
class _Folded:
    """What a run proved: the newest snapshot already holds every trigger up to a message."""

    snapshot_id: str | None
    sequence: int
    message_id: str


@dataclass(frozen=True, slots=True)
class _SnapshotWrite:
    """A new snapshot to append, and what it covers."""

    stage: StateSnapshotter
    cluster_id: str
    draft: MessageDraft
    covered: MessageRecord

    def apply(self, writer: ClusterWriter) -> None:
        [published] = writer.append([self.draft], now=ledger.now_ms(), single=True)
        self.stage.remember(self.cluster_id, _Folded(published.id, *_at(self.covered)))


class StateSnapshotter:
    """The pipeline stage that republishes a cluster's STATE_SNAPSHOT after trigger messages."""

    name = "snapshot"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Only a shortcut: without it a run folds from the snapshot's source message, which
        # re-reads the triggers that changed nothing since then. Entries are checked against the
        # ledger before use, so a stale one (another process, a re-created cluster) is ignored.
        self._memo: dict[str, _Folded] = {}

    def connect(self) -> None:
        """Join the ledger's pipeline."""
        ledger.pipeline.register(self, order=STAGE_ORDER)

    def disconnect(self) -> None:
        """Leave the pipeline: trigger messages no longer make snapshots."""
        ledger.pipeline.unregister(self)

    def reacts_to(self, cluster: ClusterRecord) -> frozenset[str]:
        """Only trigger messages start a snapshot (the pipeline's ``Selective``)."""
        return _TRIGGER_TOPICS

    def plan(self, batch: Batch) -> _SnapshotWrite | None:
        """Fold the uncovered trigger messages up to the batch's end; a write if changed.

        Imported triggers never start a snapshot (SPEC §5), but a live one folds every trigger
        since the last snapshot, imported or not, as a snapshot made then would have.
        """
        if not any(m.topic in SNAPSHOT_TRIGGER_TOPICS for m in batch.live):
            return None
        cluster_id = batch.cluster.id
        latest = snapshot_latest(cluster_id=cluster_id, up_to_sequence=batch.upto)
        latest_id = latest.id if latest is not None else None
        base = _state_of(latest)
        after = self._recall(cluster_id=cluster_id, snapshot_id=latest_id)
        if after is None:
            after = _covered_sequence(cluster_id=cluster_id, snapshot=latest)
        state: Mapping[str, JSON] | None = base
        last: MessageRecord | None = None
        while True:
            page = ledger.message_tail_topics(
                cluster_id=cluster_id,
                topics=SNAPSHOT_TRIGGER_TOPICS,
                after=after,
                up_to_sequence=batch.upto,
                limit=PAGE,
            )
            for message in page:
                state = snapshot_apply(state, message, cluster_id=cluster_id)
            if page:
                last = page[-1]
                after = last.sequence
            if len(page) < PAGE:
                break
        if last is None:
            return None
        if state is None or _same_state(state, base):
            self.remember(cluster_id, _Folded(latest_id, *_at(last)))
            return None
        draft = MessageDraft(
            topic=SNAPSHOT_TOPIC, sender=SNAPSHOT_SENDER, content=snapshot_content(state)
        )
        # Checked now, so a snapshot over a limit is reported by the stage, not the transaction.
        ledger.drafts_check([draft], single=True)
        return _SnapshotWrite(stage=self, cluster_id=cluster_id, draft=draft, covered=last)

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

    def remember(self, cluster_id: str, folded: _Folded) -> None:
        with self._lock:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[cluster_id] = folded


def _at(message: MessageRecord) -> tuple[int, str]:
    return message.sequence, message.id


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
