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

import itertools
import logging
import os
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, closing
from dataclasses import dataclass, field
from pathlib import Path

from ledger.errors import InvalidInput, ServiceError
from ledger.models import ClusterState
from ledger.records import MessageRecord
from ledger.selectors import cluster_exists
from ledger.services import (
    STATE_BY_TOPIC,
    ClusterWriter,
    ImportedMessage,
    ImportRows,
    cluster_create_transaction,
    cluster_state_set,
    cluster_transaction,
    import_cache,
    imported_rows_from_json,
    message_import_batch,
    now_ms,
)
from ledger.zeroshot import (
    CLUSTERS_JSON,
    LedgerSource,
    LedgerTail,
    StrPath,
    ZeroshotColumns,
    ZeroshotFormatError,
    ZeroshotMessage,
    ZeroshotRowError,
    ZeroshotSourceError,
    count_messages,
    discover,
    open_snapshot,
    read_message_columns,
)

logger = logging.getLogger(__name__)

# Rows read and written per step; a ledger still commits in one transaction (all or nothing),
# but memory holds one step at a time. Larger steps write each page of the random-id index
# fewer times.
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
    # Rows whose content_data or metadata was not JSON: stored with null there.
    json_unreadable: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class UnreadableSource:
    """A path given to the import that could not be read at all (a folder, a registry)."""

    path: Path
    error: str


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import did: one entry per ledger file, and the paths that could not be read."""

    ledgers: tuple[LedgerImport, ...] = field(default_factory=tuple)
    unreadable: tuple[UnreadableSource, ...] = field(default_factory=tuple)

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
    """Import zeroshot ledgers (a ``.db`` file or a ``~/.zeroshot``-style folder, or several).

    Each ledger is imported in one transaction: all of it or, when a row cannot be stored or
    the file cannot be read, nothing (not even its cluster), reported with the file and the
    row while the other ledgers still import.
    """
    sources, unreadable = _discover_all(path)
    return ImportReport(
        ledgers=tuple(_import_source(source=s, progress=progress) for s in sources),
        unreadable=unreadable,
    )


def _discover_all(
    path: StrPath | Sequence[StrPath],
) -> tuple[list[LedgerSource], tuple[UnreadableSource, ...]]:
    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    sources: list[LedgerSource] = []
    unreadable: list[UnreadableSource] = []
    for each in paths:
        try:
            sources.extend(discover(each))
        except ServiceError as error:
            logger.warning("cannot import %s: %s", each, error.message)
            unreadable.append(UnreadableSource(path=Path(each), error=error.message))
    return sources, tuple(unreadable)


def _import_source(*, source: LedgerSource, progress: Progress | None) -> LedgerImport:
    """Import one ledger; a ledger that cannot be read or stored is reported, not raised."""
    try:
        with open_snapshot(source.path) as conn:
            return _import_rows(source=source, conn=conn, progress=progress)
    except (ServiceError, sqlite3.Error, OSError) as error:
        message = _one_line(source, error)
        logger.warning("cannot import %s", message)
        return LedgerImport(cluster_id=source.cluster_id, path=source.path, error=message)


def _one_line(source: LedgerSource, error: Exception) -> str:
    """``<file>: row <rowid>: <what>`` (the row when one is known) on one line."""
    if isinstance(error, ServiceError):
        text = error.message
    elif isinstance(error, sqlite3.Error):
        text = f"unreadable as a SQLite database: {error}"
    else:
        text = f"cannot read it: {getattr(error, 'strerror', None) or error}"
    where = str(source.path)
    return " ".join(f"{where}: {text}".split())


def _import_rows(
    *, source: LedgerSource, conn: sqlite3.Connection, progress: Progress | None
) -> LedgerImport:
    cluster_id = source.cluster_id
    total = count_messages(conn)
    if progress is not None:
        progress(cluster_id, 0, total)
    with closing(read_message_columns(conn, batch_size=IMPORT_BATCH)) as batches, import_cache():
        return _import_batches(source=source, batches=batches, total=total, progress=progress)


def _import_batches(
    *,
    source: LedgerSource,
    batches: Iterator[ZeroshotColumns],
    total: int,
    progress: Progress | None,
) -> LedgerImport:
    """Store a ledger's rows in one transaction; its cluster is created in it when missing."""
    cluster_id = source.cluster_id
    first = next(batches, None)
    created = not cluster_exists(cluster_id=cluster_id)
    done = imported = last_rowid = unreadable = 0
    state_topic: str | None = None
    transaction = (
        _cluster_create_transaction(source=source, first=first)
        if created
        else cluster_transaction(cluster_id)
    )
    with transaction as writer:
        for batch in itertools.chain([first] if first is not None else [], batches):
            # A cluster created by this import holds only this ledger's rows, whose ids are
            # unique (zeroshot's primary key): no need to look them up batch after batch.
            # Nobody followed it before it existed, so its history is not pushed message by
            # message; rows added to a cluster that already existed reach its live clients.
            stored = _store(writer, batch, created=created)
            imported += len(stored)
            done += len(batch)
            last_rowid = max(last_rowid, *batch.rowids)
            unreadable += batch.json_unreadable
            state_topic = _last_state_topic_of(stored.topics) or state_topic
            if progress is not None:
                progress(cluster_id, done, max(total, done))
        _state_settle(writer, source=source, created=created, state_topic=state_topic)
    return LedgerImport(
        cluster_id=cluster_id,
        path=source.path,
        total=max(total, done),
        imported=imported,
        skipped=done - imported,
        created=created,
        last_rowid=last_rowid,
        json_unreadable=unreadable,
    )


