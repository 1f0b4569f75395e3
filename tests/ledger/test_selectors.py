from __future__ import annotations

import pytest

from ledger.errors import InvalidInput
from ledger.filters import MessageFilter
from ledger.selectors import cluster_list, message_query, message_tail
from ledger.services import MessageDraft, cluster_create, message_publish_batch

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger(cluster: str) -> list[int]:
    """Six messages: two topics, two senders, one to a receiver."""
    drafts = [
        MessageDraft(topic="PLAN_READY", sender="planner"),
        MessageDraft(topic="WORKER_PROGRESS", sender="worker"),
        MessageDraft(topic="WORKER_PROGRESS", sender="worker", receiver="validator"),
        MessageDraft(topic="PLAN_READY", sender="planner"),
        MessageDraft(topic="WORKER_PROGRESS", sender="other"),
        MessageDraft(topic="VALIDATION_RESULT", sender="validator"),
    ]
    return [r.timestamp for r in message_publish_batch(cluster_id=cluster, drafts=drafts)]


def sequences(records: list) -> list[int]:  # type: ignore[type-arg]
    return [r.sequence for r in records]


def test_filters_by_topic_sender_and_receiver(cluster: str, ledger: list[int]) -> None:
    assert sequences(
        message_query(cluster_id=cluster, where=MessageFilter(topic="PLAN_READY"))
    ) == [1, 4]
    assert sequences(message_query(cluster_id=cluster, where=MessageFilter(sender="worker"))) == [
        2,
        3,
    ]
    assert sequences(
        message_query(cluster_id=cluster, where=MessageFilter(receiver="validator"))
    ) == [3]
    assert sequences(
        message_query(
            cluster_id=cluster, where=MessageFilter(topic="WORKER_PROGRESS", sender="other")
        )
    ) == [5]
    assert sequences(
        message_query(
            cluster_id=cluster,
            where=MessageFilter(
                topic=(
                    "PLAN_READY",
                    "VALIDATION_RESULT",
                )
            ),
        )
    ) == [1, 4, 6]


def test_since_and_until_are_inclusive(cluster: str, ledger: list[int]) -> None:
    assert sequences(
        message_query(cluster_id=cluster, where=MessageFilter(since=ledger[2], until=ledger[4]))
    ) == [
        3,
        4,
        5,
    ]


def test_after_order_and_limit(cluster: str, ledger: list[int]) -> None:
    assert sequences(message_query(cluster_id=cluster, where=MessageFilter(after=4))) == [5, 6]
    assert sequences(message_query(cluster_id=cluster, order="desc", limit=2)) == [6, 5]
    assert sequences(
        message_query(
            cluster_id=cluster, order="desc", limit=1, where=MessageFilter(topic="WORKER_PROGRESS")
        )
    ) == [5]


def test_tailing_cursor_reads_pages_without_gaps(cluster: str, ledger: list[int]) -> None:
    seen: list[int] = []
    after = 0
    while page := message_tail(cluster_id=cluster, after=after, limit=4):
        seen += sequences(page)
        after = page[-1].sequence

    assert seen == [1, 2, 3, 4, 5, 6]


def test_other_clusters_are_invisible(cluster: str, ledger: list[int]) -> None:
    other = cluster_create(cluster_id="other").id
    message_publish_batch(cluster_id=other, drafts=[MessageDraft(topic="PLAN_READY", sender="x")])

    assert sequences(
        message_query(cluster_id=cluster, where=MessageFilter(topic="PLAN_READY"))
    ) == [1, 4]
    assert sequences(message_query(cluster_id=other)) == [1]


@pytest.mark.parametrize("limit", [0, -1, 1001])
def test_limit_out_of_range_is_refused(cluster: str, limit: int) -> None:
    with pytest.raises(InvalidInput):
        message_query(cluster_id=cluster, limit=limit)


def test_cluster_list_filters_and_counts(db: None) -> None:
    a = cluster_create(cluster_id="alpha-one").id
    cluster_create(cluster_id="beta-two", state="failed")
    message_publish_batch(cluster_id=a, drafts=[MessageDraft(topic="T", sender="s")] * 3)

    assert [c.id for c in cluster_list(search="alpha")] == ["alpha-one"]
    assert [c.id for c in cluster_list(state="failed")] == ["beta-two"]
    listed = {c.id: c for c in cluster_list()}
    assert listed["alpha-one"].message_count == 3
    assert listed["alpha-one"].last_activity is not None
    assert listed["beta-two"].last_activity is None


def test_last_activity_is_the_newest_message_not_the_clusters_clock(db: None) -> None:
    from ledger.selectors import cluster_get
    from ledger.services import cluster_transaction

    cid = cluster_create(cluster_id="clocked").id
    (last,) = message_publish_batch(cluster_id=cid, drafts=[MessageDraft(topic="T", sender="s")])
    # A recorded context build moves the cluster's clock past its start, much later.
    with cluster_transaction(cid) as writer:
        writer.clock_advance(last.timestamp + 48 * 60_000)

    assert cluster_get(cluster_id=cid).last_activity == last.timestamp
    assert {c.id: c for c in cluster_list()}[cid].last_activity == last.timestamp


def test_query_count_does_not_grow_with_results(
    cluster: str,
    ledger: list[int],
    django_assert_num_queries,  # type: ignore[no-untyped-def]
) -> None:
    with django_assert_num_queries(1):
        message_query(cluster_id=cluster, limit=1000)
    with django_assert_num_queries(1):
        cluster_list()
