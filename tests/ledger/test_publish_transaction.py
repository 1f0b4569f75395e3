"""A publish's own transaction on the driver's connection, and the pipeline's quiet turns."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from ledger.bus import bus
from ledger.errors import Conflict, NotFound
from ledger.models import Cluster, ClusterState, Message
from ledger.pipeline import Batch, Pipeline
from ledger.records import MessageRecord
from ledger.selectors import message_get
from ledger.services import MessageDraft, message_publish, message_publish_batch, together
from ledger.services.publish import now_ms
from ledger.statements import pipeline_cursor_move

pytestmark = pytest.mark.django_db(transaction=True)


def open_transaction() -> bool:
    """Whether the driver's connection is inside a transaction (nothing left half-done)."""
    driver = connection.connection
    if connection.vendor == "sqlite":
        return bool(driver.in_transaction)
    from psycopg.pq import TransactionStatus

    return bool(driver.info.transaction_status != TransactionStatus.IDLE)


def stored_elsewhere(cluster_id: str) -> list[int]:
    """The sequences stored, read on another thread's connection: only what has committed."""
    found: list[int] = []

    def read() -> None:
        try:
            found.extend(
                Message.objects.filter(cluster_id=cluster_id)
                .order_by("sequence")
                .values_list("sequence", flat=True)
            )
        finally:
            connection.close()

    reader = threading.Thread(target=read)
    reader.start()
    reader.join()
    return found


def test_a_publish_is_committed_before_it_is_delivered(cluster: str) -> None:
    # given a subscriber that reads the ledger on another connection when a message arrives
    seen: list[tuple[int, list[int]]] = []

    def look(message: MessageRecord) -> None:
        seen.append((message.sequence, stored_elsewhere(cluster)))

    subscription = bus.subscribe(look)
    try:
        # when one message and then a batch are published, outside any transaction
        message_publish(cluster_id=cluster, draft=MessageDraft(topic="A", sender="s"))
        message_publish_batch(
            cluster_id=cluster, drafts=[MessageDraft(topic="B", sender="s") for _ in range(3)]
        )
    finally:
        bus.unsubscribe(subscription)
    # then each was delivered in order, once every row of its transaction had committed
    assert seen == [(1, [1]), (2, [1, 2, 3, 4]), (3, [1, 2, 3, 4]), (4, [1, 2, 3, 4])]
    assert not open_transaction()


@pytest.mark.parametrize("verb", ["UPDATE", "INSERT"])
def test_a_failing_publish_writes_nothing_and_leaves_no_transaction_open(
    cluster: str, verb: str
) -> None:
    # given a database that fails the cluster row's move, or the messages' insert after it
    def failing(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith(verb):
            raise DatabaseError("disk I/O error")
        return execute(sql, params, many, context)

    delivered: list[int] = []
    subscription = bus.subscribe(lambda m: delivered.append(m.sequence))
    try:
        # when a batch is published
        with connection.execute_wrapper(failing), pytest.raises(DatabaseError):
            message_publish_batch(
                cluster_id=cluster, drafts=[MessageDraft(topic="T", sender="s") for _ in range(5)]
            )
        # then nothing of it was stored or delivered, and the connection is usable at once
        assert not open_transaction()
        assert Message.objects.filter(cluster_id=cluster).count() == 0
        assert Cluster.objects.get(pk=cluster).last_sequence == 0
        message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="s"))
    finally:
        bus.unsubscribe(subscription)
    assert delivered == [1]
    assert stored_elsewhere(cluster) == [1]


def test_an_idempotency_conflict_rolls_back_and_keeps_the_connection(cluster: str) -> None:
    # given a message stored under a key
    draft = MessageDraft(topic="T", sender="s", idempotency_key="k")
    first = message_publish(cluster_id=cluster, draft=draft)
    # when the key comes back with another body, then a retry of the first
    with pytest.raises(Conflict):
        message_publish(
            cluster_id=cluster,
            draft=MessageDraft(topic="T", sender="other", idempotency_key="k"),
        )
    again = message_publish(cluster_id=cluster, draft=draft)
    # then the conflict wrote nothing and the retry returns the original
    assert not open_transaction()
    assert again == first
    assert stored_elsewhere(cluster) == [1]


