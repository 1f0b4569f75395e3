"""Fixtures shared by every test module: small helpers, no shared data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection
from django.test import Client, override_settings

from ledger.bus import bus
from ledger.keys import api_key_create
from ledger.push import pusher
from ledger.services import cluster_create


@pytest.fixture(autouse=True, scope="session")
def _pipeline_inline() -> Iterator[None]:
    """The pipeline runs in the committing thread: a test sees its reactions when publish
    returns. Tests of the pipeline's worker thread switch it back."""
    with override_settings(PIPELINE_MODE="inline"):
        yield


@pytest.fixture(autouse=True, scope="session")
def _postgres_flush_by_delete() -> Iterator[None]:
    """On PostgreSQL, a transactional test's tables are emptied with DELETE, not TRUNCATE.

    Django empties every table after each ``transaction=True`` test with one TRUNCATE of all of
    them, which gives each table, index and TOAST table new files: about 0.1 s a test on an
    idle machine, whatever the tables held. DELETE of the few rows a test wrote leaves the same
    empty tables. Foreign keys are deferred to the commit, as Django creates them, so the order
    does not matter; a flush that asks for more (restarting sequences) keeps Django's TRUNCATE.
    """
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def delete(
        self: DatabaseOperations,
        style: Any,
        tables: Any,
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or allow_cascade:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return [f"DELETE FROM {self.quote_name(table)}" for table in tables]

    DatabaseOperations.sql_flush = delete  # type: ignore[method-assign]
    try:
        yield
    finally:
        DatabaseOperations.sql_flush = truncate  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's test databases, and on PostgreSQL no session of this process left on
    them when they are dropped.

    A thread of the process (an executor's, a push's) may still hold a connection it borrowed
    from the pool: the pool's closing leaves a borrowed one open, and ``DROP DATABASE`` then
    fails ("being accessed by other users"), leaving the database behind for the next run.
    """
    yield
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture(autouse=True)
def _no_leftover_subscribers() -> Iterator[None]:
    """Subscriptions made by one test never leak into the next, nor do its live pushes still
    on their way (they are sent after the publisher returns)."""
    before = list(bus._subscriptions)
    yield
    bus._subscriptions = before
    pusher.flush(10)


@pytest.fixture(autouse=True)
def _leases_looked_at_anew() -> None:
    """Each test's first claim looks for lapsed leases: what this process saw of the leases
    at its last look was in another test's database."""
    from runs.services.tasks import lease_look

    lease_look.now()


@pytest.fixture(autouse=True)
def _no_leftover_pipeline() -> Iterator[None]:
    """A test that runs the pipeline in its worker threads stops them before it ends: a scheduler
    left running would read the database during the next tests (whose database may be gone)."""
    from ledger.pipeline import pipeline

    yield
    if pipeline.backlog().workers:
        pipeline.stop()
        pytest.fail("the test left the pipeline's scheduler running")


class ApiClient:
    """Django's test client with a bearer key and JSON bodies."""

    def __init__(self, key: str) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {key}"}

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(path, params, headers=self.headers)

    def post(self, path: str, body: Any = None, *, raw: str | None = None) -> Any:
        import json

        data = raw if raw is not None else json.dumps(body)
        return self.client.post(
            path, data=data, content_type="application/json", headers=self.headers
        )


@pytest.fixture
def api_key(db: None) -> str:
    _, plain = api_key_create(name="test-agent")
    return plain


@pytest.fixture
def api(api_key: str) -> ApiClient:
    return ApiClient(api_key)


@pytest.fixture
def cluster(db: None) -> str:
    return cluster_create(cluster_id="test-cluster").id


def subprocess_database_url() -> str:
    """The URL of the database pytest-django created, for a server or a script in a subprocess."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return "sqlite:///" + str(Path(db["NAME"]).resolve())
    if db["ENGINE"] == "django.db.backends.postgresql":
        auth = quote(db.get("USER") or "")
        if db.get("PASSWORD"):
            auth += ":" + quote(db["PASSWORD"])
        host = db.get("HOST") or "127.0.0.1"
        port = db.get("PORT") or 5432
        return f"postgres://{auth}@{host}:{port}/{db['NAME']}"
    raise pytest.UsageError(f"no subprocess can reach a {db['ENGINE']} database")
