"""The one write path of the ledger: a durable transaction under the cluster's row lock.

Every write to a cluster's ledger — a publish, an import, a state change, the clock move of a
recorded context build, a state snapshot — happens inside ``cluster_transaction``:

- the transaction is durable: it is never nested in a caller's transaction, so its commit is
  the moment the messages exist, and their delivery is handed to the bus on that commit;
- it holds the bus's delivery lock of the cluster across the commit, so deliveries follow
  commit order (docs/decisions/0002-bus-ordering.md);
- it holds the cluster's row lock, which allocates sequences and timestamps
  (docs/decisions/0001-sequence-allocation.md).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from ledger.bus import bus
from ledger.errors import Conflict, InvalidInput, NotFound
from ledger.models import Cluster, ClusterState, Message
from ledger.records import MessageRecord, event_of, replay_allowed
from ledger.selectors import message_record
from ledger.services.drafts import MessageDraft, drafts_check
from ledger.services.imported_rows import (
    ImportedMessage,
    ImportRows,
    imported_rows,
    imported_rows_insert,
    stored_message_ids,
)
from ledger.statements import (
    ClusterRow,
    WriteCursor,
    cluster_row_claim_or_lock,
    cluster_row_lock,
    cluster_row_update,
    driver_transaction,
    json_param,
    message_insert,
)
from ledger.topics import Topic
from ledger.validation import text_problem

STATE_BY_TOPIC: dict[str, str] = {
    Topic.CLUSTER_COMPLETE: ClusterState.COMPLETED,
    Topic.CLUSTER_FAILED: ClusterState.FAILED,
}


@contextmanager
def cluster_transaction(
    cluster_id: str,
    *,
    new: Cluster | None = None,
    appending: tuple[Sequence[MessageDraft], int] | None = None,
) -> Iterator[ClusterWriter]:
    """Open the cluster's write transaction; everything written through the writer commits
    together, and the messages are delivered to the bus after the commit, in commit order.

    With ``new`` (an unsaved cluster row, see ``cluster_create_transaction``) the cluster is
    created inside the same transaction: it exists only if everything written commits.

    With ``appending`` (drafts, now: what the transaction appends, with one ``append`` of those
    drafts at that ``now``, and nothing else) the row's lock and its move past them are one
    statement where the database can (``cluster_row_claim``, as a publish's: decision 0220),
    unless a draft carries an idempotency key (it may name a message already stored).
    """
    with bus.ordered_commit(cluster_id), transaction.atomic(durable=True):
        claimed = None
        if new is not None:
            cluster: ClusterRow | None = ClusterRow.of(_cluster_insert(new))
        elif appending and appending[0]:
            drafts, now = appending
            cluster, claimed = _row_for_append(cluster_id, drafts, now=now)
        else:
            cluster = cluster_row_lock(cluster_id) if cluster_named(cluster_id) else None
        if cluster is None:
            raise cluster_missing(cluster_id)
        writer = ClusterWriter(cluster)
        yield writer
        if claimed is not None:
            writer.claimed(last_sequence=claimed[0], last_timestamp=claimed[1])
        writer.flush()


def cluster_append(
    cluster_id: str, drafts: Sequence[MessageDraft], *, now: int, single: bool = False
) -> list[MessageRecord]:
    """A publish's transaction: ``cluster_transaction`` with one ``ClusterWriter.append`` of
    drafts already checked (``drafts_check`` with the same ``now``), its statements run on the
    database driver's own cursor between one ``BEGIN`` and ``COMMIT`` (docs/decisions/0175).
    The same lock, statements, durability and delivery after the commit, in commit order;
    inside a caller's transaction it is ``cluster_transaction`` itself."""
    with bus.ordered_commit(cluster_id):
        with driver_transaction() as cursor:
            if cursor is None:
                with cluster_transaction(cluster_id) as nested:
                    return nested.append(drafts, now=now, single=single, checked=True)
            found, claimed = _row_for_append(cluster_id, drafts, now=now, cursor=cursor)
            if found is None:
                raise cluster_missing(cluster_id)
            writer = ClusterWriter(found, cursor=cursor)
            records = writer.append(drafts, now=now, single=single, checked=True)
            if claimed is not None:
                writer.claimed(last_sequence=claimed[0], last_timestamp=claimed[1])
            writer.flush()
        # Committed: handed to the bus as ``transaction.on_commit`` would, under the same lock.
        bus.deliver_committed(writer.committed)
    return records


def _row_for_append(
    cluster_id: str,
    drafts: Sequence[MessageDraft],
    *,
    now: int,
    cursor: WriteCursor | None = None,
) -> tuple[ClusterRow | None, tuple[int, int] | None]:
    """The cluster's row under its lock, for one append of ``drafts`` at ``now``, and what its
    claim wrote (the last sequence and clock), or ``None`` when it was only locked.

    Without idempotency keys every draft is new: the row's lock and its move past them are one
    statement where the database can (``cluster_row_claim``: docs/decisions/0220).
    """
    if not cluster_named(cluster_id):
        return None, None
    if any(d.idempotency_key is not None for d in drafts):
        return cluster_row_lock(cluster_id, cursor=cursor), None
    count = len(drafts)
    row, moved = cluster_row_claim_or_lock(
        cluster_id, count=count, floor=stamp_floor(drafts, now=now), cursor=cursor
    )
    if row is None or not moved:
        return row, None
    return row, (row.last_sequence + count, row.last_timestamp + count)


def stamp_floor(drafts: Sequence[MessageDraft], *, now: int) -> int:
    """The earliest the first of ``drafts`` (all new) may be stamped, the row's clock aside
    (``ClusterWriter._first_timestamp`` adds it): never before a requested timestamp."""
    requested = [d.timestamp - offset for offset, d in enumerate(drafts) if d.timestamp is not None]
    return max(now, *requested) if requested else now


def cluster_named(cluster_id: str) -> bool:
    """Whether ``cluster_id`` can name a cluster at all (else no statement looks it up)."""
    return text_problem(cluster_id) is None


def cluster_missing(cluster_id: str) -> NotFound:
    """The error of a publish to a cluster that does not exist."""
    return NotFound(f"cluster {cluster_id!r} does not exist", details={"cluster_id": cluster_id})


def _cluster_insert(cluster: Cluster) -> Cluster:
    # The first statement of the transaction: when it fails, the whole transaction goes.
    try:
        cluster.save(force_insert=True)
    except IntegrityError as error:
        raise Conflict(
            f"cluster {cluster.pk!r} already exists", details={"cluster_id": cluster.pk}
        ) from error
    return cluster


class ClusterWriter:
    """Writes to one locked cluster; only ``cluster_transaction`` makes one."""

    def __init__(self, cluster: ClusterRow, *, cursor: WriteCursor | None = None) -> None:
        self._cluster = cluster
        self._changed: set[str] = set()
        # With a driver transaction's cursor (``cluster_append``), the messages appended wait
        # here for its commit; otherwise they are handed to ``transaction.on_commit``.
        self._cursor = cursor
        self.committed: list[MessageRecord] = []

    @property
    def cluster_id(self) -> str:
        return self._cluster.id

    @property
    def last_sequence(self) -> int:
        return self._cluster.last_sequence

    @property
    def last_timestamp(self) -> int:
        return self._cluster.last_timestamp

    @property
    def state(self) -> str:
        return self._cluster.state

    @property
    def pipeline_sequence(self) -> int:
        """The post-commit pipeline's cursor (``ledger/pipeline.py``)."""
        return self._cluster.pipeline_sequence

    def pipeline_advance(self, to: int) -> None:
        """Move the pipeline's cursor forward to ``to`` (never past the newest message)."""
        if not self._cluster.pipeline_sequence <= to <= self._cluster.last_sequence:
            raise ValueError(
                f"pipeline cursor of {self.cluster_id} cannot move from "
                f"{self._cluster.pipeline_sequence} to {to} (last {self._cluster.last_sequence})"
            )
        if to != self._cluster.pipeline_sequence:
            self._cluster.pipeline_sequence = to
            self._changed.add("pipeline_sequence")

    def append(
        self,
        drafts: Sequence[MessageDraft],
        *,
        now: int,
        single: bool = False,
        checked: bool = False,
    ) -> list[MessageRecord]:
        """Check and store drafts after the newest message, all or nothing; an idempotent
        repeat returns the message stored for its key (SPEC §1.1). ``now`` is the clock the
        timestamps start from; ``single`` names fields without a batch index in errors.
        ``checked`` says the caller already ran ``drafts_check`` with the same ``now``, before
        taking the cluster's lock (publishers do, so that the lock is held for less).
        """
        if not checked:
            drafts_check(drafts, single=single, now=now)
        plan = _IdempotencyPlan.make(cluster=self._cluster, drafts=drafts)
        self._ids_check(draft for _, draft, _ in plan.fresh)
        if plan.fresh:
            base = self._first_timestamp(plan.fresh, now=now)
            ids = message_ids_new([base + offset for offset in range(len(plan.fresh))])
            records = [
                self._record(draft, offset=offset, timestamp=base + offset, new_id=ids[offset])
                for offset, (_, draft, _) in enumerate(plan.fresh)
            ]
            message_insert(
                [
                    message_row(record, draft, body_hash, cursor=self._cursor)
                    for record, (_, draft, body_hash) in zip(records, plan.fresh, strict=True)
                ],
                cursor=self._cursor,
            )
            plan.fill(records)
            self._advance(records)
            if self._cursor is None:
                bus.deliver_on_commit(records)
            else:
                self.committed.extend(records)
        return plan.results()

    def import_messages(
        self, messages: Sequence[ImportedMessage], *, assume_absent: bool = False, deliver: bool
    ) -> list[ImportedMessage]:
        """Append messages that keep their ids and timestamps; ids already present are skipped.

        Imports take the source's values as they are (SPEC §1.1), within what the ledger can
        store (``imported_messages_check``: ``InvalidInput`` whose details name the ``index`` of
        the first message that is not). Returns the messages stored, in sequence order; with
        ``deliver`` they reach the bus on commit, marked as imported.
        ``assume_absent`` skips the look-up of stored ids, for a caller that fills a cluster it
        created with ids that are unique; the unique constraint still refuses a repeat.
        """
        fresh = self.import_rows(
            imported_rows(messages), assume_absent=assume_absent, deliver=deliver
        )
        if fresh.positions is None:
            return list(messages)
        return [messages[index] for index in fresh.positions]

    def import_rows(
        self, rows: ImportRows, *, assume_absent: bool = False, deliver: bool
    ) -> ImportRows:
        """``import_messages`` for rows already checked (``ledger.services.imported_rows``),
        the way of large imports: returns the rows stored, in sequence order."""
        present = (
            stored_message_ids(cluster_id=self.cluster_id, ids=rows.ids)
            if not assume_absent and self._cluster.last_sequence > 0
            else set()
        )
        fresh = rows.without(present)
        if not fresh:
            return fresh
        after = self._cluster.last_sequence
        caught_up = self._cluster.pipeline_sequence == after
        try:
            imported_rows_insert(cluster_id=self.cluster_id, after_sequence=after, rows=fresh)
        except IntegrityError as error:
            raise Conflict(
                "a message with this id already exists in the cluster",
                details={"cluster_id": self.cluster_id},
            ) from error
        self._cluster.last_sequence += len(fresh)
        self._cluster.last_timestamp = max(self._cluster.last_timestamp, max(fresh.timestamps))
        self._changed |= {"last_sequence", "last_timestamp"}
        if caught_up:
            # Nothing of it is for the pipeline (imports never trigger): skip the pipeline's read.
            self.pipeline_advance(self._cluster.last_sequence)
        if deliver:
            bus.deliver_on_commit(
                fresh.records(cluster_id=self.cluster_id, first_sequence=after + 1),
                imported=True,
            )
        return fresh

    def state_set(self, state: str) -> None:
        """Move the cluster to a state of SPEC §1.2."""
        if state not in ClusterState.values:
            raise InvalidInput(
                f"unknown cluster state {state!r}",
                details={"field": "state", "allowed": ClusterState.values},
            )
        if state != self._cluster.state:
            self._cluster.state = state
            self._changed.add("state")

    def clock_advance(self, to: int) -> None:
        """Make the cluster's next message stamp later than ``to`` (a recorded build's start)."""
        if self._cluster.last_timestamp < to:
            self._cluster.last_timestamp = to
            self._changed.add("last_timestamp")

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Writes that commit or vanish together inside the transaction; the writer forgets
        what a failed block changed on the cluster row."""
        fields = ("last_sequence", "last_timestamp", "state", "pipeline_sequence")
        before = {name: getattr(self._cluster, name) for name in fields}
        changed = set(self._changed)
        try:
            with transaction.atomic():
                yield
        except BaseException:
            for name, value in before.items():
                setattr(self._cluster, name, value)
            self._changed = changed
            raise

    def claimed(self, *, last_sequence: int, last_timestamp: int) -> None:
        """The row's sequence and clock were moved by ``cluster_row_claim`` already; what the
        appends made of them must be what it wrote, and only other changes (an ending topic's
        state) are left for ``flush``."""
        row = self._cluster
        if (row.last_sequence, row.last_timestamp) != (last_sequence, last_timestamp):
            raise RuntimeError(
                f"cluster {self.cluster_id} claimed up to #{last_sequence} at {last_timestamp}, "
                f"appended up to #{row.last_sequence} at {row.last_timestamp}"
            )
        self._changed -= {"last_sequence", "last_timestamp"}

    def flush(self) -> None:
        """Write what changed on the cluster row (one UPDATE, or none)."""
        if self._changed:
            cluster_row_update(self._cluster, sorted(self._changed), cursor=self._cursor)
            self._changed.clear()

    # --- the steps of ``append`` ------------------------------------------------------------

    def _first_timestamp(self, fresh: Sequence[tuple[int, MessageDraft, str]], *, now: int) -> int:
        """Never earlier than any requested timestamp, never backwards, exactly 1 ms apart."""
        floor = stamp_floor([draft for _, draft, _ in fresh], now=now)
        return max(floor, self._cluster.last_timestamp + 1)

    def _record(
        self, draft: MessageDraft, *, offset: int, timestamp: int, new_id: str
    ) -> MessageRecord:
        return MessageRecord(
            id=draft.id or new_id,
            cluster_id=self._cluster.id,
            sequence=self._cluster.last_sequence + offset + 1,
            timestamp=timestamp,
            topic=draft.topic,
            sender=draft.sender,
            receiver=draft.receiver,
            content=draft.content,
            metadata=draft.metadata,
        )

    def _ids_check(self, drafts: Iterable[MessageDraft]) -> None:
        """Refuse publisher-given ids that the cluster (or the batch) already has (409).

        Checked before the insert, under the cluster's lock, so that the unique constraint
        never has to speak: its error names the database's constraint, not the message.
        """
        given: list[str] = []
        for draft in drafts:
            if draft.id is not None:
                if draft.id in given:
                    raise _id_taken(draft.id, cluster_id=self.cluster_id)
                given.append(draft.id)
        if not given or self._cluster.last_sequence == 0:
            return
        taken = Message.objects.filter(cluster_id=self.cluster_id, message_id__in=given).first()
        if taken is not None:
            raise _id_taken(taken.message_id, cluster_id=self.cluster_id)

    def _advance(self, records: Sequence[MessageRecord]) -> None:
        """Move the cluster's sequence and clock past ``records``; ending topics move its state."""
        self._cluster.last_sequence = records[-1].sequence
        self._cluster.last_timestamp = records[-1].timestamp
        self._changed |= {"last_sequence", "last_timestamp"}
        for record in records:
            if record.topic in STATE_BY_TOPIC:
                self.state_set(STATE_BY_TOPIC[record.topic])


# Twelve hex digits hold every stamp the ledger takes (``TIMESTAMP_MAX`` is below 16**12).
_STAMP_MASK = 16**12 - 1


def message_ids_new(stamps: Sequence[int]) -> list[str]:
    """Ids for new messages stamped ``stamps`` (SPEC §1.1: ``msg_`` and 32 lowercase hex): the
    stamp in 12 hex digits, then 80 random bits. A cluster's ids grow with its stamps, so each
    new one goes in at the end of the index of ids in a cluster instead of at a random place
    in it, which cost a batch's insert and commit a page of that index for nearly every
    message (docs/decisions/0300)."""
    tails = secrets.token_hex(10 * len(stamps))
    return [
        f"msg_{stamp & _STAMP_MASK:012x}{tails[20 * i : 20 * i + 20]}"
        for i, stamp in enumerate(stamps)
    ]


def message_row(
    record: MessageRecord, draft: MessageDraft, body_hash: str, *, cursor: WriteCursor | None
) -> tuple[Any, ...]:
    """A published message's row, in ``MESSAGE_COLUMNS`` order."""
    return (
        record.cluster_id,
        record.id,
        record.sequence,
        record.timestamp,
        record.topic,
        record.sender,
        record.receiver,
        json_param(record.content, cursor=cursor),
        None if record.metadata is None else json_param(record.metadata, cursor=cursor),
        replay_allowed(topic=record.topic, content=record.content, metadata=record.metadata),
        event_of(record.content),
        draft.idempotency_key,
        body_hash,
    )


def _id_taken(message_id: str, *, cluster_id: str) -> Conflict:
    return Conflict(
        f"a message with id {message_id!r} already exists in the cluster",
        details={"id": message_id, "cluster_id": cluster_id},
    )


@dataclass
class _IdempotencyPlan:
    """Which drafts of a batch are new, and which repeat an idempotency key (SPEC §1.1)."""

    drafts: Sequence[MessageDraft]
    found: list[MessageRecord | None]
    fresh: list[tuple[int, MessageDraft, str]]
    first_index_by_key: dict[str, int]

    @classmethod
    def make(cls, *, cluster: ClusterRow, drafts: Sequence[MessageDraft]) -> _IdempotencyPlan:
        keys = {d.idempotency_key for d in drafts if d.idempotency_key is not None}
        stored = (
            {
                m.idempotency_key: m
                for m in Message.objects.filter(cluster_id=cluster.id, idempotency_key__in=keys)
            }
            if keys
            else {}
        )
        plan = cls(drafts=drafts, found=[None] * len(drafts), fresh=[], first_index_by_key={})
        seen_hash: dict[str, str] = {}
        for index, draft in enumerate(drafts):
            key = draft.idempotency_key
            body_hash = draft.body_hash() if key is not None else ""
            if key is None:
                plan.fresh.append((index, draft, body_hash))
            elif (previous := stored.get(key)) is not None:
                if previous.body_hash != body_hash:
                    raise Conflict(
                        f"idempotency key {key!r} was already used with a different message",
                        details={"idempotency_key": key, "index": index},
                    )
                plan.found[index] = message_record(previous, cluster_id=cluster.id)
            elif key in seen_hash:
                if seen_hash[key] != body_hash:
                    raise Conflict(
                        f"idempotency key {key!r} appears twice in the batch with different "
                        "messages",
                        details={"idempotency_key": key, "index": index},
                    )
            else:
                seen_hash[key] = body_hash
                plan.first_index_by_key[key] = index
                plan.fresh.append((index, draft, body_hash))
        return plan

    def fill(self, records: Sequence[MessageRecord]) -> None:
        for (index, _, _), record in zip(self.fresh, records, strict=True):
            self.found[index] = record

    def results(self) -> list[MessageRecord]:
        """One stored message per draft; an in-batch repeat of a key gets its first's."""
        final: list[MessageRecord] = []
        for draft, found in zip(self.drafts, self.found, strict=True):
            if found is None:
                found = self.found[self.first_index_by_key[draft.idempotency_key or ""]]
            assert found is not None
            final.append(found)
        return final