def verbs_of(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"].split()[0] for q in captured.captured_queries]


def test_a_publish_without_keys_locks_and_moves_the_row_in_one_statement(cluster: str) -> None:
    # when a message without an idempotency key is published, then one with a key (no
    # pipeline run in this thread after them)
    with override_settings(PIPELINE_MODE="off"):
        with CaptureQueriesContext(connection) as plain:
            message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="s"))
        with CaptureQueriesContext(connection) as keyed:
            message_publish(
                cluster_id=cluster, draft=MessageDraft(topic="T", sender="s", idempotency_key="k")
            )
    # then the first moved the cluster's row as it locked it (UPDATE … RETURNING), then
    # inserted (on PostgreSQL in one statement, docs/decisions/0265); the second read the row
    # under its lock, looked the key up, and moved the row
    if connection.vendor == "postgresql":
        assert verbs_of(plain) == ["WITH"]
    else:
        assert verbs_of(plain) == ["UPDATE", "INSERT"]
    assert "RETURNING" in plain.captured_queries[0]["sql"]
    assert verbs_of(keyed) == ["SELECT", "SELECT", "INSERT", "UPDATE"]
    row = Cluster.objects.get(pk=cluster)
    assert (row.last_sequence, row.last_timestamp) == (2, Message.objects.get(sequence=2).timestamp)


@pytest.fixture
def driver_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement psycopg is asked to run, Django's or not (PostgreSQL only)."""
    if connection.vendor != "postgresql":
        pytest.skip("psycopg's statements")
    import psycopg

    sent: list[str] = []
    # Django's cursors bind on the server (settings: ``server_side_binding``): plain cursors.
    execute = psycopg.Cursor.execute

    def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    return sent


def test_a_single_message_is_one_statement_and_one_round_trip(
    cluster: str, driver_statements: list[str]
) -> None:
    # given a connection already open (no pool lending in what is counted)
    message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="s"))
    driver_statements.clear()
    # when two messages are published, with no pipeline run after them
    with override_settings(PIPELINE_MODE="off"):
        first = message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="s"))
        second = message_publish(
            cluster_id=cluster,
            draft=MessageDraft(topic="U", sender="s", content={"text": "it's"}, metadata=[1]),
        )
        sent = [sql.split()[0] for sql in driver_statements]
        # and one with a stamp of its own, which goes through the cluster's transaction
        ahead = now_ms() + 60_000
        third = message_publish(
            cluster_id=cluster, draft=MessageDraft(topic="T", sender="s", timestamp=ahead)
        )
    # then each was one statement, with no BEGIN or COMMIT around it, and is stored as returned
    assert sent == ["WITH", "WITH"]
    assert "WITH" not in [sql.split()[0] for sql in driver_statements[2:]]
    assert third.timestamp == ahead
    assert not open_transaction()
    assert (first.sequence, second.sequence) == (2, 3)
    assert second.timestamp > first.timestamp
    for record in (first, second):
        assert message_get(cluster_id=cluster, message_id=record.id) == record
    row = Cluster.objects.get(pk=cluster)
    assert (row.last_sequence, row.last_timestamp) == (4, ahead)


