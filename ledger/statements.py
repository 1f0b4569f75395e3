"""Prebuilt SQL for the ledger's hot paths: the reads a context build makes on every call
(``ledger.selectors``) and the three statements of every write (``ledger.services.writer``).

A build reads a handful of query shapes: one cluster, the newest message of a few topics, and
per source one topic (maybe one sender) from a timestamp, newest or oldest N. A write locks and
reads its cluster's row, inserts its messages (a few hundred rows to a statement) and moves
the row. Compiling those through the ORM took several times as long as the database took to
run them, so the SQL of each shape is written once, from the models' own table and column
names, and run through a plain cursor with parameters: the same statement, and the same
results, on SQLite and PostgreSQL. Each read is a seek on an index of ``Message``
(``tests/ledger/test_statements.py`` reads SQLite's plans; docs/decisions/0024 and 0071).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from itertools import chain
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

from ledger.filters import MessageFilter
from ledger.frozen import frozen
from ledger.labels import labels_stored
from ledger.models import Cluster, ClusterConfigVersion, Message
from ledger.records import JSON, ClusterRecord, ConfigVersionRecord, MessageRecord
from ledger.write_turn import sqlite_write_turn

# What a filter asks of one column: (field, operator); the value is a parameter.
Term = tuple[str, str]
# The fields of a ``MessageRecord``, in the order the statements select them.
_RECORD_FIELDS = (
    "message_id",
    "sequence",
    "timestamp",
    "topic",
    "sender",
    "receiver",
    "content",
    "metadata",
)


def preparable(where: MessageFilter) -> bool:
    """Whether the prebuilt statements express ``where``: everything but a full-text search
    (whose words decide the order) and a list of topics (which no index reads in order)."""
    return not isinstance(where.topic, tuple) and (where.q is None or not where.search_terms)


def _terms(where: MessageFilter, *, event: str | None = None) -> tuple[tuple[Term, ...], list[Any]]:
    """The filter's conditions beyond the cluster (and ``content.data.event``), and their
    parameters, in one fixed order: equal shapes give equal statements."""
    terms: list[Term] = []
    params: list[Any] = []
    for term, value in (
        (("topic", "="), where.topic),
        (("sender", "="), where.sender),
        (("receiver", "="), where.receiver),
        (("event", "="), event),
        # A parameter, not the bare column: SQLite then seeks on the ``replayable`` column of
        # ``msg_context_topic`` instead of testing each row of the topic.
        (("replayable", "="), True if where.replayable_only else None),
        (("timestamp", ">="), where.since),
        (("timestamp", "<="), where.until),
        (("sequence", ">"), where.after),
        (("sequence", "<="), where.up_to_sequence),
    ):
        if value is not None:
            terms.append(term)
            params.append(value)
    return tuple(terms), params


def _column(model: type[Message | Cluster | ClusterConfigVersion], name: str) -> str:
    (field,) = (f for f in model._meta.concrete_fields if f.name == name)
    return connection.ops.quote_name(field.column)


@cache
def _message_select(vendor: str, terms: tuple[Term, ...], newest_first: bool, limit: bool) -> str:
    """One shape's statement: the messages of a cluster that pass ``terms``, in (timestamp,
    sequence) order, newest first when asked, with a ``LIMIT`` parameter when ``limit``."""
    del vendor  # part of the cache key only: the quoting is the connection's
    table = connection.ops.quote_name(Message._meta.db_table)
    columns = ", ".join(_column(Message, f) for f in _RECORD_FIELDS)
    where = " AND ".join(
        f"{_column(Message, field)} {op} %s" for field, op in (("cluster", "="), *terms)
    )
    direction = " DESC" if newest_first else ""
    order = ", ".join(f"{_column(Message, f)}{direction}" for f in ("timestamp", "sequence"))
    sql = f"SELECT {columns} FROM {table} WHERE {where} ORDER BY {order}"
    return f"{sql} LIMIT %s" if limit else sql


@cache
def _newest_of_each(vendor: str, terms: tuple[Term, ...], count: int) -> str:
    """The newest message of each of ``count`` topics, as one statement of ``count`` seeks."""
    one = _message_select(vendor, (("topic", "="), *terms), True, True)
    if count == 1:
        return one
    return " UNION ALL ".join(f"SELECT * FROM ({one}) AS newest_{i}" for i in range(count))


@cache
def _cluster_select(vendor: str) -> str:
    """One cluster with the timestamp of its newest message (one seek on ``msg_cluster_time``),
    as ``selectors._clusters`` reads it."""
    del vendor
    fields = (
        "id",
        "created_at",
        "state",
        "config",
        "template",
        "params",
        "last_sequence",
        "labels",
        "config_version",
    )
    clusters = connection.ops.quote_name(Cluster._meta.db_table)
    messages = connection.ops.quote_name(Message._meta.db_table)
    columns = ", ".join(f"c.{_column(Cluster, f)}" for f in fields)
    newest = (
        f"SELECT m.{_column(Message, 'timestamp')} FROM {messages} m "
        f"WHERE m.{_column(Message, 'cluster')} = c.{_column(Cluster, 'id')} "
        f"ORDER BY m.{_column(Message, 'timestamp')} DESC, m.{_column(Message, 'sequence')} DESC "
        "LIMIT 1"
    )
    return f"SELECT {columns}, ({newest}) FROM {clusters} c WHERE c.{_column(Cluster, 'id')} = %s"


def _json(value: Any) -> JSON:
    """A JSON column's value as ``JSONField`` reads it: both backends hand over the text."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _watched(db: BaseDatabaseWrapper) -> bool:
    """Whether Django is asked to see every statement (``DEBUG``, a captured query count, an
    ``execute_wrapper``), or must refuse one (a transaction that needs its rollback)."""
    return bool(db.queries_logged or db.execute_wrappers or db.needs_rollback)


