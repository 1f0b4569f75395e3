"""Full-text search over messages' text (SPEC §1.3 ``q``), on SQLite and PostgreSQL alike."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from ledger.errors import InvalidInput
from ledger.filters import MessageFilter, search_terms
from ledger.records import MATCH_END, MATCH_START, MessageRecord, SearchHit
from ledger.search import FTS_TABLE, search_index_ensure
from ledger.selectors import message_query, message_search, message_tail_topics
from ledger.services import (
    ImportedMessage,
    MessageDraft,
    cluster_create,
    message_import_batch,
    message_publish,
    message_publish_batch,
)
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

TEXTS = [
    ("ISSUE_OPENED", "system", "Export invoices as CSV from the list view"),
    ("PLAN_READY", "planner", "Plan: stream rows through a CSV writer; reuse the list filters"),
    ("WORKER_PROGRESS", "worker", "The exporter streams rows now"),
    ("WORKER_PROGRESS", "worker", "Amounts are formatted; dates next"),
    ("VALIDATION_RESULT", "validator", "Rejected: exported dates are not ISO 8601"),
    ("WORKER_PROGRESS", "worker", None),
]


@pytest.fixture
def texts(cluster: str) -> str:
    drafts = [
        MessageDraft(
            topic=topic, sender=sender, content={"text": text} if text else {"data": {"n": 1}}
        )
        for topic, sender, text in TEXTS
    ]
    message_publish_batch(cluster_id=cluster, drafts=drafts)
    return cluster


def found(cluster_id: str, q: str, **filters: Any) -> list[int]:
    where = MessageFilter(q=q, **filters)
    return [m.sequence for m in message_query(cluster_id=cluster_id, where=where, order="desc")]


def test_search_terms_are_the_words_of_the_query() -> None:
    assert search_terms("Fix the CSV-export, the_end!") == ("fix", "the", "csv", "export", "end")
    assert search_terms("  ¿Qué?  ") == ("qué",)
    assert search_terms("-- !! --") == ()
    assert len(search_terms(" ".join(f"w{i}" for i in range(40)))) == 16


def test_a_word_matches_by_stem_and_by_prefix(texts: str) -> None:
    # "export" is the stem of exported / exporter and a prefix of both
    assert found(texts, "export") == [5, 3, 1]
    assert found(texts, "exporting") == [5, 3, 1]
    assert found(texts, "expo") == [5, 3, 1]
    assert found(texts, "stream") == [3, 2]
    assert found(texts, "CSV") == [2, 1]


def test_every_word_must_match(texts: str) -> None:
    assert found(texts, "csv rows") == [2]
    assert found(texts, "export dates") == [5]
    assert found(texts, "export nothing-like-this") == []


def test_search_combines_with_the_other_filters(texts: str) -> None:
    assert found(texts, "rows", topic="WORKER_PROGRESS") == [3]
    assert found(texts, "export", sender="system") == [1]
    assert found(texts, "export", after=1) == [5, 3]
    ascending = message_query(cluster_id=texts, where=MessageFilter(q="export"), order="asc")
    assert [m.sequence for m in ascending] == [1, 3, 5]
    assert [
        m.sequence
        for m in message_tail_topics(cluster_id=texts, topics=["WORKER_PROGRESS"], after=0)
    ] == [3, 4, 6]


def test_a_query_without_words_is_no_search(texts: str) -> None:
    assert len(found(texts, "-- !! --")) == len(TEXTS)


def test_search_is_per_cluster(texts: str) -> None:
    other = cluster_create(cluster_id="other-run").id
    message_publish(
        cluster_id=other, draft=MessageDraft(topic="T", sender="s", content={"text": "export"})
    )

    assert found(texts, "export") == [5, 3, 1]
    assert found(other, "export") == [1]


def test_imported_messages_are_searchable_too(cluster: str) -> None:
    message_import_batch(
        cluster_id=cluster,
        messages=[
            ImportedMessage(
                id=f"msg_{i:032x}",
                timestamp=1_767_000_000_000 + i,
                topic="AGENT_OUTPUT",
                sender="worker",
                receiver="broadcast",
                content={"text": text},
                metadata=None,
            )
            for i, text in enumerate(["a timeout in the exporter", "all green"])
        ],
    )

    assert found(cluster, "timeouts") == [1]


def test_search_pages_carry_marked_snippets_newest_first(texts: str) -> None:
    hits, more = message_search(cluster_id=texts, where=MessageFilter(q="export"), limit=2)

    assert [h.message.sequence for h in hits] == [5, 3]
    assert more is True
    assert (MATCH_START + "exported" + MATCH_END) in hits[0].snippet
    assert ("exported", True) in hits[0].parts
    assert "".join(text for text, _ in hits[0].parts) in TEXTS[4][2]

    older, more = message_search(cluster_id=texts, where=MessageFilter(q="export"), before=3)
    assert [h.message.sequence for h in older] == [1]
    assert more is False
    newer, more = message_search(cluster_id=texts, where=MessageFilter(q="export"), after=1)
    assert [h.message.sequence for h in newer] == [5, 3]
    with pytest.raises(InvalidInput):
        message_search(cluster_id=texts, where=MessageFilter(q="!!"))


def test_snippet_parts_split_marks_and_keep_all_text() -> None:
    message = MessageRecord(id="m", cluster_id="c", sequence=1, timestamp=1, topic="T", sender="s")
    hit = SearchHit(message=message, snippet=f"a {MATCH_START}b{MATCH_END} c {MATCH_START}d")

    assert hit.parts == [("a ", False), ("b", True), (" c ", False), ("d", True)]
    assert SearchHit(message=message).parts == []


def test_the_api_takes_q_and_pages_with_next_after(api: ApiClient, texts: str) -> None:
    url = f"/api/v1/clusters/{texts}/messages"

    first = api.get(url, q="export", limit=2).json()
    second = api.get(url, q="export", limit=2, after=first["next_after"]).json()
    newest = api.get(url, q="export rows", order="desc").json()

    assert [m["sequence"] for m in first["items"]] == ["1", "3"]
    assert [m["sequence"] for m in second["items"]] == ["5"]
    assert [m["sequence"] for m in newest["items"]] == ["3"]
    assert [m["sequence"] for m in api.get(url, q="streams rows").json()["items"]] == ["2", "3"]
    assert api.get(url, q="x" * 501).status_code == 422


def test_api_search_query_count_is_pinned(
    api: ApiClient,
    texts: str,
    django_assert_num_queries: Any,
) -> None:
    message_publish_batch(
        cluster_id=texts,
        drafts=[
            MessageDraft(topic="T", sender="s", content={"text": f"row {i}"}) for i in range(300)
        ],
    )

    # the index catches up on the first search (SQLite)
    api.get(f"/api/v1/clusters/{texts}/messages", q="row", limit=1)

    # key lookup + cluster exists + the search, and on SQLite whether the index is behind
    with django_assert_num_queries(4 if connection.vendor == "sqlite" else 3):
        items = api.get(f"/api/v1/clusters/{texts}/messages", q="row", limit=1000).json()["items"]
    assert len(items) == 300 + 2  # "rows" in two of the fixture's texts


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_sqlite_index_follows_deletes_and_stays_consistent(texts: str) -> None:
    from ledger.models import Cluster

    Cluster.objects.filter(pk=texts).delete()

    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('integrity-check')")
        cursor.execute(f"SELECT count(*) FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH 'export'")
        assert cursor.fetchone()[0] == 0


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_sqlite_triggers_dropped_by_a_table_rebuild_are_put_back(cluster: str) -> None:
    for text in ("orphan", "kept"):
        message_publish(
            cluster_id=cluster, draft=MessageDraft(topic="T", sender="s", content={"text": text})
        )
    assert found(cluster, "orphan") == [1]
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER {FTS_TABLE}_delete")
        # Deleted while the trigger was missing: the index still holds its words.
        cursor.execute("DELETE FROM ledger_message WHERE sequence = 1")
        cursor.execute(f"SELECT count(*) FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH 'orphan'")
        assert cursor.fetchone()[0] == 1

    assert search_index_ensure() is True

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH 'orphan'")
        assert cursor.fetchone()[0] == 0
        cursor.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('integrity-check')")
    assert found(cluster, "kept") == [2]
    assert search_index_ensure() is False


def index_rows(word: str) -> int:
    """Rows of the SQLite index holding ``word``, whatever the messages hold now."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s", [word])
        return int(cursor.fetchone()[0])


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_sqlite_publishes_leave_the_index_to_a_catch_up_that_indexes_them_at_once(
    cluster: str,
) -> None:
    from ledger.search import search_index_catch_up

    for n in range(5):
        message_publish(
            cluster_id=cluster,
            draft=MessageDraft(topic="T", sender="s", content={"text": f"heron {n}"}),
        )
    # A publish writes no index row: that is the catch-up's work, for all of them at once.
    assert index_rows("heron") == 0
    assert search_index_catch_up(rows=2) == 5
    assert index_rows("heron") == 5
    assert search_index_catch_up() == 0
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('integrity-check')")


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_sqlite_search_finds_what_was_stored_before_it_and_deletes_keep_the_index_whole(
    cluster: str,
) -> None:
    message_publish(
        cluster_id=cluster, draft=MessageDraft(topic="T", sender="s", content={"text": "egret"})
    )
    assert found(cluster, "egret") == [1]  # indexed by the search itself
    message_publish_batch(
        cluster_id=cluster,
        drafts=[MessageDraft(topic="T", sender="s", content={"text": "egrets"})] * 3,
    )
    # Deleted before the index held them: nothing to forget, and the index stays consistent.
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM ledger_message WHERE sequence IN (2, 3)")
    assert found(cluster, "egret") == [4, 1]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM ledger_message WHERE sequence = 1")
        cursor.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('integrity-check')")
    assert index_rows("egret") == 1
    assert found(cluster, "egret") == [4]


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_postgres_search_can_use_the_gin_index(texts: str) -> None:
    """The query's expression is the index's: with scans of the table ruled out, it is used."""
    from ledger.models import Message
    from ledger.search import search_narrow

    messages = search_narrow(
        Message.objects.all(), terms=("export",), cluster_id=texts, newest_first=True
    )
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        sql, params = messages.query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap Index Scan on msg_text_search" in plan


