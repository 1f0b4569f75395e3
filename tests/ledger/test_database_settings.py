from __future__ import annotations

from collections.abc import Callable

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


def test_postgres_connections_come_from_djangos_psycopg_pool() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL run only")

    connection.ensure_connection()
    assert connection.settings_dict["OPTIONS"]["pool"]["max_size"] >= 4
    assert connection.pool is not None
    assert connection.pool.get_stats()["pool_size"] >= 1


def test_a_publish_is_three_statements_whatever_the_ledger_holds(cluster: str) -> None:
    from django.test.utils import CaptureQueriesContext

    from ledger.services import MessageDraft, message_publish, message_publish_batch

    def statements(publish: Callable[[], object]) -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            publish()
        # The test's own transaction turns the publish's into a savepoint: not the publish's.
        # An executemany is logged as "N times: INSERT ...".
        return [
            q["sql"].split(" times: ")[-1].split()[0]
            for q in captured.captured_queries
            if "SAVEPOINT" not in q["sql"]
        ]

    message_publish_batch(
        cluster_id=cluster, drafts=[MessageDraft(topic="T", sender="s") for _ in range(200)]
    )
    # lock and read the cluster's row, insert, move the row
    one = MessageDraft(topic="T", sender="s")
    assert statements(lambda: message_publish(cluster_id=cluster, draft=one)) == [
        "SELECT",
        "INSERT",
        "UPDATE",
    ]
    hundred = [MessageDraft(topic="T", sender="s") for _ in range(100)]
    assert statements(lambda: message_publish_batch(cluster_id=cluster, drafts=hundred)) == [
        "SELECT",
        "INSERT",  # one executemany
        "UPDATE",
    ]


def _prepared(pattern: str) -> int:
    """How many statements like ``pattern`` this connection holds prepared on PostgreSQL."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", [pattern]
        )
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_postgres_prepares_the_prebuilt_statements_a_connection_repeats() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL run only")
    from ledger.interfaces import cluster_create
    from ledger.models import Cluster
    from ledger.statements import cluster_row
    from runs import statements

    cluster_create(cluster_id="c1", config={"agents": []}, state="running")
    # given a connection that runs each of these several times, with other values
    for n in range(7):
        cluster_row(cluster_id=f"c{n}")
        Cluster.objects.filter(pk=f"c{n}", state="running").exists()
        statements.claimable_first(now=n, cluster_id=f"c{n}", agents=(), roles=(), providers=())
    # then the prebuilt statement is prepared: parsed and planned once, its values bound there
    assert _prepared('%FROM "ledger_cluster" c WHERE%') == 1
    # and neither the ORM's query nor the claim's, whose plan depends on its values
    assert _prepared('%"ledger_cluster"."state"%') == 0
    assert _prepared("%NOT EXISTS%SKIP LOCKED%") == 0


@pytest.mark.parametrize(
    ("value", "on"), [(None, True), ("on", True), ("1", True), ("off", False), ("0", False)]
)
def test_prepared_statements_can_be_turned_off(
    monkeypatch: pytest.MonkeyPatch, value: str | None, on: bool
) -> None:
    from zeroshot_web import settings

    monkeypatch.setenv("DATABASE_URL", "postgres://u@db:5432/ledger")
    if value is None:
        monkeypatch.delenv("DATABASE_PREPARED_STATEMENTS", raising=False)
    else:
        monkeypatch.setenv("DATABASE_PREPARED_STATEMENTS", value)
    threshold = settings._database()["OPTIONS"]["prepare_threshold"]
    # on: psycopg prepares what a statement asks it to (``prepare=True``), nothing for being
    # repeated; off: nothing
    assert threshold == (settings.PREPARE_ONLY_WHEN_ASKED if on else None)