def test_publishers_queued_for_a_cluster_commit_together_in_queue_order(
    cluster: str, driver_statements: list[str]
) -> None:
    # given eight publishers that queue for the cluster while its delivery lock is held
    delivered: list[int] = []
    subscription = bus.subscribe(lambda m: delivered.append(m.sequence))
    returned: dict[int, MessageRecord] = {}
    lock_held = threading.Event()

    def publish(n: int) -> None:
        try:
            returned[n] = message_publish(
                cluster_id=cluster, draft=MessageDraft(topic="T", sender=f"p{n}")
            )
        finally:
            connection.close()

    try:
        with override_settings(PIPELINE_MODE="off"):
            with bus.ordered_commit(cluster):
                lock_held.set()
                publishers = [threading.Thread(target=publish, args=(n,)) for n in range(8)]
                for publisher in publishers:
                    publisher.start()
                while len(together._queues.get(cluster, [])) < 8:
                    threading.Event().wait(0.01)
                queued = [w.draft.sender for w in together._queues[cluster]]
            # when the lock is let go
            for publisher in publishers:
                publisher.join()
    finally:
        bus.unsubscribe(subscription)
    # (new connections read and set the time zone: SELECTs)
    writes = [sql.split()[0] for sql in driver_statements if not sql.startswith("SELECT")]
    # then one statement stored all eight, numbered in the order they queued, each publisher
    # got its own message as stored, and they were delivered once, in order
    assert writes == ["WITH"]
    by_sender = {record.sender: record for record in returned.values()}
    assert [by_sender[sender].sequence for sender in queued] == list(range(1, 9))
    times = [by_sender[sender].timestamp for sender in queued]
    assert times == list(range(times[0], times[0] + 8))
    for record in returned.values():
        assert message_get(cluster_id=cluster, message_id=record.id) == record
    assert delivered == list(range(1, 9))
    assert stored_elsewhere(cluster) == list(range(1, 9))


def test_publishers_queued_for_a_missing_cluster_are_all_refused(db: None) -> None:
    # given two publishers queued for a cluster that does not exist
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            message_publish(cluster_id="no-such", draft=MessageDraft(topic="T", sender="s"))
        except NotFound as error:
            errors.append(error)
        finally:
            connection.close()

    with bus.ordered_commit("no-such"):
        publishers = [threading.Thread(target=publish) for _ in range(2)]
        for publisher in publishers:
            publisher.start()
        while connection.vendor == "postgresql" and len(together._queues.get("no-such", [])) < 2:
            threading.Event().wait(0.01)
    for publisher in publishers:
        publisher.join()
    # then each was told the cluster does not exist, and nothing is left queued
    assert len(errors) == 2
    assert "no-such" not in together._queues


def test_a_failing_insert_leaves_the_claim_undone(cluster: str) -> None:
    # given a row already at the sequence the next message would take (the unique
    # (cluster, sequence) refuses the insert after the claim has moved the cluster's row)
    message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="s"))
    taken = Message.objects.get(cluster_id=cluster, sequence=1)
    taken.pk = None
    taken.sequence, taken.message_id = 2, "in-the-way"
    taken.save()
    # when a message is published
    with pytest.raises(IntegrityError):
        message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="s"))
    # then the cluster's row did not move: the claim and the insert commit or fail together
    assert Cluster.objects.get(pk=cluster).last_sequence == 1
    assert not open_transaction()


def stamps(cluster_id: str) -> list[tuple[int, int]]:
    return list(
        Message.objects.filter(cluster_id=cluster_id)
        .order_by("sequence")
        .values_list("sequence", "timestamp")
    )


def test_the_one_statement_stamps_messages_as_the_locked_row_does(cluster: str) -> None:
    # given two clusters, one published to without keys (one statement moves the row), the
    # other with a fresh key on every message (the row read under its lock, then moved)
    from ledger.services import cluster_create

    keyed = cluster_create(cluster_id="keyed").id
    ahead = now_ms() + 60_000
    # The clock is set ahead of the server's first, so that every stamp is the same on both.
    script: list[list[dict[str, Any]]] = [
        [{"timestamp": ahead}],
        [{}],  # later messages follow the clock, not the server's time behind it
        [{}, {}, {}],
        [{}, {"timestamp": ahead + 10}, {}],  # a requested stamp inside a batch
        [{"timestamp": 1}],  # a stamp in the past never moves the clock back
        [{}],
    ]
    for round_no, batch in enumerate(script):
        for target, keys in ((cluster, False), (keyed, True)):
            drafts = [
                MessageDraft(
                    topic="T",
                    sender="s",
                    idempotency_key=f"k{round_no}-{i}" if keys else None,
                    **fields,
                )
                for i, fields in enumerate(batch)
            ]
            message_publish_batch(cluster_id=target, drafts=drafts)
    # then both hold the same sequences and stamps, 1 ms apart within a batch, never backwards
    plain = stamps(cluster)
    assert plain == stamps(keyed)
    assert [s for s, _ in plain] == list(range(1, 11))
    times = [t for _, t in plain]
    assert times == sorted(times)
    assert len(set(times)) == len(times)
    assert times[:5] == [ahead + i for i in range(5)]
    assert times[6] == ahead + 10
    for target in (cluster, keyed):
        row = Cluster.objects.get(pk=target)
        assert (row.last_sequence, row.last_timestamp) == plain[-1]


