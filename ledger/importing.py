"""Importing zeroshot ledgers (SPEC §6.5): once, or following them live.

The source files are only ever read through private copies (``ledger.zeroshot``), so an import
never changes them, even while zeroshot is writing. Messages keep their ids, timestamps and
content; the ledger gives them sequences in zeroshot's replay order ``(timestamp, rowid)``.
Ids already present are skipped, so importing the same ledger twice adds nothing.

A cluster that does not exist yet is created from its ``clusters.json`` entry when there is one:
its config, its state (when it is one of ours) and its ``createdAt``. Without an entry it gets
``{"agents": []}``, the time of its first message, and the state ``stopped`` (nothing of ours
runs it), or ``completed`` / ``failed`` when the ledger holds ``CLUSTER_COMPLETE`` /
``CLUSTER_FAILED``. A cluster that already exists is kept as it is; only new messages are added.
See docs/decisions/0020-zeroshot-import-and-follow.md.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ledger.errors import ServiceError
from ledger.models import ClusterState
from ledger.records import MessageRecord
from ledger.selectors import cluster_exists
from ledger.services import (
    STATE_BY_TOPIC,
    ImportedMessage,
    cluster_create,
    cluster_state_set,
    message_import_backfill,
    message_import_batch,
    now_ms,
)
from ledger.zeroshot import (
    LedgerSource,
    LedgerTail,
    StrPath,
    ZeroshotFormatError,
    ZeroshotMessage,
    ZeroshotSourceError,
    count_messages,
    discover,
    open_snapshot,
    read_messages,
)

logger = logging.getLogger(__name__)

# Rows per transaction. Message ids are random, so every batch writes pages all over the
# ``(cluster, message_id)`` index; larger batches write each of them fewer times. 20,000 rows
# still commit within about a second, so publishers never wait long for the write lock.
IMPORT_BATCH = 20_000
# Called after each batch with the ledger's cluster id, the rows read so far and its row count.
Progress = Callable[[str, int, int], None]
OnMessages = Callable[[list[MessageRecord]], None]


@dataclass(frozen=True, slots=True)
class LedgerImport:
    """What importing one ledger file did."""

    cluster_id: str
    path: Path
    total: int = 0
    imported: int = 0
    skipped: int = 0
    created: bool = False
    # The highest rowid read: following the ledger continues after it.
    last_rowid: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import did, one entry per ledger file."""

    ledgers: tuple[LedgerImport, ...] = field(default_factory=tuple)

    @property
    def imported(self) -> int:
        return sum(ledger.imported for ledger in self.ledgers)

    @property
    def skipped(self) -> int:
        return sum(ledger.skipped for ledger in self.ledgers)

    @property
    def failed(self) -> list[LedgerImport]:
        return [ledger for ledger in self.ledgers if ledger.error is not None]


def zeroshot_import(
    *, path: StrPath | Sequence[StrPath], progress: Progress | None = None
) -> ImportReport:
    """Import zeroshot ledgers (a ``.db`` file or a ``~/.zeroshot``-style folder, or several)."""
    sources = _discover_all(path)
    return ImportReport(ledgers=tuple(_import_source(source=s, progress=progress) for s in sources))


def _discover_all(path: StrPath | Sequence[StrPath]) -> list[LedgerSource]:
    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    return [source for p in paths for source in discover(p)]


def _import_source(*, source: LedgerSource, progress: Progress | None) -> LedgerImport:
    """Import one ledger; a ledger that cannot be read is reported, not raised."""
    try:
        with open_snapshot(source.path) as conn:
            return _import_rows(source=source, conn=conn, progress=progress)
    except ServiceError as error:
        logger.warning("cannot import %s: %s", source.path, error.message)
        return LedgerImport(cluster_id=source.cluster_id, path=source.path, error=error.message)


def _import_rows(
    *, source: LedgerSource, conn: sqlite3.Connection, progress: Progress | None
) -> LedgerImport:
    cluster_id = source.cluster_id
    total = count_messages(conn)
    created = False
    imported = done = last_rowid = 0
    state_topic: str | None = None
    if progress is not None:
        progress(cluster_id, 0, total)
    for batch in read_messages(conn, batch_size=IMPORT_BATCH):
        if done == 0:
            created = _cluster_ensure(source=source, first_timestamp=batch[0].timestamp)
        messages = [_imported(m) for m in batch]
        # A cluster created by this import holds only this ledger's rows, whose ids are
        # unique (zeroshot's primary key): no need to look them up batch after batch. Nobody
        # followed it before it existed, so its history is not pushed message by message;
        # rows added to a cluster that already existed reach its live clients as imported.
        stored: Sequence[ImportedMessage | MessageRecord] = (
            message_import_backfill(cluster_id=cluster_id, messages=messages, assume_absent=True)
            if created
            else message_import_batch(cluster_id=cluster_id, messages=messages)
        )
        imported += len(stored)
        done += len(batch)
        last_rowid = max(last_rowid, *(m.rowid for m in batch))
        state_topic = _last_state_topic(stored) or state_topic
        if progress is not None:
            progress(cluster_id, done, max(total, done))
    if done == 0:
        created = _cluster_ensure(source=source, first_timestamp=None)
    if created:
        _cluster_state_settle(source=source, state_topic=state_topic)
    elif state_topic is not None:
        _cluster_state_follow(cluster_id=cluster_id, topic=state_topic)
    return LedgerImport(
        cluster_id=cluster_id,
        path=source.path,
        total=max(total, done),
        imported=imported,
        skipped=done - imported,
        created=created,
        last_rowid=last_rowid,
    )


