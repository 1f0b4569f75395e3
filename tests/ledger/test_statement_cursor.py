"""Prebuilt statements on the driver's cursor (``statement_rows``/``statement_count``): the
same rows and errors as through Django's cursor, inside the caller's transaction, and seen by
Django whenever it is asked to see every statement."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from ledger.interfaces import cluster_create, statement_count, statement_rows
from ledger.models import Cluster

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = connection.ops.quote_name(Cluster._meta.db_table)
ID, STATE = (connection.ops.quote_name(c) for c in ("id", "state"))
SELECT = f"SELECT {ID}, {STATE} FROM {TABLE} WHERE {ID} = %s"
UPDATE = f"UPDATE {TABLE} SET {STATE} = %s WHERE {ID} = %s"


@contextmanager
def no_django_cursor() -> Iterator[None]:
    """Django's cursor refuses meanwhile: a statement that used it would fail."""
    connection.ensure_connection()

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Django's cursor was used")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(connection, "cursor", refused)
        yield


def test_a_statement_runs_on_the_drivers_cursor_with_djangos_results() -> None:
    cluster_create(cluster_id="c1", config={"agents": []}, state="running")
    with no_django_cursor():
        assert statement_rows(SELECT, ["c1"]) == [("c1", "running")]
        assert statement_rows(SELECT, ["nope"]) == []
        assert statement_count(UPDATE, ["stopped", "c1"]) == 1
        assert statement_count(UPDATE, ["stopped", "nope"]) == 0
    assert Cluster.objects.get(pk="c1").state == "stopped"


def test_a_statement_takes_part_in_the_callers_transaction() -> None:
    cluster_create(cluster_id="c1", config={"agents": []}, state="running")
    seen: list[list[tuple[Any, ...]]] = []
    with contextlib.suppress(RuntimeError), transaction.atomic():
        with no_django_cursor():
            statement_count(UPDATE, ["stopped", "c1"])
            seen.append(statement_rows(SELECT, ["c1"]))
        raise RuntimeError
    assert seen == [[("c1", "stopped")]]
    assert statement_rows(SELECT, ["c1"]) == [("c1", "running")]


def test_a_drivers_error_is_djangos() -> None:
    cluster_create(cluster_id="c1", config={"agents": []}, state="running")
    cluster_create(cluster_id="c2", config={"agents": []}, state="running")
    connection.ensure_connection()
    with pytest.raises(IntegrityError), transaction.atomic():
        statement_count(f"UPDATE {TABLE} SET {ID} = %s WHERE {ID} = %s", ["c2", "c1"])


def test_django_sees_every_statement_when_asked() -> None:
    cluster_create(cluster_id="c1", config={"agents": []}, state="running")
    with CaptureQueriesContext(connection) as seen:
        statement_rows(SELECT, ["c1"])
        statement_count(UPDATE, ["stopped", "c1"])
    assert [q["sql"].split()[0] for q in seen.captured_queries] == ["SELECT", "UPDATE"]
    wrapped: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        wrapped.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        statement_rows(SELECT, ["c1"])
    assert len(wrapped) == 1
    with override_settings(DEBUG=True):
        connection.queries_log.clear()
        statement_rows(SELECT, ["c1"])
        assert len(connection.queries_log) == 1


@pytest.mark.skipif(connection.vendor != "postgresql", reason="kept on PostgreSQL only")
def test_postgresql_keeps_the_drivers_cursor_of_a_connection() -> None:
    # given a cluster, and a count of the driver's cursors made from now on
    cluster_create(cluster_id="c1", config={"agents": []}, state="running")
    connection.ensure_connection()
    kind = type(connection.connection)
    made: list[object] = []
    real = kind.cursor

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(self)
        return real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kind, "cursor", counted)
        # when statements run one after the other on one connection
        for state in ("stopped", "running", "stopped"):
            statement_count(UPDATE, [state, "c1"])
            assert statement_rows(SELECT, ["c1"]) == [("c1", state)]
        # then at most one cursor was made for all of them
        assert len(made) <= 1
        # and after the connection is closed, the next one serves the statements
        connection.close()
        assert statement_rows(SELECT, ["c1"]) == [("c1", "stopped")]
        assert statement_count(UPDATE, ["running", "c1"]) == 1
    assert Cluster.objects.get(pk="c1").state == "running"