def test_an_ending_topic_still_moves_the_state_with_the_one_statement(cluster: str) -> None:
    # when a cluster's completion is published without a key
    message_publish(cluster_id=cluster, draft=MessageDraft(topic="CLUSTER_COMPLETE", sender="s"))
    # then the cluster is completed with its sequence and clock moved
    row = Cluster.objects.get(pk=cluster)
    assert (row.state, row.last_sequence) == (ClusterState.COMPLETED, 1)


def test_a_refused_publish_leaves_the_row_where_it_was(cluster: str) -> None:
    # given a message with a publisher-given id
    message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="s", id="m-1"))
    before = Cluster.objects.values_list("last_sequence", "last_timestamp").get(pk=cluster)
    # when the id comes again in a batch, and a message goes to a cluster that does not exist
    with pytest.raises(Conflict):
        message_publish_batch(
            cluster_id=cluster,
            drafts=[
                MessageDraft(topic="T", sender="s"),
                MessageDraft(topic="T", sender="s", id="m-1"),
            ],
        )
    with pytest.raises(NotFound):
        message_publish(cluster_id="no-such", draft=MessageDraft(topic="T", sender="s"))
    # then the row moved by the refused batch's first statement was rolled back with it
    after = Cluster.objects.values_list("last_sequence", "last_timestamp").get(pk=cluster)
    assert after == before
    assert not open_transaction()
    assert stored_elsewhere(cluster) == [1]


def test_a_publish_inside_a_callers_transaction_is_refused(cluster: str) -> None:
    # when a publish is attempted inside another transaction
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="s"))
    # then nothing was stored: its commit is never someone else's
    assert Message.objects.filter(cluster_id=cluster).count() == 0


class Quiet:
    """A stage that reads every batch and never writes."""

    name = "quiet"

    def __init__(self) -> None:
        self.seen: list[int] = []

    def plan(self, batch: Batch) -> None:
        self.seen.extend(m.sequence for m in batch.live)


def test_a_turn_with_nothing_to_write_moves_the_cursor_in_one_statement(cluster: str) -> None:
    # given messages that no stage writes anything for
    runner = Pipeline()
    stage = Quiet()
    runner.register(stage, order=1)
    with override_settings(PIPELINE_MODE="off"):
        message_publish_batch(
            cluster_id=cluster, drafts=[MessageDraft(topic="T", sender="s") for _ in range(3)]
        )
    # when the pipeline runs over them
    with CaptureQueriesContext(connection) as captured:
        moved = runner.run(cluster)
    # then the stage saw them, and the cursor moved without a write transaction: the
    # cluster and its messages read, one conditional UPDATE (it reached the newest message
    # read: no read follows to find it caught up)
    verbs = [q["sql"].split()[0] for q in captured.captured_queries]
    assert moved == 3
    assert stage.seen == [1, 2, 3]
    assert verbs == ["SELECT", "SELECT", "UPDATE"]
    assert Cluster.objects.get(pk=cluster).pipeline_sequence == 3


