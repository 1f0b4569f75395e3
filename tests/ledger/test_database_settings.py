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


def test_postgres_prepares_a_statement_its_connection_repeats() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL run only")
    from ledger.models import Cluster

    # given a connection that runs the same query, with other values, more than five times
    for n in range(7):
        Cluster.objects.filter(pk=f"c{n}").exists()
    # then PostgreSQL holds it prepared: parsed and planned once, its values bound there
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ['%FROM "ledger_cluster"%'],
        )
        assert cursor.fetchone()[0] == 1


@pytest.mark.parametrize(
    ("value", "threshold"), [("", 5), ("0", 0), ("12", 12), ("off", None), (" OFF ", None)]
)
def test_the_prepare_threshold_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, threshold: int | None
) -> None:
    from zeroshot_web import settings

    monkeypatch.setenv("DATABASE_URL", "postgres://u@db:5432/ledger")
    monkeypatch.setenv("DATABASE_PREPARE_THRESHOLD", value)
    options = settings._database()["OPTIONS"]
    assert options["server_side_binding"] is True
    assert options["prepare_threshold"] == threshold


def test_a_prepare_threshold_that_is_not_a_number_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from zeroshot_web import settings

    monkeypatch.setenv("DATABASE_URL", "postgres://u@db:5432/ledger")
    monkeypatch.setenv("DATABASE_PREPARE_THRESHOLD", "often")
    with pytest.raises(ImproperlyConfigured, match="DATABASE_PREPARE_THRESHOLD"):
        settings._database()
