"""The prebuilt statements behind a context build's reads: the ORM's answers, index seeks."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.errors import NotFound
from ledger.filters import MessageFilter
from ledger.selectors import (
    cluster_get,
    cluster_list,
    lifecycle_event_latest,
    message_get,
    message_get_with_each,
    message_latest,
    message_query,
    message_select,
    message_select_each,
)
from ledger.services import ImportedMessage, message_import_batch

pytestmark = pytest.mark.django_db

T0 = 1_770_000_000_000
TOPICS = ("PLAN_READY", "AGENT_OUTPUT", "VALIDATION_RESULT", "AGENT_LIFECYCLE")
SENDERS = ("planner", "worker", "validator")


def imported(index: int, **fields: Any) -> ImportedMessage:
    values: dict[str, Any] = {
        "id": f"m{index}",
        # Pairs of messages share a millisecond: the sequence breaks the tie.
        "timestamp": T0 + index // 2,
        "topic": TOPICS[index % len(TOPICS)],
        "sender": SENDERS[index % len(SENDERS)],
        "receiver": "validator" if index % 5 == 0 else "broadcast",
        "content": {"text": f"n{index}", "data": {"i": index}} if index % 3 else {},
        "metadata": (None, {"contextSafe": index % 2 == 0}, [1, "two"], "plain")[index % 4],
    }
    values.update(fields)
    return ImportedMessage(**values)


@pytest.fixture
def filled(cluster: str) -> str:
    """Forty messages over four topics, three senders, ties in time, odd content and metadata,
    some kept out of contexts (AGENT_OUTPUT; ``contextSafe: false``)."""
    message_import_batch(cluster_id=cluster, messages=[imported(i) for i in range(40)])
    message_import_batch(
        cluster_id=cluster,
        messages=[
            imported(
                40 + i,
                topic="AGENT_LIFECYCLE",
                sender="worker",
                content={"data": {"event": event}},
                metadata=None,
            )
            for i, event in enumerate(("TASK_COMPLETED", "STARTED", "TASK_COMPLETED", "STARTED"))
        ],
    )
    return cluster


FILTERS = [
    MessageFilter(),
    MessageFilter(topic="PLAN_READY"),
    MessageFilter(topic="AGENT_OUTPUT", replayable_only=True),
    MessageFilter(topic="VALIDATION_RESULT", replayable_only=True, since=T0 + 5),
    MessageFilter(topic="PLAN_READY", sender="planner", replayable_only=True),
    MessageFilter(topic="AGENT_LIFECYCLE", sender="worker", until=T0 + 21),
    MessageFilter(sender="validator", receiver="validator"),
    MessageFilter(replayable_only=True, until=T0 + 12, up_to_sequence=20),
    MessageFilter(after=10, up_to_sequence=30, since=T0 + 3),
    MessageFilter(topic="NOTHING_HERE"),
]


@pytest.mark.parametrize("where", FILTERS)
@pytest.mark.parametrize(
    ("newest_first", "limit"), [(True, 1), (True, 4), (False, 3), (False, None)]
)
def test_source_rows_are_the_orms(
    filled: str, where: MessageFilter, newest_first: bool, limit: int | None
) -> None:
    expected = message_query(
        cluster_id=filled, where=where, order="desc" if newest_first else "asc", limit=limit
    )

    rows = message_select(cluster_id=filled, where=where, newest_first=newest_first, limit=limit)

    assert rows == expected


@pytest.mark.parametrize("where", FILTERS)
def test_newest_of_topics_is_one_query_and_the_newest_of_each(
    filled: str, where: MessageFilter, django_assert_num_queries: Any
) -> None:
    topics = ["VALIDATION_RESULT", "PLAN_READY", "AGENT_LIFECYCLE", "PLAN_READY"]
    each = [
        message_query(cluster_id=filled, where=_with(where, topic=t), order="desc", limit=1)
        for t in topics
    ]
    candidates = [m for found in each for m in found]
    expected = max(candidates, key=lambda m: (m.timestamp, m.sequence)) if candidates else None

    with django_assert_num_queries(1):
        newest = message_latest(cluster_id=filled, topics=topics, where=where)

    assert newest == expected
    assert message_latest(cluster_id=filled, where=where) == next(
        iter(message_query(cluster_id=filled, where=where, order="desc", limit=1)), None
    )


@pytest.mark.parametrize("where", FILTERS)
def test_the_oldest_of_each_filter_are_one_query_and_each_filters_rows(
    filled: str, where: MessageFilter, django_assert_num_queries: Any
) -> None:
    # given the filter, and others beside it: a topic of its own, one with a receiver
    wheres = [
        where,
        _with(where, topic="AGENT_LIFECYCLE", receiver="validator"),
        MessageFilter(topic="PLAN_READY", after=4),
    ]
    expected = [m for w in wheres for m in message_select(cluster_id=filled, where=w, limit=3)]
    # when the oldest three of each are read together
    with django_assert_num_queries(1):
        found = message_select_each(cluster_id=filled, wheres=wheres, limit=3)
    # then they are each filter's rows, in one statement
    assert sorted(found, key=_place) == sorted(expected, key=_place)
    # and a filter the statements cannot express is read on its own, with the same rows
    searched = [*wheres, MessageFilter(topic=("PLAN_READY", "AGENT_OUTPUT"))]
    beside = message_query(cluster_id=filled, where=searched[-1], order="asc", limit=3)
    assert sorted(
        message_select_each(cluster_id=filled, wheres=searched, limit=3), key=_place
    ) == sorted([*expected, *beside], key=_place)


@pytest.mark.parametrize("where", FILTERS)
@pytest.mark.parametrize("message_id", ["m4", "m7", "nope"])
def test_a_message_and_the_oldest_of_each_filter_are_one_query(
    filled: str, where: MessageFilter, message_id: str, django_assert_num_queries: Any
) -> None:
    # given the filter and another (m4 passes some of them: it is read twice then)
    wheres = [where, _with(where, topic="AGENT_LIFECYCLE", receiver="validator")]
    expected = [m for w in wheres for m in message_select(cluster_id=filled, where=w, limit=3)]
    # when a message and the oldest three of each are read together
    if message_id == "nope":
        # then a message the cluster lacks is NotFound, as message_get says
        with django_assert_num_queries(1), pytest.raises(NotFound):
            message_get_with_each(cluster_id=filled, message_id=message_id, wheres=wheres, limit=3)
        return
    with django_assert_num_queries(1):
        message, found = message_get_with_each(
            cluster_id=filled, message_id=message_id, wheres=wheres, limit=3
        )
    # then they are message_get's message and each filter's rows, in one statement
    assert message == message_get(cluster_id=filled, message_id=message_id)
    assert sorted(found, key=_place) == sorted(expected, key=_place)
    # and with a filter the statements cannot express, the same answers
    searched = [*wheres, MessageFilter(topic=("PLAN_READY", "AGENT_OUTPUT"))]
    beside = message_query(cluster_id=filled, where=searched[-1], order="asc", limit=3)
    message, found = message_get_with_each(
        cluster_id=filled, message_id=message_id, wheres=searched, limit=3
    )
    assert message == message_get(cluster_id=filled, message_id=message_id)
    assert sorted(found, key=_place) == sorted([*expected, *beside], key=_place)


def _place(message: Any) -> tuple[int, str]:
    return message.sequence, message.topic


def _with(where: MessageFilter, **changes: Any) -> MessageFilter:
    from dataclasses import replace

    return replace(where, **changes)


def test_the_newest_task_end_of_an_agent(filled: str) -> None:
    newest = lifecycle_event_latest(cluster_id=filled, agent_id="worker", event="TASK_COMPLETED")
    before = lifecycle_event_latest(
        cluster_id=filled, agent_id="worker", event="TASK_COMPLETED", until=T0 + 20
    )

    assert newest is not None
    assert (newest.id, newest.data) == ("m42", {"event": "TASK_COMPLETED"})
    assert before is not None
    assert before.id == "m40"
    assert lifecycle_event_latest(cluster_id=filled, agent_id="worker", event="\x00") is None
    assert lifecycle_event_latest(cluster_id=filled, agent_id="planner", event="STARTED") is None


def test_a_cluster_reads_as_the_list_reads_it(filled: str, cluster: str) -> None:
    from ledger.services import cluster_create

    empty = cluster_create(cluster_id="empty", config={"agents": [{"id": "a"}]}, params={"p": 1})

    for cid in (filled, empty.id):
        assert cluster_get(cluster_id=cid) == cluster_list(only_id=cid)[0]
    assert cluster_get(cluster_id="empty").last_activity is None
    assert cluster_get(cluster_id=filled).last_activity == T0 + 21
    # a record read from the row carries the config's stored text, which reads as its config
    text = cluster_get(cluster_id="empty").config_text
    assert text is not None
    assert json.loads(text) == {"agents": [{"id": "a"}]}


def test_statements_are_index_seeks_on_sqlite(filled: str) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("reads SQLite's query plans")
    with CaptureQueriesContext(connection) as captured:
        cluster_get(cluster_id=filled)
        message_latest(
            cluster_id=filled,
            topics=["PLAN_READY", "VALIDATION_RESULT", "AGENT_LIFECYCLE"],
            where=MessageFilter(until=T0 + 30, up_to_sequence=40),
        )
        lifecycle_event_latest(cluster_id=filled, agent_id="worker", event="TASK_COMPLETED")
        for newest_first, sender in itertools.product((True, False), (None, "worker")):
            message_select(
                cluster_id=filled,
                where=MessageFilter(
                    topic="PLAN_READY", sender=sender, since=T0, replayable_only=True
                ),
                newest_first=newest_first,
                limit=3,
            )
        message_select_each(
            cluster_id=filled,
            wheres=[
                MessageFilter(topic="PLAN_READY", until=T0 + 30),
                MessageFilter(topic="AGENT_LIFECYCLE", receiver="worker"),
            ],
            limit=16,
        )

    plans = [_plan(q["sql"]) for q in captured.captured_queries]

    assert [_indexes(plan) for plan in plans] == [
        ["sqlite_autoindex_ledger_cluster_1", "msg_cluster_time"],
        ["msg_cluster_topic"] * 3,
        ["msg_lifecycle_event"],
        ["msg_context_topic"],
        ["msg_context_topic_sender"],
        ["msg_context_topic"],
        ["msg_context_topic_sender"],
        ["msg_cluster_topic"] * 2,
    ]
    for plan in plans:
        assert not [step for step in plan if "TEMP B-TREE" in step]
        # Only the few rows of the UNION's subqueries are scanned, never a table.
        assert all(
            step.startswith(("SCAN newest_", "SCAN oldest_"))
            for step in plan
            if step.startswith("SCAN")
        )


def _plan(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        return [str(row[-1]) for row in cursor.fetchall()]


def _indexes(plan: list[str]) -> list[str]:
    return [step.split(" INDEX ")[1].split(" ")[0] for step in plan if " INDEX " in step]


def test_a_message_by_id_is_the_orms(filled: str) -> None:
    from ledger.errors import NotFound
    from ledger.models import Message
    from ledger.selectors import message_get, message_record

    for message in Message.objects.filter(cluster_id=filled):
        with CaptureQueriesContext(connection) as queries:
            found = message_get(cluster_id=filled, message_id=message.message_id)
        assert found == message_record(message, cluster_id=filled)
        assert len(queries) == 1
    for cluster_id, message_id in ((filled, "nope"), ("nope", "m1"), (filled, "m\x001")):
        with pytest.raises(NotFound):
            message_get(cluster_id=cluster_id, message_id=message_id)


def test_a_message_by_sequence_is_the_orms(filled: str) -> None:
    from ledger.errors import NotFound
    from ledger.models import Message
    from ledger.selectors import message_at_sequence, message_record

    for message in Message.objects.filter(cluster_id=filled):
        with CaptureQueriesContext(connection) as queries:
            found = message_at_sequence(cluster_id=filled, sequence=message.sequence)
        assert found == message_record(message, cluster_id=filled)
        assert len(queries) == 1
    for cluster_id, sequence in ((filled, 0), (filled, 10_000), ("nope", 1), (filled, -1)):
        with pytest.raises(NotFound):
            message_at_sequence(cluster_id=cluster_id, sequence=sequence)
    with pytest.raises(NotFound), CaptureQueriesContext(connection) as queries:
        message_at_sequence(cluster_id=filled, sequence=2**63)
    assert len(queries) == 0


@pytest.mark.parametrize(
    ("topics", "after", "upto", "limit"),
    [
        (["PLAN_READY", "VALIDATION_RESULT"], 0, None, 500),
        (["PLAN_READY", "VALIDATION_RESULT", "PLAN_READY"], 7, 30, 500),
        (["AGENT_LIFECYCLE"], 10, None, 3),
        (["NOT_THERE"], 0, None, 10),
    ],
)
def test_the_tail_of_some_topics_is_the_orms_answer_in_one_statement(
    filled: str,
    topics: list[str],
    after: int,
    upto: int | None,
    limit: int,
    django_assert_num_queries: Any,
) -> None:
    from ledger.models import Message
    from ledger.selectors import message_record, message_tail_topics

    # given what the ORM reads for the same tail
    rows = Message.objects.filter(cluster_id=filled, topic__in=topics, sequence__gt=after)
    if upto is not None:
        rows = rows.filter(sequence__lte=upto)
    expected = [message_record(m) for m in rows.order_by("sequence")[:limit]]
    # when the snapshotter's read asks for it
    with django_assert_num_queries(1):
        found = message_tail_topics(
            cluster_id=filled, topics=topics, after=after, up_to_sequence=upto, limit=limit
        )
    # then it is the same messages, in sequence order, from one statement
    assert found == expected


def test_the_cluster_pages_reads_are_index_seeks_on_sqlite(filled: str) -> None:
    from ledger.interfaces import cluster_config_versions, message_timeline, pipeline
    from ledger.models import Message
    from ledger.selectors import message_record

    if connection.vendor != "sqlite":
        pytest.skip("reads SQLite's query plans")
    # given the newest timeline page, the pipeline's cursor and the config versions
    with CaptureQueriesContext(connection) as captured:
        rows, more = message_timeline(cluster_id=filled, limit=10)
        pipeline.caught_up(filled, timeout=0)
        assert cluster_config_versions(cluster_id=filled) == []

    # then the page is the ORM's newest ten, and each read one seek, nothing sorted
    newest = Message.objects.filter(cluster_id=filled).order_by("-timestamp", "-sequence")[:11]
    assert rows == [message_record(m) for m in newest][:10]
    assert more
    plans = [_plan(q["sql"]) for q in captured.captured_queries]
    assert [_indexes(plan) for plan in plans] == [
        ["msg_cluster_time"],
        ["sqlite_autoindex_ledger_cluster_1"],
        ["sqlite_autoindex_ledger_clusterconfigversion_1"],  # (cluster, version) unique
    ]
    assert not [step for plan in plans for step in plan if "TEMP B-TREE" in step]


def test_whether_a_cluster_exists_is_the_orms_answer_in_one_seek(filled: str) -> None:
    from ledger.models import Cluster
    from ledger.selectors import cluster_exists

    ids = [filled, "missing", filled.upper(), filled + " ", "x" * 300, "", "nul\x00"]
    with CaptureQueriesContext(connection) as captured:
        found = [cluster_exists(cluster_id=cid) for cid in ids]

    assert found == [True, False, False, False, False, False, False]
    assert found[:6] == [Cluster.objects.filter(pk=cid).exists() for cid in ids[:6]]
    assert len(captured.captured_queries) == 6  # an id with a NUL is asked nothing
    if connection.vendor == "sqlite":
        assert _indexes(_plan(captured.captured_queries[0]["sql"])) == [
            "sqlite_autoindex_ledger_cluster_1"
        ]