def statement_rows(
    sql: str, params: Sequence[Any], *, prepare: bool = False
) -> list[tuple[Any, ...]]:
    """Run a prebuilt statement (SQL written with ``%s`` parameters, no literal ``%``) and
    return its rows: on the database driver's own cursor, in whatever transaction the
    connection is in, unless Django is watching (``_watched``), which then runs it on its
    cursor and sees it. Errors are Django's, as from its cursor (docs/decisions/0195).
    ``prepare``: see ``WriteCursor.execute``."""
    with _current_cursor() as cursor:
        cursor.execute(sql, params, prepare=prepare)
        return cursor.fetchall()


def statement_count(sql: str, params: Sequence[Any], *, prepare: bool = False) -> int:
    """``statement_rows`` for a write: the rows it changed (the cursor's ``rowcount``)."""
    with _current_cursor() as cursor:
        cursor.execute(sql, params, prepare=prepare)
        return cursor.rowcount


def _message(row: tuple[Any, ...], cluster_id: str) -> MessageRecord:
    message_id, sequence, timestamp, topic, sender, receiver, content, metadata = row
    content = _json(content)
    return MessageRecord(
        id=message_id,
        cluster_id=cluster_id,
        sequence=sequence,
        timestamp=timestamp,
        topic=topic,
        sender=sender,
        receiver=receiver,
        content=content if isinstance(content, dict) else {},
        metadata=_json(metadata),
    )


def messages_in_order(
    *,
    cluster_id: str,
    where: MessageFilter,
    newest_first: bool,
    limit: int | None,
    event: str | None = None,
) -> list[MessageRecord]:
    """The messages that pass ``where`` (``preparable``) and have this ``event``, in
    (timestamp, sequence) order, newest first when asked, at most ``limit``."""
    terms, params = _terms(where, event=event)
    sql = _message_select(connection.vendor, terms, newest_first, limit is not None)
    params = [cluster_id, *params] if limit is None else [cluster_id, *params, limit]
    return [_message(row, cluster_id) for row in statement_rows(sql, params)]


def newest_of_topics(
    *, cluster_id: str, topics: Sequence[str], where: MessageFilter
) -> list[MessageRecord]:
    """The newest message of each topic that passes ``where`` (whose own topic is ignored),
    in one statement; topics without one are missing from the result."""
    terms, params = _terms(replace(where, topic=None))
    sql = _newest_of_each(connection.vendor, terms, len(topics))
    each = [[cluster_id, topic, *params, 1] for topic in topics]
    rows = statement_rows(sql, [p for ps in each for p in ps])
    return [_message(row, cluster_id) for row in rows]


@cache
def _oldest_of_each(vendor: str, shapes: tuple[tuple[Term, ...], ...]) -> str:
    """The oldest messages (a ``LIMIT`` each) of each shape, as one statement of one seek each."""
    return " UNION ALL ".join(
        f"SELECT * FROM ({_message_select(vendor, terms, False, True)}) AS oldest_{i}"
        for i, terms in enumerate(shapes)
    )


def messages_of_each(
    *, cluster_id: str, wheres: Sequence[MessageFilter], limit: int
) -> list[MessageRecord]:
    """The oldest ``limit`` messages that pass each filter (``preparable``), in one statement:
    every filter's rows, in no order from one filter to the next."""
    shapes, params = [], []
    for where in wheres:
        terms, values = _terms(where)
        shapes.append(terms)
        params += [cluster_id, *values, limit]
    rows = statement_rows(_oldest_of_each(connection.vendor, tuple(shapes)), params)
    return [_message(row, cluster_id) for row in rows]


@cache
def _one_and_oldest_of_each(vendor: str, shapes: tuple[tuple[Term, ...], ...]) -> str:
    """One message by its id (tagged 0), then the oldest messages of each shape (tagged 1),
    as one statement of one seek each."""
    one = _one_select(vendor, "message_id")
    return " UNION ALL ".join(
        [
            f"SELECT 0 AS part, one.* FROM ({one}) AS one",
            *(
                f"SELECT 1, oldest_{i}.* FROM ({_message_select(vendor, terms, False, True)}) "
                f"AS oldest_{i}"
                for i, terms in enumerate(shapes)
            ),
        ]
    )


def message_and_oldest_of_each(
    *, cluster_id: str, message_id: str, wheres: Sequence[MessageFilter], limit: int
) -> tuple[MessageRecord | None, list[MessageRecord]]:
    """``message_by_id`` and ``messages_of_each`` in one statement: the message (or None) and
    the oldest ``limit`` messages that pass each filter (``preparable``), in no order from one
    filter to the next."""
    shapes: list[tuple[Term, ...]] = []
    params: list[Any] = [cluster_id, message_id]
    for where in wheres:
        terms, values = _terms(where)
        shapes.append(terms)
        params += [cluster_id, *values, limit]
    rows = statement_rows(_one_and_oldest_of_each(connection.vendor, tuple(shapes)), params)
    one = [_message(row[1:], cluster_id) for row in rows if row[0] == 0]
    each = [_message(row[1:], cluster_id) for row in rows if row[0] != 0]
    return (one[0] if one else None), each