@pytest.mark.skipif("connection.vendor != 'sqlite'")
@pytest.mark.django_db(transaction=True)
def test_sqlite_migration_0009_starts_the_catch_up_after_what_the_trigger_indexed() -> None:
    from django.db.migrations.executor import MigrationExecutor

    def migrate(target: str) -> None:
        executor = MigrationExecutor(connection)
        executor.migrate([("ledger", target)])

    def triggers() -> set[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            return {name for (name,) in cursor.fetchall()}

    cluster_create(cluster_id="m")
    try:
        # given a ledger from before: every message indexed by the insert trigger
        migrate("0008_cluster_config_versions")
        assert f"{FTS_TABLE}_insert" in triggers()
        for text in ("plover", "plovers"):
            message_publish(
                cluster_id="m", draft=MessageDraft(topic="T", sender="s", content={"text": text})
            )
        assert index_rows("plover") == 2
        # when it migrates, then the index goes on from there: nothing indexed twice
        migrate("0009_message_search_follows_in_batches")
        assert f"{FTS_TABLE}_insert" not in triggers()
        message_publish(
            cluster_id="m", draft=MessageDraft(topic="T", sender="s", content={"text": "plover"})
        )
        assert index_rows("plover") == 2
        assert found("m", "plover") == [3, 2, 1]
        assert index_rows("plover") == 3
        # and back: what was left to index is indexed, and the trigger indexes again
        message_publish(
            cluster_id="m", draft=MessageDraft(topic="T", sender="s", content={"text": "plover"})
        )
        migrate("0008_cluster_config_versions")
        assert index_rows("plover") == 4
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('integrity-check')")
    finally:
        migrate("0009_message_search_follows_in_batches")
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('integrity-check')")
