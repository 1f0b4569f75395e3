"""Query plans, for the tests that check which index a statement reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction


def query_plan(sql: str, params: Sequence[Any], *, sequential_scans: bool = False) -> str:
    """The plan of ``sql``: SQLite's ``EXPLAIN QUERY PLAN``, PostgreSQL's ``EXPLAIN``, there with
    sequential scans ruled out unless ``sequential_scans`` (then it plans on the table's
    statistics), one line per step."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            if not sequential_scans:
                cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())