@cache
def _after_select(vendor: str) -> str:
    """The messages of a cluster after one sequence up to another, in sequence order, with
    their ``imported`` flag (one range seek on the cluster's sequence key)."""
    del vendor
    table = connection.ops.quote_name(Message._meta.db_table)
    columns = ", ".join(_column(Message, f) for f in (*_RECORD_FIELDS, "imported"))
    cluster, sequence = _column(Message, "cluster"), _column(Message, "sequence")
    return (
        f"SELECT {columns} FROM {table} WHERE {cluster} = %s AND {sequence} > %s "
        f"AND {sequence} <= %s ORDER BY {sequence} LIMIT %s"
    )


@cache
def _topics_after_select(vendor: str, count: int, bounded: bool) -> str:
    """The messages of ``count`` topics after one sequence (up to another when ``bounded``),
    in sequence order, LIMITed: a walk of the cluster's sequence key from ``after``."""
    del vendor
    table = connection.ops.quote_name(Message._meta.db_table)
    columns = ", ".join(_column(Message, f) for f in _RECORD_FIELDS)
    cluster, sequence = _column(Message, "cluster"), _column(Message, "sequence")
    topics = ", ".join(["%s"] * count)
    upto = f" AND {sequence} <= %s" if bounded else ""
    return (
        f"SELECT {columns} FROM {table} WHERE {cluster} = %s AND {sequence} > %s{upto} "
        f"AND {_column(Message, 'topic')} IN ({topics}) ORDER BY {sequence} LIMIT %s"
    )


def messages_of_topics_after(
    *, cluster_id: str, topics: Sequence[str], after: int, upto: int | None, limit: int
) -> list[MessageRecord]:
    """The messages of some topics with ``after < sequence`` (``<= upto``), at most ``limit``,
    in sequence order (``selectors.message_tail_topics``, the snapshotter's read)."""
    sql = _topics_after_select(connection.vendor, len(topics), upto is not None)
    bound = [] if upto is None else [upto]
    rows = statement_rows(sql, [cluster_id, after, *bound, *topics, limit])
    return [_message(row, cluster_id) for row in rows]


@cache
def _after_topics_select(vendor: str) -> str:
    """``_after_select`` for the sequence, topic and ``imported`` flag of each message alone."""
    del vendor
    table = connection.ops.quote_name(Message._meta.db_table)
    columns = ", ".join(_column(Message, f) for f in ("sequence", "topic", "imported"))
    cluster, sequence = _column(Message, "cluster"), _column(Message, "sequence")
    return (
        f"SELECT {columns} FROM {table} WHERE {cluster} = %s AND {sequence} > %s "
        f"AND {sequence} <= %s ORDER BY {sequence} LIMIT %s"
    )


def message_topics_after(
    *, cluster_id: str, after: int, upto: int, limit: int
) -> list[tuple[int, str, bool]]:
    """``messages_after`` without the messages: each one's sequence, topic and whether it was
    imported, which is all the pipeline needs to pass over messages no stage reacts to."""
    rows = statement_rows(
        _after_topics_select(connection.vendor), [cluster_id, after, upto, limit], prepare=True
    )
    return [(sequence, topic, bool(imported)) for sequence, topic, imported in rows]


def messages_after(
    *, cluster_id: str, after: int, upto: int, limit: int
) -> list[tuple[MessageRecord, bool]]:
    """The messages with ``after < sequence <= upto``, at most ``limit``, in sequence order,
    each with whether it was imported: the post-commit pipeline's read."""
    rows = statement_rows(
        _after_select(connection.vendor), [cluster_id, after, upto, limit], prepare=True
    )
    return [(_message(row[:-1], cluster_id), bool(row[-1])) for row in rows]


@cache
def _one_select(vendor: str, key: str) -> str:
    """One message of a cluster by ``key``, its id or its sequence: a seek on the unique
    ``message_cluster_id`` or ``(cluster, sequence)``."""
    del vendor
    table = connection.ops.quote_name(Message._meta.db_table)
    columns = ", ".join(_column(Message, f) for f in _RECORD_FIELDS)
    return (
        f"SELECT {columns} FROM {table} WHERE {_column(Message, 'cluster')} = %s "
        f"AND {_column(Message, key)} = %s"
    )


def message_by_id(*, cluster_id: str, message_id: str) -> MessageRecord | None:
    """The message ``message_id`` of the cluster, or None: a claim's build reads its trigger."""
    rows = statement_rows(
        _one_select(connection.vendor, "message_id"), [cluster_id, message_id], prepare=True
    )
    return _message(rows[0], cluster_id) if rows else None


def message_by_sequence(*, cluster_id: str, sequence: int) -> MessageRecord | None:
    """The message at ``sequence`` in the cluster, or None: the snapshotter checks what it
    folded last this way on every turn with a trigger message."""
    rows = statement_rows(
        _one_select(connection.vendor, "sequence"), [cluster_id, sequence], prepare=True
    )
    return _message(rows[0], cluster_id) if rows else None


def cluster_row(*, cluster_id: str) -> ClusterRecord | None:
    """One cluster as ``selectors.cluster_record`` detaches it, or ``None``."""
    found = statement_rows(_cluster_select(connection.vendor), [cluster_id], prepare=True)
    if not found:
        return None
    (id_, created_at, state, config, template, params, last_sequence, labels, version, newest) = (
        found[0]
    )
    return _cluster_record(
        id_, created_at, state, config, template, params, last_sequence, labels, version, newest
    )


