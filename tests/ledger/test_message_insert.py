"""Many message rows to one INSERT on SQLite: the same rows, in order, searchable
(docs/decisions/0240). PostgreSQL keeps one-row statements in the driver's pipeline."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from ledger.filters import MessageFilter
from ledger.models import Message
from ledger.selectors import message_query
from ledger.services import (
    ImportedMessage,
    MessageDraft,
    message_import_batch,
    message_publish_batch,
)
from ledger.statements import ROWS_PER_INSERT

pytestmark = pytest.mark.django_db


def inserts(captured: CaptureQueriesContext) -> list[int]:
    """The rows of each INSERT into the messages' table captured, in order; an
    ``executemany`` (logged as "N times: INSERT …") counts as N statements of one row."""
    rows = []
    for query in captured.captured_queries:
        sql = query["sql"]
        if "INSERT INTO" not in sql or '"ledger_message"' not in sql.split("(")[0]:
            continue
        times, _, statement = sql.rpartition(" times: ")
        values = statement.split(" VALUES ", 1)[1]
        rows += [values.count("), (") + 1] * (int(times) if times else 1)
    return rows


def drafts(count: int) -> list[MessageDraft]:
    return [
        MessageDraft(topic="T", sender="s", content={"text": f"stored word{n}"})
        for n in range(count)
    ]


def statements_of(*rows: int) -> list[int]:
    """The INSERTs expected for statements of ``rows`` on SQLite; one a row elsewhere."""
    return list(rows) if connection.vendor == "sqlite" else [1] * sum(rows)


def found(cluster_id: str, q: str) -> list[int]:
    where = MessageFilter(q=q)
    return [m.sequence for m in message_query(cluster_id=cluster_id, where=where, order="desc")]


def stored(cluster_id: str) -> list[tuple[int, str, object]]:
    return list(
        Message.objects.filter(cluster_id=cluster_id)
        .order_by("sequence")
        .values_list("sequence", "message_id", "content")
    )


def test_a_batch_of_100_is_one_insert_of_100_rows(cluster: str) -> None:
    # when a batch of 100 is published (no pipeline run after it in this thread)
    with override_settings(PIPELINE_MODE="off"), CaptureQueriesContext(connection) as captured:
        records = message_publish_batch(cluster_id=cluster, drafts=drafts(100))
    # then its rows went in as one statement, not one statement a row (SQLite)
    assert inserts(captured) == statements_of(100)
    assert [(r.sequence, r.id, r.content) for r in records] == stored(cluster)


def test_a_batch_larger_than_a_statement_is_stored_whole_in_order(cluster: str) -> None:
    count = 2 * ROWS_PER_INSERT + 88
    # when a batch takes more rows than one INSERT does
    with override_settings(PIPELINE_MODE="off"), CaptureQueriesContext(connection) as captured:
        records = message_publish_batch(cluster_id=cluster, drafts=drafts(count))
    # then it is split into full statements and the rest, and every message is stored in order
    assert inserts(captured) == statements_of(ROWS_PER_INSERT, ROWS_PER_INSERT, 88)
    assert [(r.sequence, r.id, r.content) for r in records] == stored(cluster)
    assert [s for s, _, _ in stored(cluster)] == list(range(1, count + 1))
    # and every message is in the search index, on either side of each statement's edge
    for n in (0, ROWS_PER_INSERT - 1, ROWS_PER_INSERT, 2 * ROWS_PER_INSERT, count - 1):
        assert found(cluster, f"word{n}") == [n + 1]
    assert len(found(cluster, "stored")) == min(count, 100)  # one page


@pytest.fixture
def sqlite_999_parameters() -> Iterator[None]:
    """SQLite built with the 999 bound parameters of its versions before 3.32."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's own limit")
    connection.ensure_connection()
    driver = connection.connection
    before = driver.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    try:
        yield
    finally:
        driver.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, before)


