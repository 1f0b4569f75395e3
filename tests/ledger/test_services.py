from __future__ import annotations

import itertools
import re

import pytest
from django.test import override_settings

from ledger.errors import Conflict, InvalidInput, NotFound, TooLarge
from ledger.models import Cluster, Message
from ledger.selectors import message_query
from ledger.services import (
    MessageDraft,
    cluster_create,
    message_publish,
    message_publish_batch,
    now_ms,
)

pytestmark = pytest.mark.django_db


def test_publish_returns_the_stored_message(cluster: str) -> None:
    record = message_publish(
        cluster_id=cluster,
        draft=MessageDraft(topic="PLAN_READY", sender="planner", content={"text": "Plan"}),
    )

    assert re.fullmatch(r"msg_[0-9a-f]{32}", record.id)
    assert record.sequence == 1
    assert record.receiver == "broadcast"
    wire = record.to_wire()
    assert wire["sequence"] == "1"
    assert isinstance(wire["timestamp"], int)
    assert wire["content"] == {"text": "Plan"}
    assert Message.objects.get().message_id == record.id


def test_sequences_strictly_increase(cluster: str) -> None:
    records = [
        message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="a"))
        for _ in range(5)
    ]

    assert [r.sequence for r in records] == [1, 2, 3, 4, 5]
    timestamps = [r.timestamp for r in records]
    assert timestamps == sorted(timestamps)
    assert len(set(timestamps)) == 5


def test_past_timestamp_is_pulled_up_and_future_one_kept(cluster: str) -> None:
    before = now_ms()
    past = message_publish(
        cluster_id=cluster, draft=MessageDraft(topic="T", sender="a", timestamp=1000)
    )
    # Within the allowed clock skew (LEDGER_MAX_CLOCK_SKEW_MS, 5 minutes by default).
    future_ts = before + 60_000
    future = message_publish(
        cluster_id=cluster, draft=MessageDraft(topic="T", sender="a", timestamp=future_ts)
    )
    after_future = message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="a"))

    assert past.timestamp >= before
    assert future.timestamp == future_ts
    assert after_future.timestamp == future_ts + 1


def test_batch_keeps_order_with_timestamps_one_ms_apart(cluster: str) -> None:
    drafts = [
        MessageDraft(topic="WORKER_PROGRESS", sender="w", content={"text": str(i)})
        for i in range(10)
    ]

    records = message_publish_batch(cluster_id=cluster, drafts=drafts)

    assert [r.text for r in records] == [str(i) for i in range(10)]
    assert [r.sequence for r in records] == list(range(1, 11))
    assert [b.timestamp - a.timestamp for a, b in itertools.pairwise(records)] == [1] * 9


def test_generated_ids_start_with_their_stamp_and_grow_with_the_sequence(cluster: str) -> None:
    # given a single message, then two batches, one with an id of the publisher's
    single = message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="a"))
    first = message_publish_batch(
        cluster_id=cluster, drafts=[MessageDraft(topic="T", sender="a") for _ in range(50)]
    )
    second = message_publish_batch(
        cluster_id=cluster,
        drafts=[
            MessageDraft(topic="T", sender="a"),
            MessageDraft(topic="T", sender="a", id="given-1"),
            MessageDraft(topic="T", sender="a"),
        ],
    )
    # then every generated id is msg_ and 32 lowercase hex, the first 12 its stamp (a single
    # message stamped by the database: the clock it was stamped from), the rest random
    generated = [*first, second[0], second[2]]
    for record in [single, *generated]:
        assert re.fullmatch(r"msg_[0-9a-f]{32}", record.id)
    assert int(single.id[4:16], 16) <= single.timestamp
    assert [r.id[4:16] for r in generated] == [f"{r.timestamp:012x}" for r in generated]
    assert len({r.id[16:] for r in generated}) == len(generated)
    # and they sort in sequence order; the publisher's id is kept as given
    assert [r.id for r in generated] == sorted(r.id for r in generated)
    assert second[1].id == "given-1"
    stored = Message.objects.filter(cluster_id=cluster).order_by("sequence")
    assert [m.message_id for m in stored][1:] == [r.id for r in [*first, *second]]


