"""Each cluster's pipeline lag: messages not yet offered to the stages, and the oldest's age."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings
from pytest_django import DjangoAssertNumQueries

from ledger.errors import NotFound
from ledger.interfaces import (
    MessageDraft,
    cluster_create,
    message_publish,
    now_ms,
    pipeline,
    pipeline_lag,
    pipeline_lags,
)

pytestmark = pytest.mark.django_db(transaction=True)


def publish(cluster_id: str, n: int) -> list[int]:
    return [
        message_publish(cluster_id=cluster_id, draft=MessageDraft(topic="T", sender="s")).timestamp
        for _ in range(n)
    ]


def test_a_caught_up_cluster_has_no_lag(django_assert_num_queries: DjangoAssertNumQueries) -> None:
    cid = cluster_create(cluster_id="quiet").id
    publish(cid, 2)
    with django_assert_num_queries(1):
        lag = pipeline_lag(cluster_id=cid, now=10**13)
    assert (lag.undispatched, lag.oldest_timestamp, lag.oldest_age_ms) == (0, None, None)
    assert lag.pipeline_sequence == lag.last_sequence == 2


def test_a_lagging_cluster_shows_how_many_and_how_old(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    # given a cluster whose pipeline saw its first message but not the next three
    cid = cluster_create(cluster_id="behind").id
    publish(cid, 1)
    with override_settings(PIPELINE_MODE="off"):
        stamps = publish(cid, 3)
    # when its lag is read (one query)
    with django_assert_num_queries(1):
        lag = pipeline_lag(cluster_id=cid, now=stamps[0] + 1234)
    # then it counts the three and dates the oldest of them
    assert lag.undispatched == 3
    assert lag.oldest_timestamp == stamps[0]
    assert lag.oldest_age_ms == 1234
    # and once the pipeline has run, nothing lags
    pipeline.run(cid)
    assert pipeline_lag(cluster_id=cid, now=stamps[0] + 1234).undispatched == 0


def test_lags_list_only_lagging_clusters_the_longest_waiting_first(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    caught_up = cluster_create(cluster_id="caught-up").id
    publish(caught_up, 2)
    with override_settings(PIPELINE_MODE="off"):
        older = cluster_create(cluster_id="older").id
        [first] = publish(older, 1)
        while now_ms() <= first:  # the newer cluster's messages come a millisecond later at least
            pass
        newer = cluster_create(cluster_id="newer").id
        publish(newer, 2)
    with django_assert_num_queries(1):
        lags = pipeline_lags(now=first + 10_000)
    assert [(lag.cluster_id, lag.undispatched) for lag in lags] == [("older", 1), ("newer", 2)]
    assert lags[0].oldest_age_ms == 10_000
    assert [lag.cluster_id for lag in pipeline_lags(now=first, limit=1)] == ["older"]


def test_the_lagging_clusters_are_read_through_their_partial_index() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("the plan is checked on SQLite; PostgreSQL picks by its statistics")
    sql = "EXPLAIN QUERY PLAN SELECT id FROM ledger_cluster WHERE pipeline_sequence < last_sequence"
    with connection.cursor() as cursor:
        plan = " ".join(str(row) for row in cursor.execute(sql).fetchall())
    assert "cluster_pipeline_lagging" in plan


def test_an_unknown_cluster_has_no_lag() -> None:
    with pytest.raises(NotFound):
        pipeline_lag(cluster_id="nope", now=0)
