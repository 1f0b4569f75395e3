from __future__ import annotations

import logging

import pytest
from django.db import transaction

from ledger.bus import bus
from ledger.interfaces import MessageRecord
from ledger.services import (
    MessageDraft,
    cluster_transaction,
    message_publish,
    message_publish_batch,
    now_ms,
)

# Delivery happens on commit, so these tests run with real transactions.
pytestmark = pytest.mark.django_db(transaction=True)


def test_subscribers_see_every_message_in_commit_order(cluster: str) -> None:
    seen: list[int] = []
    bus.subscribe(lambda m: seen.append(m.sequence))

    message_publish(cluster_id=cluster, draft=MessageDraft(topic="A", sender="s"))
    message_publish_batch(cluster_id=cluster, drafts=[MessageDraft(topic="B", sender="s")] * 3)

    assert seen == [1, 2, 3, 4]


def test_topic_subscriptions_filter_and_run_after_catch_all(cluster: str) -> None:
    calls: list[str] = []
    bus.subscribe(lambda m: calls.append(f"one:{m.topic}"), topics="PLAN_READY")
    bus.subscribe(lambda m: calls.append(f"many:{m.topic}"), topics=["PLAN_READY", "ISSUE_OPENED"])
    bus.subscribe(lambda m: calls.append(f"all:{m.topic}"))

    message_publish_batch(
        cluster_id=cluster,
        drafts=[
            MessageDraft(topic="ISSUE_OPENED", sender="s"),
            MessageDraft(topic="OTHER", sender="s"),
            MessageDraft(topic="PLAN_READY", sender="s"),
        ],
    )

    assert calls == [
        "all:ISSUE_OPENED",
        "many:ISSUE_OPENED",
        "all:OTHER",
        "all:PLAN_READY",
        "one:PLAN_READY",
        "many:PLAN_READY",
    ]


def test_a_raising_subscriber_is_logged_and_changes_nothing(
    cluster: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[int] = []

    def broken(message: MessageRecord) -> None:
        raise RuntimeError("subscriber bug")

    bus.subscribe(broken)
    bus.subscribe(lambda m: seen.append(m.sequence))

    with caplog.at_level(logging.ERROR, logger="ledger.bus"):
        record = message_publish(cluster_id=cluster, draft=MessageDraft(topic="A", sender="s"))

    assert record.sequence == 1
    assert seen == [1]
    assert "subscriber bug" in caplog.text


def test_nothing_is_delivered_before_commit_or_after_rollback(cluster: str) -> None:
    seen: list[int] = []
    bus.subscribe(lambda m: seen.append(m.sequence))

    with cluster_transaction(cluster) as writer:
        writer.append([MessageDraft(topic="A", sender="s")], now=now_ms())
        assert seen == []
    assert seen == [1]

    def publish_then_fail() -> None:
        with cluster_transaction(cluster) as writer:
            writer.append([MessageDraft(topic="A", sender="s")], now=now_ms())
            raise RuntimeError("abort")

    with pytest.raises(RuntimeError, match="abort"):
        publish_then_fail()
    assert seen == [1]


def test_publishing_inside_a_callers_transaction_is_refused(cluster: str) -> None:
    # Delivery follows commit order only if the publish owns its commit (durable).
    with transaction.atomic(), pytest.raises(RuntimeError, match="durable"):
        message_publish(cluster_id=cluster, draft=MessageDraft(topic="A", sender="s"))


def test_a_subscriber_may_publish_and_its_message_follows(cluster: str) -> None:
    seen: list[str] = []

    def echo(message: MessageRecord) -> None:
        if message.topic == "PING":
            message_publish(
                cluster_id=message.cluster_id, draft=MessageDraft(topic="PONG", sender="echo")
            )

    bus.subscribe(echo, topics="PING")
    bus.subscribe(lambda m: seen.append(m.topic))

    message_publish(cluster_id=cluster, draft=MessageDraft(topic="PING", sender="s"))

    assert seen == ["PING", "PONG"]


def test_unsubscribe_stops_delivery(cluster: str) -> None:
    seen: list[int] = []
    subscription = bus.subscribe(lambda m: seen.append(m.sequence))
    message_publish(cluster_id=cluster, draft=MessageDraft(topic="A", sender="s"))

    bus.unsubscribe(subscription)
    message_publish(cluster_id=cluster, draft=MessageDraft(topic="A", sender="s"))

    assert seen == [1]


def test_imported_messages_reach_only_subscribers_that_want_history(cluster: str) -> None:
    from ledger.services import ImportedMessage, message_import_batch

    everything: list[str] = []
    live_only: list[str] = []
    bus.subscribe(lambda m: everything.append(m.id))
    bus.subscribe(lambda m: live_only.append(m.id), include_imported=False)

    message_import_batch(
        cluster_id=cluster,
        messages=[ImportedMessage("old-1", 5, "PLAN_READY", "planner", "broadcast", {}, None)],
    )
    fresh = message_publish(cluster_id=cluster, draft=MessageDraft(topic="PLAN_READY", sender="p"))

    assert everything == ["old-1", fresh.id]
    assert live_only == [fresh.id]