def test_batch_with_one_invalid_message_stores_nothing(cluster: str) -> None:
    drafts = [MessageDraft(topic="OK", sender="w"), MessageDraft(topic="bad topic", sender="w")]

    with pytest.raises(InvalidInput) as error:
        message_publish_batch(cluster_id=cluster, drafts=drafts)

    assert error.value.details == {"index": 1, "field": "topic"}
    assert Message.objects.count() == 0
    assert Cluster.objects.get(pk=cluster).last_sequence == 0


def test_same_idempotency_key_and_body_returns_the_stored_message(cluster: str) -> None:
    draft = MessageDraft(topic="T", sender="a", content={"text": "x"}, idempotency_key="k1")

    first = message_publish(cluster_id=cluster, draft=draft)
    second = message_publish(cluster_id=cluster, draft=draft)

    assert second == first
    assert Message.objects.count() == 1


def test_same_idempotency_key_with_other_body_conflicts(cluster: str) -> None:
    message_publish(
        cluster_id=cluster, draft=MessageDraft(topic="T", sender="a", idempotency_key="k1")
    )

    with pytest.raises(Conflict):
        message_publish(
            cluster_id=cluster,
            draft=MessageDraft(topic="T", sender="b", idempotency_key="k1"),
        )
    assert Message.objects.count() == 1


def test_idempotency_keys_are_per_cluster(cluster: str) -> None:
    other = cluster_create(cluster_id="other").id
    draft = MessageDraft(topic="T", sender="a", idempotency_key="k1")

    first = message_publish(cluster_id=cluster, draft=draft)
    second = message_publish(cluster_id=other, draft=draft)

    assert first.cluster_id != second.cluster_id
    assert Message.objects.count() == 2


def test_batch_retry_with_keys_stores_nothing_new(cluster: str) -> None:
    drafts = [MessageDraft(topic="T", sender="a", idempotency_key=f"k{i}") for i in range(3)]

    first = message_publish_batch(cluster_id=cluster, drafts=drafts)
    again = message_publish_batch(cluster_id=cluster, drafts=drafts)

    assert again == first
    assert Message.objects.count() == 3


@override_settings(LEDGER_MAX_TEXT_BYTES=10)
def test_oversize_text_is_refused(cluster: str) -> None:
    with pytest.raises(TooLarge):
        message_publish(
            cluster_id=cluster,
            draft=MessageDraft(topic="T", sender="a", content={"text": "x" * 11}),
        )
    assert Message.objects.count() == 0


@override_settings(LEDGER_MAX_JSON_BYTES=20)
def test_oversize_data_and_metadata_are_refused(cluster: str) -> None:
    big = {"k": "v" * 30}
    with pytest.raises(TooLarge):
        message_publish(
            cluster_id=cluster, draft=MessageDraft(topic="T", sender="a", content={"data": big})
        )
    with pytest.raises(TooLarge):
        message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="a", metadata=big))
    assert Message.objects.count() == 0


@override_settings(LEDGER_MAX_BATCH=3)
def test_batch_over_the_limit_is_refused(cluster: str) -> None:
    with pytest.raises(TooLarge):
        message_publish_batch(cluster_id=cluster, drafts=[MessageDraft(topic="T", sender="a")] * 4)