def test_the_cursor_moves_only_from_where_a_run_found_it(cluster: str) -> None:
    # given a cluster of three messages whose cursor another run moved to 2
    with override_settings(PIPELINE_MODE="off"):
        message_publish_batch(
            cluster_id=cluster, drafts=[MessageDraft(topic="T", sender="s") for _ in range(3)]
        )
    assert pipeline_cursor_move(cluster_id=cluster, after=0, to=2)
    # when a run that found it at 0 moves it, or one tries to pass the newest message
    stale = pipeline_cursor_move(cluster_id=cluster, after=0, to=3)
    too_far = pipeline_cursor_move(cluster_id=cluster, after=2, to=4)
    # then neither moves it: each message is passed over once, and never one not there
    assert (stale, too_far) == (False, False)
    assert Cluster.objects.get(pk=cluster).pipeline_sequence == 2


def test_a_transaction_that_says_what_it_appends_stamps_as_the_locked_row_does(
    cluster: str,
) -> None:
    # given two clusters, one written to by transactions that say beforehand what they append
    # (one statement locks and moves the row), the other by transactions that do not
    from ledger.services import cluster_create, cluster_transaction

    other = cluster_create(cluster_id="other").id
    ahead = now_ms() + 60_000
    script: list[list[dict[str, Any]]] = [
        [{"timestamp": ahead}],
        [{}, {}],
        [{}, {"timestamp": ahead + 10}, {}],  # a requested stamp inside a batch
        [{"timestamp": 1}],  # a stamp in the past never moves the clock back
        [{"topic": "CLUSTER_COMPLETE"}],  # an ending topic moves the state as well
    ]
    statements: dict[str, list[list[str]]] = {cluster: [], other: []}
    for batch in script:
        for target, said in ((cluster, True), (other, False)):
            drafts = [MessageDraft(**{"topic": "T", "sender": "s", **fields}) for fields in batch]
            now = now_ms()
            with (
                override_settings(PIPELINE_MODE="off"),  # no pipeline turn after the commit
                CaptureQueriesContext(connection) as captured,
                cluster_transaction(target, appending=(drafts, now) if said else None) as w,
            ):
                w.append(drafts, now=now)
            statements[target].append(verbs_of(captured))
    # then both hold the same sequences, stamps and state; the row was never read, and only
    # written again for the state an ending topic moves
    assert stamps(cluster) == stamps(other)
    for target in (cluster, other):
        row = Cluster.objects.get(pk=target)
        assert (row.last_sequence, row.last_timestamp) == stamps(cluster)[-1]
        assert row.state == ClusterState.COMPLETED
    for said, unsaid in zip(statements[cluster][:-1], statements[other], strict=False):
        assert len(said) == len(unsaid) - 1, (said, unsaid)
        assert "SELECT" not in said
        assert said.count("UPDATE") == 1
    assert statements[cluster][-1].count("UPDATE") == 2


def test_a_transaction_that_appends_other_than_it_said_writes_nothing(cluster: str) -> None:
    # given a transaction that says it appends two messages
    from ledger.services import cluster_transaction

    drafts = [MessageDraft(topic="T", sender="s") for _ in range(2)]
    # when it appends one of them
    now = now_ms()
    with pytest.raises(RuntimeError), cluster_transaction(cluster, appending=(drafts, now)) as w:
        w.append(drafts[:1], now=now)
    # then it is rolled back: the row where it was, no message
    row = Cluster.objects.get(pk=cluster)
    assert (row.last_sequence, row.last_timestamp) == (0, 0)
    assert not Message.objects.exists()
    # and a transaction whose drafts carry keys reads the row under its lock, as before
    keyed = [MessageDraft(topic="T", sender="s", idempotency_key="k")]
    with (
        override_settings(PIPELINE_MODE="off"),
        CaptureQueriesContext(connection) as captured,
        cluster_transaction(cluster, appending=(keyed, now)) as w,
    ):
        w.append(keyed, now=now)
    assert [v for v in verbs_of(captured) if v != "BEGIN"][:3] == ["SELECT", "SELECT", "INSERT"]
    # and one for a cluster that does not exist is NotFound
    with pytest.raises(NotFound), cluster_transaction("nope", appending=(drafts, now_ms())):
        pass