@pytest.mark.usefixtures("sqlite_999_parameters")
def test_a_statement_takes_no_more_rows_than_sqlite_binds_parameters(cluster: str) -> None:
    # when 100 messages are published where a statement binds at most 999 parameters
    with override_settings(PIPELINE_MODE="off"), CaptureQueriesContext(connection) as captured:
        message_publish_batch(cluster_id=cluster, drafts=drafts(100))
    # then each INSERT holds as many rows of 14 values as fit, and all are stored
    assert inserts(captured) == [71, 29]
    assert [s for s, _, _ in stored(cluster)] == list(range(1, 101))


def test_an_import_is_stored_in_statements_of_many_rows(cluster: str) -> None:
    count = ROWS_PER_INSERT + 44
    messages = [
        ImportedMessage(
            id=f"zs-{n}",
            timestamp=1_700_000_000_000 + n,
            topic="T",
            sender="s",
            receiver="broadcast",
            content={"text": f"imported word{n}"},
            metadata={"n": n},
        )
        for n in range(count)
    ]
    # when a zeroshot ledger's messages are imported
    with override_settings(PIPELINE_MODE="off"), CaptureQueriesContext(connection) as captured:
        message_import_batch(cluster_id=cluster, messages=messages)
    # then in two statements, each message with its id, stamp, content and metadata, in order
    assert inserts(captured) == statements_of(ROWS_PER_INSERT, 44)
    rows = list(
        Message.objects.filter(cluster_id=cluster)
        .order_by("sequence")
        .values_list("message_id", "timestamp", "content", "metadata", "imported")
    )
    assert rows == [(m.id, m.timestamp, m.content, m.metadata, True) for m in messages]
    assert found(cluster, f"word{ROWS_PER_INSERT}") == [ROWS_PER_INSERT + 1]


def varied_drafts() -> list[MessageDraft]:
    """Drafts whose values a ``COPY`` must escape: tabs, newlines, backslashes, quotes,
    non-ASCII text, nested data, metadata, another receiver, no text at all."""
    texts = ["tab\there", "line\nbreak\r\n", "back\\slash \\N", "quote ' \" `", "ünïcødé ✓ 漢字"]
    made = [
        MessageDraft(
            topic="T",
            sender="s",
            receiver="r\tx" if n % 2 else "broadcast",
            content={"text": text, "data": {"n": n, "nested": [{"k": text}, None, 1.5, True]}},
            metadata={"replayPolicy": "context", "note": text} if n % 2 else None,
        )
        for n, text in enumerate(texts)
    ]
    return [*made, MessageDraft(topic="WORKER_PROGRESS", sender="s", content={"data": {"e": 1}})]


def columns_of(cluster_id: str) -> list[tuple[object, ...]]:
    return list(
        Message.objects.filter(cluster_id=cluster_id)
        .order_by("sequence")
        .values_list(
            "sequence",
            "topic",
            "sender",
            "receiver",
            "content",
            "metadata",
            "replayable",
            "event",
            "idempotency_key",
            "body_hash",
            "imported",
        )
    )


def test_postgres_copies_the_rows_it_would_have_inserted(
    cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's COPY")
    import psycopg

    from ledger.services import cluster_create

    other = cluster_create(cluster_id="copied").id
    # given the same drafts stored as Django sees statements (an INSERT a row) ...
    with override_settings(PIPELINE_MODE="off"), CaptureQueriesContext(connection):
        message_publish_batch(cluster_id=cluster, drafts=varied_drafts())

    # ... and on the driver's own cursor, where one-row statements are refused
    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("executemany")

    monkeypatch.setattr(psycopg.Cursor, "executemany", refused)
    with override_settings(PIPELINE_MODE="off"):
        message_publish_batch(cluster_id=other, drafts=varied_drafts())
    # then the rows are the same, value for value
    assert columns_of(other) == columns_of(cluster)
    assert len(columns_of(other)) == len(varied_drafts())
    assert found(other, "ünïcødé") == found(cluster, "ünïcødé") == [5]
    assert found(other, "break") == found(cluster, "break") == [2]