def _store(writer: ClusterWriter, batch: ZeroshotColumns, *, created: bool) -> ImportRows:
    """Store one batch of rows; a row the ledger refuses is named by its rowid."""
    ids = batch.ids
    if "" in ids:
        ids = [i or _missing_id(rowid) for i, rowid in zip(ids, batch.rowids, strict=True)]
    try:
        rows = imported_rows_from_json(
            ids=ids,
            timestamps=batch.timestamps,
            topics=batch.topics,
            senders=batch.senders,
            receivers=batch.receivers,
            texts=batch.content_texts,
            data=batch.content_data,
            data_values=batch.content_data_values,
            metadata=batch.metadata,
            metadata_values=batch.metadata_values,
        )
        return writer.import_rows(rows, assume_absent=created, deliver=not created)
    except InvalidInput as error:
        index = error.details.get("index") if isinstance(error.details, dict) else None
        if isinstance(index, int) and 0 <= index < len(batch):
            raise ZeroshotRowError(
                batch.rowids[index], f"(id {ids[index]!r}) {error.message}"
            ) from error
        raise


def _cluster_create_transaction(
    *, source: LedgerSource, first: ZeroshotColumns | None
) -> AbstractContextManager[ClusterWriter]:
    """The transaction that creates the ledger's cluster and fills it."""
    entry = source.cluster
    created_at = entry.created_at if entry is not None else None
    if created_at is None:
        created_at = first.timestamps[0] if first else now_ms()
    try:
        return cluster_create_transaction(
            cluster_id=source.cluster_id,
            config=entry.config if entry is not None else {"agents": []},
            # Settled once the messages are in (``_state_settle``).
            state=ClusterState.STOPPED,
            created_at=created_at,
        )
    except InvalidInput as error:
        raise InvalidInput(
            f"its {CLUSTERS_JSON} entry cannot make a cluster: {error.message}",
            details=error.details,
        ) from error


def _missing_id(rowid: int) -> str:
    # zeroshot's id column may hold NULL (a TEXT primary key allows it): name the row stably.
    return f"zeroshot-rowid-{rowid}"


def _imported(message: ZeroshotMessage) -> ImportedMessage:
    return ImportedMessage(
        id=message.id or _missing_id(message.rowid),
        timestamp=message.timestamp,
        topic=message.topic,
        sender=message.sender,
        receiver=message.receiver,
        content=message.content,
        metadata=message.metadata,
    )


def _last_state_topic(records: Sequence[ImportedMessage | MessageRecord]) -> str | None:
    return _last_state_topic_of([r.topic for r in records])


def _last_state_topic_of(topics: Sequence[str]) -> str | None:
    if STATE_BY_TOPIC.keys().isdisjoint(topics):
        return None
    return next(topic for topic in reversed(topics) if topic in STATE_BY_TOPIC)


def _state_settle(
    writer: ClusterWriter, *, source: LedgerSource, created: bool, state_topic: str | None
) -> None:
    """A cluster created by the import takes zeroshot's registry state first, then its topics;
    an existing one follows ``CLUSTER_COMPLETE`` / ``CLUSTER_FAILED`` (SPEC §1.2)."""
    registry_state = source.cluster.state if created and source.cluster is not None else None
    if registry_state in ClusterState.values:
        writer.state_set(str(registry_state))
    elif state_topic is not None:
        writer.state_set(STATE_BY_TOPIC[state_topic])


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
    sources, unreadable = _discover_all(path)
    done = [(s, _import_source(source=s, progress=progress)) for s in sources]
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
            for tail in list(tails):
                try:
                    busy = _follow_poll(tail=tail, on_message=on_message) or busy
                except ServiceError as error:
                    # Rows the ledger cannot store: following past them would leave a gap.
                    logger.error("stopped following %s: %s", tail.source.path, error.message)
                    tails.remove(tail)
            if not busy:
                stop.wait(poll_interval)
    return ImportReport(ledgers=tuple(ledger for _, ledger in done), unreadable=unreadable)


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
