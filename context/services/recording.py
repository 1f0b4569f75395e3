"""The row of a recorded build, inserted through a prebuilt statement.

Every recorded build inserts one; compiling that INSERT through the ORM (a model instance,
``save``, the compiler) cost more than the database's work, so the statement is written once
from the model's columns and run on the database driver's cursor (``statement_rows``), on
SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connection

from context.models import ContextBuild
from ledger.interfaces import statement_count, statement_rows

# The columns a build sets, in the order of ``build_insert``'s values; any other column of the
# model is inserted with its default.
_COLUMNS = (
    "cluster_id",
    "agent_id",
    "role",
    "iteration",
    "started_at",
    "trigger_message_id",
    "trigger_topic",
    "max_tokens",
    "final_tokens",
    "metrics",
    "pack_texts",
    "guidance_through",
    "guidance_delivered",
    "config_version",
)


@cache
def _insert(vendor: str) -> tuple[str, tuple[Any, ...]]:
    """The INSERT (returning the new id where the database can) and the other columns' values."""
    del vendor  # part of the cache key only: the quoting and the defaults are the connection's
    fields = {f.attname: f for f in ContextBuild._meta.concrete_fields if not f.primary_key}
    others = [f for name, f in fields.items() if name not in _COLUMNS]
    columns = [fields[name] for name in _COLUMNS] + others
    defaults = tuple(f.get_db_prep_save(f.get_default(), connection) for f in others)
    q = connection.ops.quote_name
    sql = (
        f"INSERT INTO {q(ContextBuild._meta.db_table)} "
        f"({', '.join(q(f.column) for f in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))})"
    )
    if connection.features.can_return_columns_from_insert:
        sql += f" RETURNING {q(ContextBuild._meta.pk.column)}"
    return sql, defaults


def build_insert(
    *,
    cluster_id: str,
    agent_id: str,
    role: str,
    iteration: int,
    started_at: int,
    trigger_message_id: str,
    trigger_topic: str,
    max_tokens: int,
    final_tokens: int,
    metrics: dict[str, Any],
    pack_texts: list[list[str]],
    guidance_through: int | None = None,
    guidance_delivered: bool = False,
    config_version: int = 1,
) -> int:
    """Store a recorded build (inside the caller's transaction) and return its id."""
    sql, defaults = _insert(connection.vendor)
    adapt_json = connection.ops.adapt_json_value
    params = (
        cluster_id,
        agent_id,
        role,
        iteration,
        started_at,
        trigger_message_id,
        trigger_topic,
        max_tokens,
        final_tokens,
        adapt_json(metrics, None),
        adapt_json(pack_texts, None),
        guidance_through,
        guidance_delivered,
        config_version,
        *defaults,
    )
    if connection.features.can_return_columns_from_insert:
        return int(statement_rows(sql, params, prepare=True)[0][0])
    with connection.cursor() as cursor:  # SQLite before 3.35: the new id is the last row's
        cursor.execute(sql, params)
        return int(cursor.lastrowid)


@cache
def _delivered(vendor: str) -> str:
    del vendor
    q = connection.ops.quote_name
    meta = ContextBuild._meta
    through = q(meta.get_field("guidance_through").column)
    return (
        f"UPDATE {q(meta.db_table)} SET {q(meta.get_field('guidance_delivered').column)} = %s "
        f"WHERE {q(meta.pk.column)} = %s AND {through} IS NOT NULL"
    )


def build_guidance_mark(*, build_id: int) -> None:
    """Mark the guidance a build carried as delivered (none carried: nothing changes)."""
    statement_count(_delivered(connection.vendor), [True, build_id], prepare=True)