def _cluster_ensure(*, source: LedgerSource, first_timestamp: int | None) -> bool:
    """Create the ledger's cluster unless it exists; True when it was created now."""
    if cluster_exists(cluster_id=source.cluster_id):
        return False
    entry = source.cluster
    created_at = entry.created_at if entry is not None else None
    if created_at is None:
        created_at = first_timestamp if first_timestamp is not None else now_ms()
    cluster_create(
        cluster_id=source.cluster_id,
        config=entry.config if entry is not None else {"agents": []},
        # Settled once the messages are in (``_cluster_state_settle``).
        state=ClusterState.STOPPED,
        created_at=created_at,
    )
    return True


def _imported(message: ZeroshotMessage) -> ImportedMessage:
    return ImportedMessage(
        # zeroshot's id column may hold NULL (a TEXT primary key allows it): name the row stably.
        id=message.id or f"zeroshot-rowid-{message.rowid}",
        timestamp=message.timestamp,
        topic=message.topic,
        sender=message.sender,
        receiver=message.receiver,
        content=message.content,
        metadata=message.metadata,
    )


def _last_state_topic(records: Sequence[ImportedMessage | MessageRecord]) -> str | None:
    return next((r.topic for r in reversed(records) if r.topic in STATE_BY_TOPIC), None)


def _cluster_state_settle(*, source: LedgerSource, state_topic: str | None) -> None:
    """Give a cluster created by the import its state: zeroshot's registry first, then topics."""
    registry_state = source.cluster.state if source.cluster is not None else None
    if registry_state in ClusterState.values:
        state = str(registry_state)
    elif state_topic is not None:
        state = STATE_BY_TOPIC[state_topic]
    else:
        return
    cluster_state_set(cluster_id=source.cluster_id, state=state)


def _cluster_state_follow(*, cluster_id: str, topic: str) -> None:
    """``CLUSTER_COMPLETE`` / ``CLUSTER_FAILED`` move the state (SPEC §1.2), imported or not."""
    cluster_state_set(cluster_id=cluster_id, state=STATE_BY_TOPIC[topic])


# --- following ---------------------------------------------------------------------------------


def zeroshot_follow(
    *,
    path: StrPath | Sequence[StrPath],
    poll_interval: float = 0.5,
    stop: threading.Event | None = None,
    on_message: OnMessages | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Import zeroshot ledgers, then keep importing their new rows until ``stop`` is set.

    New rows are read by rowid (commit order) from a private copy refreshed on each poll and
    stored with ``message_import_batch``, which pushes them to live clients on commit. The
    ledgers followed are those found when following starts.
    """
    stop = stop or threading.Event()
    done = [(s, _import_source(source=s, progress=progress)) for s in _discover_all(path)]
    with tempfile.TemporaryDirectory(prefix="zeroshot-follow-") as tmp:
        tails = []
        for index, (source, ledger) in enumerate(done):
            if ledger.error is not None:
                continue
            copy_dir = Path(tmp) / str(index)
            copy_dir.mkdir()
            tails.append(LedgerTail(source=source, last_rowid=ledger.last_rowid, copy_dir=copy_dir))
        while not stop.is_set():
            busy = False
            for tail in tails:
                busy = _follow_poll(tail=tail, on_message=on_message) or busy
            if not busy:
                stop.wait(poll_interval)
    return ImportReport(ledgers=tuple(ledger for _, ledger in done))


def _follow_poll(*, tail: LedgerTail, on_message: OnMessages | None) -> bool:
    """Import what one ledger gained since the last poll; True when rows were read."""
    try:
        rows = tail.poll()
    except (ZeroshotSourceError, ZeroshotFormatError, sqlite3.DatabaseError) as error:
        # The writer may be mid-checkpoint or the file briefly unreadable: try again next poll.
        logger.warning("cannot follow %s: %s", tail.source.path, error)
        return False
    if not rows:
        return False
    records = message_import_batch(
        cluster_id=tail.source.cluster_id, messages=[_imported(m) for m in rows]
    )
    topic = _last_state_topic(records)
    if topic is not None:
        _cluster_state_follow(cluster_id=tail.source.cluster_id, topic=topic)
    if records and on_message is not None:
        on_message(records)
    return True