def _cluster_record(
    id_: str,
    created_at: int,
    state: str,
    config: Any,
    template: str | None,
    params: Any,
    last_sequence: int,
    labels: Any,
    version: int | None,
    activity: int | None,
) -> ClusterRecord:
    """A cluster's row, its JSON columns as stored, detached as ``selectors.cluster_record``
    does (``activity``: its newest message's time)."""
    text = config if isinstance(config, str) else None
    config = _config(text) if text is not None else _json(config)
    params = _json(params)
    return ClusterRecord(
        id=id_,
        created_at=created_at,
        state=state,
        config=config if isinstance(config, dict) else {},
        config_text=text if isinstance(config, dict) else None,
        template=template or None,
        params=params if isinstance(params, dict) else {},
        message_count=last_sequence,
        last_sequence=last_sequence,
        last_activity=activity or None,
        labels=labels_stored(_json(labels)),
        config_version=version or 1,
    )


@lru_cache(maxsize=64)
def _config(text: str) -> JSON:
    """A cluster's config as its stored text reads, frozen (``ledger.frozen``) and kept per
    text: every read of a cluster's row (a claim, its completion, each pipeline turn) shares
    one parse of a config that rarely changes, and none of them can change it for the others.
    A changed config is a new text, parsed anew."""
    return frozen(_json(text))


@cache
def _pipeline_select(vendor: str) -> str:
    """One cluster's record and its pipeline cursor, as the pipeline reads it for a turn."""
    del vendor
    fields = (
        "id",
        "created_at",
        "state",
        "config",
        "template",
        "params",
        "last_sequence",
        "last_timestamp",
        "labels",
        "config_version",
        "pipeline_sequence",
    )
    columns = ", ".join(_column(Cluster, f) for f in fields)
    return (
        f"SELECT {columns} FROM {connection.ops.quote_name(Cluster._meta.db_table)} "
        f"WHERE {_column(Cluster, 'id')} = %s"
    )


def pipeline_cluster(*, cluster_id: str) -> tuple[ClusterRecord, int] | None:
    """A cluster as ``selectors.cluster_record`` detaches a row (its activity is its clock),
    with its pipeline cursor; ``None`` when it does not exist or the cursor is caught up."""
    found = statement_rows(_pipeline_select(connection.vendor), [cluster_id], prepare=True)
    if not found:
        return None
    (id_, created_at, state, config, template, params, last_sequence, last_timestamp) = found[0][:8]
    labels, version, cursor = found[0][8:]
    if cursor >= last_sequence:
        return None
    record = _cluster_record(
        id_,
        created_at,
        state,
        config,
        template,
        params,
        last_sequence,
        labels,
        version,
        last_timestamp,
    )
    return record, cursor


@cache
def _progress_select(vendor: str) -> str:
    """A cluster's newest sequence and its pipeline's cursor: one seek on its primary key."""
    del vendor
    columns = f"{_column(Cluster, 'last_sequence')}, {_column(Cluster, 'pipeline_sequence')}"
    return (
        f"SELECT {columns} FROM {connection.ops.quote_name(Cluster._meta.db_table)} "
        f"WHERE {_column(Cluster, 'id')} = %s"
    )


def cluster_found(*, cluster_id: str) -> bool:
    """Whether a cluster with this id exists (a websocket's handshake asks it each time): the
    progress statement's seek on its primary key."""
    return cluster_progress(cluster_id=cluster_id) is not None


def cluster_progress(*, cluster_id: str) -> tuple[int, int] | None:
    """A cluster's newest sequence and the sequence its pipeline has passed, or ``None`` when
    it does not exist (``Pipeline.caught_up`` reads it before every read that needs it)."""
    found = statement_rows(_progress_select(connection.vendor), [cluster_id])
    return (found[0][0], found[0][1]) if found else None


@cache
def _config_versions_select(vendor: str) -> str:
    """A cluster's stored configs, oldest first (a seek on the index of the unique
    ``cluster_config_version_unique``)."""
    del vendor
    fields = ("version", "config", "sender", "message_id", "diff", "created_at")
    columns = ", ".join(_column(ClusterConfigVersion, f) for f in fields)
    return (
        f"SELECT {columns} FROM {connection.ops.quote_name(ClusterConfigVersion._meta.db_table)} "
        f"WHERE {_column(ClusterConfigVersion, 'cluster')} = %s "
        f"ORDER BY {_column(ClusterConfigVersion, 'version')}"
    )


def config_versions(*, cluster_id: str) -> list[ConfigVersionRecord]:
    """Every stored config of a cluster, oldest first, detached as the ORM's rows were."""
    records = []
    for version, config, sender, message_id, diff, created_at in statement_rows(
        _config_versions_select(connection.vendor), [cluster_id]
    ):
        config, diff = _json(config), _json(diff)
        records.append(
            ConfigVersionRecord(
                version=version,
                config=config if isinstance(config, dict) else {},
                sender=sender,
                message_id=message_id,
                diff=diff if isinstance(diff, list) else [],
                created_at=created_at,
            )
        )
    return records


