from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_sqlite_runs_in_wal_mode_with_immediate_transactions() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite settings only")

    with connection.cursor() as cursor:
        journal = cursor.execute("PRAGMA journal_mode").fetchone()[0]
        synchronous = cursor.execute("PRAGMA synchronous").fetchone()[0]
        busy_timeout = cursor.execute("PRAGMA busy_timeout").fetchone()[0]

    assert journal == "wal"
    assert synchronous == 1  # NORMAL
    assert busy_timeout >= 5000
    assert connection.settings_dict["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


def test_postgres_is_used_when_database_url_says_so() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL run only")

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        assert cursor.fetchone()[0]
