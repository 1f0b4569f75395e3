"""Prepared SQL for the ledger's write path: the same statements on SQLite and PostgreSQL.

A write runs three statements: lock and read the cluster's row, insert the messages (one
``executemany`` for a whole batch), update the row. Building them through the ORM costs more than
running them (statement compilation, a model instance per row), so they are built once per
database vendor from the models' own metadata and reused (docs/decisions/0071-lean-writes.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field

from ledger.models import Cluster, Message
from ledger.records import JSON


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


def cluster_row_lock(cluster_id: str) -> ClusterRow | None:
    """Read the cluster's row under its lock (``FOR UPDATE``; SQLite's transactions already hold
    the database's write lock from their start)."""
    with connection.cursor() as cursor:
        cursor.execute(_lock_sql(connection.vendor), [cluster_id])
        found = cursor.fetchone()
    return None if found is None else ClusterRow(cluster_id, *found)


def cluster_row_update(row: ClusterRow, fields: Sequence[str]) -> None:
    """Write ``fields`` of the row back (names of ``ClusterRow``'s columns)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _update_sql(connection.vendor, tuple(fields)),
            [*(getattr(row, name) for name in fields), row.id],
        )


def json_param(value: JSON) -> Any:
    """A JSON value as the database driver takes it for a ``JSONField`` column."""
    return connection.ops.adapt_json_value(value, None)


def message_insert(rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert message rows given in ``MESSAGE_COLUMNS`` order; every other column of the
    model gets its default. JSON values must already be adapted with ``json_param``."""
    sql, defaults = _insert_sql(connection.vendor)
    params = [(*row, *defaults) for row in rows] if defaults else rows
    with connection.cursor() as cursor:
        if len(params) == 1:
            cursor.execute(sql, params[0])
        else:
            cursor.executemany(sql, params)


@cache
def _lock_sql(vendor: str) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(_column(Cluster, name)) for name in _ROW_COLUMNS)
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return (
        f"SELECT {columns} FROM {quote(Cluster._meta.db_table)} "
        f"WHERE {quote(_column(Cluster, 'id'))} = %s{lock}"
    )


@cache
def _update_sql(vendor: str, fields: tuple[str, ...]) -> str:
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(_column(Cluster, name))} = %s" for name in fields)
    return (
        f"UPDATE {quote(Cluster._meta.db_table)} SET {assignments} "
        f"WHERE {quote(_column(Cluster, 'id'))} = %s"
    )


@cache
def _insert_sql(vendor: str) -> tuple[str, tuple[Any, ...]]:
    fields = {f.attname: f for f in Message._meta.concrete_fields if not f.primary_key}
    others = [f for name, f in fields.items() if name not in MESSAGE_COLUMNS]
    columns: list[Field[Any, Any]] = [fields[name] for name in MESSAGE_COLUMNS] + others
    defaults = tuple(f.get_db_prep_save(f.get_default(), connection) for f in others)
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quote(Message._meta.db_table)} "
        f"({', '.join(quote(f.column) for f in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))})"
    )
    return sql, defaults


def _column(model: type[Cluster] | type[Message], name: str) -> str:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return str(field.column)