@cache
def _cursor_move_sql(vendor: str) -> str:
    del vendor
    table = connection.ops.quote_name(Cluster._meta.db_table)
    cursor, last = _column(Cluster, "pipeline_sequence"), _column(Cluster, "last_sequence")
    return (
        f"UPDATE {table} SET {cursor} = %s "
        f"WHERE {_column(Cluster, 'id')} = %s AND {cursor} = %s AND {last} >= %s"
    )


def pipeline_cursor_move(*, cluster_id: str, after: int, to: int) -> bool:
    """Move a cluster's pipeline cursor from ``after`` to ``to`` (at most its newest message)
    in one statement, only if it is still at ``after``: False when another run moved it."""
    with connection.cursor() as cursor:
        cursor.execute(_cursor_move_sql(connection.vendor), [to, cluster_id, after, to])
        moved: int = cursor.rowcount
    return moved == 1


def wal_checkpoint() -> None:
    """SQLite: copy what the WAL holds into the database file, as far as no reader still
    needs it (``PASSIVE``: no writer waits for it). Nothing elsewhere."""
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
        cursor.fetchall()


# --- writes ------------------------------------------------------------------------------


@dataclass(slots=True)
class ClusterRow:
    """The columns of a cluster that its writes read and move, as locked for a transaction."""

    id: str
    last_sequence: int
    last_timestamp: int
    state: str
    pipeline_sequence: int

    @classmethod
    def of(cls, cluster: Cluster) -> ClusterRow:
        return cls(
            id=cluster.pk,
            last_sequence=cluster.last_sequence,
            last_timestamp=cluster.last_timestamp,
            state=cluster.state,
            pipeline_sequence=cluster.pipeline_sequence,
        )


_ROW_COLUMNS = ("last_sequence", "last_timestamp", "state", "pipeline_sequence")
# The columns a publish sets, in the order of ``message_insert``'s tuples.
MESSAGE_COLUMNS = (
    "cluster_id",
    "message_id",
    "sequence",
    "timestamp",
    "topic",
    "sender",
    "receiver",
    "content",
    "metadata",
    "replayable",
    "event",
    "idempotency_key",
    "body_hash",
)