@pytest.mark.parametrize(
    ("draft", "field"),
    [
        (MessageDraft(topic="plan_ready", sender="a"), "topic"),
        (MessageDraft(topic="9LIVES", sender="a"), "topic"),
        (MessageDraft(topic="A" * 65, sender="a"), "topic"),
        (MessageDraft(topic="T", sender=""), "sender"),
        (MessageDraft(topic="T", sender="s" * 129), "sender"),
        (MessageDraft(topic="T", sender="a", content={"text": 5}), "content.text"),
        (MessageDraft(topic="T", sender="a", content={"other": 1}), "content"),
        (MessageDraft(topic="T", sender="a", id="has space"), "id"),
        (MessageDraft(topic="T", sender="a", timestamp=-1), "timestamp"),
    ],
)
def test_malformed_fields_are_named(cluster: str, draft: MessageDraft, field: str) -> None:
    with pytest.raises(InvalidInput) as error:
        message_publish(cluster_id=cluster, draft=draft)

    assert error.value.details == {"field": field}
    assert Message.objects.count() == 0


def test_publisher_given_id_is_kept_and_unique(cluster: str) -> None:
    record = message_publish(
        cluster_id=cluster, draft=MessageDraft(topic="T", sender="a", id="msg_given")
    )
    assert record.id == "msg_given"

    with pytest.raises(Conflict):
        message_publish(
            cluster_id=cluster, draft=MessageDraft(topic="T", sender="a", id="msg_given")
        )
    assert Message.objects.count() == 1


def test_publish_to_missing_cluster_is_not_found(db: None) -> None:
    with pytest.raises(NotFound):
        message_publish(cluster_id="nope", draft=MessageDraft(topic="T", sender="a"))


def test_content_data_is_kept_exactly(cluster: str) -> None:
    for data in (0, False, None, "", {}, [], {"nested": ["é", 1.5]}):
        message_publish(
            cluster_id=cluster, draft=MessageDraft(topic="T", sender="a", content={"data": data})
        )

    stored = [m.content for m in message_query(cluster_id=cluster, limit=None)]

    assert stored == [{"data": d} for d in (0, False, None, "", {}, [], {"nested": ["é", 1.5]})]


def test_cluster_complete_moves_the_state(cluster: str) -> None:
    message_publish(
        cluster_id=cluster, draft=MessageDraft(topic="CLUSTER_COMPLETE", sender="system")
    )

    assert Cluster.objects.get(pk=cluster).state == "completed"


def test_cluster_create_generates_readable_ids(db: None) -> None:
    ids = {cluster_create().id for _ in range(5)}

    assert len(ids) == 5
    assert all(re.fullmatch(r"[a-z]+-[a-z]+-\d{1,2}", i) for i in ids)


@pytest.mark.parametrize("bad", ["", "-starts-with-dash", "has space", "x" * 129, "slash/id"])
def test_cluster_create_refuses_bad_ids(db: None, bad: str) -> None:
    with pytest.raises(InvalidInput):
        cluster_create(cluster_id=bad)


def test_cluster_create_refuses_a_taken_id(cluster: str) -> None:
    with pytest.raises(Conflict):
        cluster_create(cluster_id=cluster)


def test_a_cluster_created_in_a_transaction_exists_only_if_it_commits(db: None) -> None:
    from ledger.services import cluster_create_transaction

    def fail_halfway() -> None:
        with cluster_create_transaction(cluster_id="fresh") as writer:
            writer.append([MessageDraft(topic="T", sender="s")], now=now_ms())
            raise RuntimeError("the import fails halfway")

    with pytest.raises(RuntimeError):
        fail_halfway()
    assert not Cluster.objects.filter(pk="fresh").exists()
    assert not Message.objects.exists()


def test_creating_in_a_transaction_a_cluster_that_exists_is_a_conflict(db: None) -> None:
    from ledger.services import cluster_create_transaction

    cluster_create(cluster_id="taken", config={"agents": [{"id": "a", "role": "r"}]})

    with (
        pytest.raises(Conflict, match="'taken' already exists"),
        cluster_create_transaction(cluster_id="taken"),
    ):
        pass

    assert Cluster.objects.get(pk="taken").config == {"agents": [{"id": "a", "role": "r"}]}