class WriteCursor:
    """The cursor a write transaction runs its statements on: Django's, or the database
    driver's own, which a publish uses to skip Django's per-statement layers
    (docs/decisions/0175). The SQL is written once, with ``%s`` parameters; the driver's SQLite
    cursor gets it with ``?``. It holds the connection it was opened on, so that the statements
    do not look ``django.db.connection`` up again for each of them."""

    __slots__ = (
        "_cursor",
        "_qmark",
        "_server_bound",
        "driver",
        "features",
        "ops",
        "params_limit",
        "vendor",
    )

    def __init__(self, cursor: Any, *, db: BaseDatabaseWrapper, driver: bool) -> None:
        self._cursor = cursor
        # The driver's own cursor, whose statements Django does not see (nor log, nor count).
        self.driver = driver
        self.vendor: str = db.vendor
        self.ops = db.ops
        self.features = db.features
        self._qmark = driver and db.vendor == "sqlite"
        # psycopg's cursor that binds on the server, which can prepare (``_driver_cursor``).
        self._server_bound = driver and db.vendor == "postgresql"
        # How many parameters one statement may bind.
        self.params_limit = _params_limit(db)

    def execute(self, sql: str, params: Sequence[Any], *, prepare: bool = False) -> None:
        """Run ``sql``. ``prepare``: on PostgreSQL, prepared on this connection at its first
        run and planned once for any values, for a statement whose plan cannot depend on them
        (a lookup by key, an insert, a seek of an index that starts with its equalities);
        every other statement is parsed and planned at each run (docs/decisions/0309)."""
        if self._server_bound:
            self._cursor.execute(sql, params, prepare=prepare)
        else:
            self._cursor.execute(_qmark(sql) if self._qmark else sql, params)

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        self._cursor.executemany(_qmark(sql) if self._qmark else sql, params)

    def copy(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """``COPY … FROM STDIN`` of ``rows`` (psycopg's driver cursor only)."""
        with self._cursor.copy(sql) as copy:
            for row in rows:
                copy.write_row(row)

    def fetchone(self) -> tuple[Any, ...] | None:
        found: tuple[Any, ...] | None = self._cursor.fetchone()
        return found

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self._cursor.fetchall()
        return rows

    @property
    def rowcount(self) -> int:
        return int(self._cursor.rowcount)

    @property
    def closed(self) -> bool:
        return bool(self._cursor.closed)


def _params_limit(db: BaseDatabaseWrapper) -> int:
    """SQLite's own limit of bound parameters (its driver reads it; Django assumes the 999 of
    SQLite before 3.32), else Django's figure for the database, else PostgreSQL's 65,535."""
    if db.vendor == "sqlite" and db.connection is not None:
        return int(db.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
    return int(db.features.max_query_params or 65_535)


@contextmanager
def _current_cursor() -> Iterator[WriteCursor]:
    """A cursor in the connection's current transaction (a ``cluster_transaction``'s, or
    none): the driver's, unless Django watches statements (``_watched``), then Django's."""
    db = connections[DEFAULT_DB_ALIAS]
    if _watched(db) or db.connection is None:
        with db.cursor() as cursor:
            yield WriteCursor(cursor, db=db, driver=False)
        return
    with db.wrap_database_errors:
        if db.vendor == "postgresql":
            yield _kept_cursor(db)
            return
        cursor = _driver_cursor(db)
        try:
            yield WriteCursor(cursor, db=db, driver=True)
        finally:
            cursor.close()


# Where a connection's kept cursor hangs on Django's wrapper (one wrapper per thread).
_KEPT = "_ledger_kept_cursor"


def _kept_cursor(db: BaseDatabaseWrapper) -> WriteCursor:
    """PostgreSQL: the driver's cursor of the wrapper's current connection, made once and kept
    (psycopg takes a statement's rows when it runs it, so a cursor holds nothing from one
    statement to the next, and making one cost more than a short statement's own work). A new
    connection (the pool lends another, a reconnect) gets a cursor of its own."""
    kept: tuple[Any, WriteCursor] | None = getattr(db, _KEPT, None)
    if kept is None or kept[0] is not db.connection or kept[1].closed:
        kept = (db.connection, WriteCursor(_driver_cursor(db), db=db, driver=True))
        setattr(db, _KEPT, kept)
    return kept[1]


def _driver_cursor(db: BaseDatabaseWrapper) -> Any:
    """The database driver's own cursor for the prebuilt statements. On PostgreSQL one that
    binds the values on the server, so that psycopg can prepare the statements that ask for it
    (``WriteCursor.execute``). Django's own cursors, the ORM's, bind on the client and are
    never prepared (docs/decisions/0309)."""
    if db.vendor == "postgresql":
        import psycopg

        return psycopg.Cursor(db.connection)
    return db.connection.cursor()


@cache
def _qmark(sql: str) -> str:
    # Our statements hold no literal ``%``: every ``%s`` is a parameter.
    return sql.replace("%s", "?")


@contextmanager
def driver_transaction() -> Iterator[WriteCursor | None]:
    """A durable write transaction on the database driver's connection, begun and committed
    by its own ``BEGIN`` (SQLite: the configured ``BEGIN IMMEDIATE``) and ``COMMIT``: what
    ``transaction.atomic(durable=True)`` does, without its bookkeeping. Yields the cursor for
    the transaction's statements: the driver's, or Django's while Django is asked to see every
    query (``DEBUG``, a captured query count, an ``execute_wrapper``).

    Yields ``None`` instead, without beginning anything, inside a caller's transaction (or
    with autocommit off): the caller then uses ``transaction.atomic(durable=True)``, which
    refuses to nest but takes part in a test's transaction as a savepoint.
    """
    db = connections[DEFAULT_DB_ALIAS]
    if db.in_atomic_block or not db.get_autocommit():
        yield None
        return
    db.ensure_connection()
    with sqlite_write_turn(db), db.wrap_database_errors:
        cursor = _driver_cursor(db)
        # Its statements are never prepared: BEGIN, ROLLBACK and COMMIT ask nothing else.
        control = WriteCursor(cursor, db=db, driver=True)
        try:
            control.execute(_begin_sql(db.vendor, getattr(db, "transaction_mode", None)), [])
            try:
                if db.queries_logged or db.execute_wrappers:
                    with db.cursor() as seen:
                        yield WriteCursor(seen, db=db, driver=False)
                else:
                    yield control
            except BaseException:
                control.execute("ROLLBACK", [])
                raise
            control.execute("COMMIT", [])
        finally:
            cursor.close()


@cache
def _begin_sql(vendor: str, mode: str | None) -> str:
    return f"BEGIN {mode}" if vendor == "sqlite" and mode else "BEGIN"


def cluster_row_lock(cluster_id: str, *, cursor: WriteCursor | None = None) -> ClusterRow | None:
    """Read the cluster's row under its lock (``FOR UPDATE``; SQLite's transactions already hold
    the database's write lock from their start)."""
    if cursor is None:
        with _current_cursor() as django:
            return cluster_row_lock(cluster_id, cursor=django)
    cursor.execute(_lock_sql(cursor.vendor), [cluster_id], prepare=True)
    found = cursor.fetchone()
    return None if found is None else ClusterRow(cluster_id, *found)


def cluster_row_claim(
    cluster_id: str, *, count: int, floor: int, cursor: WriteCursor
) -> ClusterRow | None:
    """Lock the cluster's row and move it past ``count`` new messages in one statement
    (``UPDATE … RETURNING``), the first of them stamped no earlier than ``floor`` and after the
    row's clock: what ``cluster_row_lock``, the stamping and ``cluster_row_update`` of a
    publish do in two statements. Returns the row as the lock would have read it, its clock
    one before the first new message's (so ``ClusterWriter`` stamps the messages as the row
    did), or ``None`` when the cluster does not exist. Only on databases that return rows
    from an ``UPDATE`` (``claimable``)."""
    cursor.execute(
        _claim_sql(cursor.vendor), [count, count, floor + count - 1, cluster_id], prepare=True
    )
    found = cursor.fetchone()
    if found is None:
        return None
    last_sequence, last_timestamp, state, pipeline_sequence = found
    return ClusterRow(
        cluster_id, last_sequence - count, last_timestamp - count, state, pipeline_sequence
    )


def cluster_row_claim_or_lock(
    cluster_id: str, *, count: int, floor: int, cursor: WriteCursor | None = None
) -> tuple[ClusterRow | None, bool]:
    """``cluster_row_claim`` where it can run, else ``cluster_row_lock`` (on ``cursor``, or in
    the connection's current transaction); the row, and whether it was claimed."""
    if cursor is None:
        with _current_cursor() as django:
            return cluster_row_claim_or_lock(cluster_id, count=count, floor=floor, cursor=django)
    if claimable(cursor):
        return cluster_row_claim(cluster_id, count=count, floor=floor, cursor=cursor), True
    return cluster_row_lock(cluster_id, cursor=cursor), False


def autocommit_possible() -> bool:
    """Whether a statement here is a durable transaction of its own: PostgreSQL outside any
    transaction, autocommit on. Not on SQLite (no statement there writes two tables), inside
    a caller's transaction, or with autocommit off."""
    db = connections[DEFAULT_DB_ALIAS]
    return db.vendor == "postgresql" and not db.in_atomic_block and db.get_autocommit()


def cluster_claim_insert(
    cluster_id: str, rows: Sequence[Sequence[Any]], *, floor: int
) -> dict[str, tuple[int, int]]:
    """Move the cluster's row past ``rows`` (new messages), the first stamped no earlier than
    ``floor`` and after the row's clock, the others 1 ms apart, and insert them in order at the
    sequences and times the move gave them, in one statement (an ``UPDATE … RETURNING`` in a
    ``WITH``, PostgreSQL) run where ``autocommit_possible``: its own transaction, one round trip
    where ``BEGIN``, the claim, the ``INSERT`` and ``COMMIT`` took four (docs/decisions/0265).
    ``rows`` are messages in ``MESSAGE_COLUMNS`` order; their sequence and timestamp are left
    out for the claim's. Returns each message's (sequence, timestamp) by its id: empty when the
    cluster does not exist (then nothing is written)."""
    sql, defaults = _claim_insert_sql(connection.vendor, len(rows))
    params: list[Any] = [floor + len(rows) - 1, cluster_id]
    for order, row in enumerate(rows, start=1):
        params.append(order)
        params += [v for name, v in zip(MESSAGE_COLUMNS, row, strict=True) if name not in _CLAIMED]
        params += defaults
    # A statement per number of rows: the few of single publishes and task ends are prepared.
    placed = statement_rows(sql, params, prepare=len(rows) <= PREPARED_ROWS)
    return {message_id: (sequence, timestamp) for message_id, sequence, timestamp in placed}


# The most rows of a ``cluster_claim_insert`` that is prepared (``WriteCursor.execute``).
PREPARED_ROWS = 4

# The message columns ``cluster_claim_insert`` takes from the claimed row, not from its caller.
_CLAIMED = {"sequence": "last_sequence", "timestamp": "last_timestamp"}


def claimable(cursor: WriteCursor) -> bool:
    """Whether ``cluster_row_claim`` can run here (SQLite from 3.35 and PostgreSQL can)."""
    return bool(cursor.features.can_return_columns_from_insert)


def cluster_row_update(
    row: ClusterRow, fields: Sequence[str], *, cursor: WriteCursor | None = None
) -> None:
    """Write ``fields`` of the row back (names of ``ClusterRow``'s columns)."""
    if cursor is None:
        with _current_cursor() as django:
            cluster_row_update(row, fields, cursor=django)
        return
    cursor.execute(
        _update_sql(cursor.vendor, tuple(fields)),
        [*(getattr(row, name) for name in fields), row.id],
        prepare=True,
    )


def json_param(value: JSON, *, cursor: WriteCursor | None = None) -> Any:
    """A JSON value as the database driver takes it for a ``JSONField`` column."""
    ops = cursor.ops if cursor is not None else connection.ops
    return ops.adapt_json_value(value, None)


def message_insert(
    rows: Sequence[tuple[Any, ...]],
    *,
    columns: tuple[str, ...] = MESSAGE_COLUMNS,
    json_as_text: bool = False,
    cursor: WriteCursor | None = None,
) -> None:
    """Insert message rows given in ``columns`` order (attribute names of ``Message``); every
    other column of the model gets its default. JSON values are adapted with ``json_param``,
    or, with ``json_as_text``, given as JSON text (cast to ``jsonb`` on PostgreSQL). Runs on
    ``cursor`` when given (a write transaction's), else on a Django cursor of its own."""
    if cursor is None:
        with _current_cursor() as django:
            message_insert(rows, columns=columns, json_as_text=json_as_text, cursor=django)
        return
    sql, defaults = _insert_sql(cursor.vendor, columns, json_as_text)
    params = [(*row, *defaults) for row in rows] if defaults else rows
    if len(params) == 1:
        cursor.execute(sql, params[0], prepare=True)
        return
    if cursor.vendor == "postgresql" and cursor.driver:
        # One ``COPY`` of the rows: psycopg formats them in C, where ``executemany`` adapted
        # each value in Python (a statement of many rows cost more still); docs/decisions/0241.
        cursor.copy(_copy_sql(cursor.vendor, columns), params)
        return
    if cursor.vendor != "sqlite":
        # Seen by Django (a captured query count, ``DEBUG``): the statement it can log.
        cursor.executemany(sql, params)
        return
    # Many rows to a statement, not one statement a row: SQLite's search index writes what its
    # trigger collected at the end of each statement, so one statement of 100 rows costs a
    # quarter of 100 one-row statements (docs/decisions/0240).
    per = _rows_per_statement(cursor, len(params[0]))
    for start in range(0, len(params), per):
        chunk = params[start : start + per]
        cursor.execute(
            _insert_rows_sql(cursor.vendor, columns, json_as_text, len(chunk)),
            list(chain.from_iterable(chunk)),
        )


# The most rows one INSERT takes: beyond a few hundred a larger statement saves little more.
ROWS_PER_INSERT = 256


def _rows_per_statement(cursor: WriteCursor, width: int) -> int:
    """How many rows of ``width`` values one INSERT may take: ``ROWS_PER_INSERT``, or fewer
    when the database binds fewer parameters to a statement (SQLite's compiled limit, 999
    before 3.32)."""
    return max(1, min(ROWS_PER_INSERT, cursor.params_limit // width))


@cache
def _insert_rows_sql(vendor: str, names: tuple[str, ...], json_as_text: bool, count: int) -> str:
    """``_insert_sql``'s statement for ``count`` rows at once."""
    sql, _ = _insert_sql(vendor, names, json_as_text)
    head, values = sql.split(" VALUES ")
    return f"{head} VALUES {', '.join([values] * count)}"


@cache
def _lock_sql(vendor: str) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(_column(Cluster, name) for name in _ROW_COLUMNS)
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return (
        f"SELECT {columns} FROM {quote(Cluster._meta.db_table)} "
        f"WHERE {_column(Cluster, 'id')} = %s{lock}"
    )


@cache
def _claim_sql(vendor: str) -> str:
    quote = connection.ops.quote_name
    sequence, clock = _column(Cluster, "last_sequence"), _column(Cluster, "last_timestamp")
    later = "GREATEST" if vendor == "postgresql" else "MAX"
    returned = ", ".join(_column(Cluster, name) for name in _ROW_COLUMNS)
    return (
        f"UPDATE {quote(Cluster._meta.db_table)} SET {sequence} = {sequence} + %s, "
        f"{clock} = {later}({clock} + %s, %s) "
        f"WHERE {_column(Cluster, 'id')} = %s RETURNING {returned}"
    )


@cache
def _claim_insert_sql(vendor: str, count: int) -> tuple[str, tuple[Any, ...]]:
    """``cluster_claim_insert``'s statement for ``count`` messages, and the values of the
    columns a publish leaves to their defaults (the last of each row's parameters)."""
    quote = connection.ops.quote_name
    sequence, clock = _column(Cluster, "last_sequence"), _column(Cluster, "last_timestamp")
    columns, _ = _insert_fields(MESSAGE_COLUMNS)
    _, defaults = _insert_sql(vendor, MESSAGE_COLUMNS, False)
    given = [f for f in columns if f.attname not in _CLAIMED]
    names = [f"v{i}" for i in range(len(given))]
    # Typed in the VALUES themselves: the rows' text would otherwise be read as ``text``.
    typed = ", ".join(["%s::integer", *(f"%s::{f.db_type(connection)}" for f in given)])
    selected = ", ".join(
        f"claim.{_column(Cluster, _CLAIMED[f.attname])} - {count} + v.ord"
        if f.attname in _CLAIMED
        else f"v.{names[given.index(f)]}"
        for f in columns
    )
    values = ", ".join([f"({typed})"] * count)
    returned = ", ".join(_column(Message, f) for f in ("message_id", "sequence", "timestamp"))
    return (
        f"WITH claim AS (UPDATE {quote(Cluster._meta.db_table)} "
        f"SET {sequence} = {sequence} + {count}, {clock} = GREATEST({clock} + {count}, %s) "
        f"WHERE {_column(Cluster, 'id')} = %s RETURNING {sequence}, {clock}) "
        f"INSERT INTO {quote(Message._meta.db_table)} "
        f"({', '.join(quote(f.column) for f in columns)}) "
        f"SELECT {selected} FROM claim, (VALUES {values}) AS v(ord, {', '.join(names)}) "
        f"ORDER BY v.ord RETURNING {returned}"
    ), defaults


@cache
def _update_sql(vendor: str, fields: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{_column(Cluster, name)} = %s" for name in fields)
    return (
        f"UPDATE {quote(Cluster._meta.db_table)} SET {assignments} "
        f"WHERE {_column(Cluster, 'id')} = %s"
    )


def _insert_fields(names: tuple[str, ...]) -> tuple[list[Field[Any, Any]], list[Field[Any, Any]]]:
    """The columns an insert of ``names`` sets, in order: those, then every other column of
    ``Message`` (which get their defaults); and the others alone."""
    fields = {f.attname: f for f in Message._meta.concrete_fields if not f.primary_key}
    others = [f for name, f in fields.items() if name not in names]
    return [fields[name] for name in names] + others, others


@cache
def _copy_sql(vendor: str, names: tuple[str, ...]) -> str:
    """``_insert_sql``'s rows as a ``COPY`` (PostgreSQL; JSON text or adapted alike, as the
    column's type reads text)."""
    del vendor
    columns, _ = _insert_fields(names)
    quote = connection.ops.quote_name
    return (
        f"COPY {quote(Message._meta.db_table)} "
        f"({', '.join(quote(f.column) for f in columns)}) FROM STDIN"
    )


@cache
def _insert_sql(
    vendor: str, names: tuple[str, ...], json_as_text: bool
) -> tuple[str, tuple[Any, ...]]:
    columns, others = _insert_fields(names)
    defaults = tuple(f.get_db_prep_save(f.get_default(), connection) for f in others)
    text_cast = json_as_text and vendor == "postgresql"
    placeholders = [
        "%s::jsonb" if text_cast and f.get_internal_type() == "JSONField" else "%s" for f in columns
    ]
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quote(Message._meta.db_table)} "
        f"({', '.join(quote(f.column) for f in columns)}) "
        f"VALUES ({', '.join(placeholders)})"
    )
    return sql, defaults
