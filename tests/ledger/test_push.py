"""The live push (ledger/push.py): never waited for, coalesced, in commit order."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import InMemoryChannelLayer, channel_layers, get_channel_layer
from django.db import connection
from django.test import override_settings

import ledger.push
from ledger.filters import MessageFilter
from ledger.models import Message
from ledger.push import CHUNK, cluster_group, group_events, pusher
from ledger.records import MessageRecord
from ledger.selectors import message_query
from ledger.services import MessageDraft, cluster_create, message_publish, message_publish_batch
from snapshots.snapshotter import snapshot_latest
from snapshots.state import SNAPSHOT_TRIGGER_TOPICS, snapshot_apply, snapshot_equal


def record(cluster_id: str, sequence: int) -> MessageRecord:
    return MessageRecord(
        id=f"m{sequence}",
        cluster_id=cluster_id,
        sequence=sequence,
        timestamp=1_000 + sequence,
        topic="T",
        sender="s",
        receiver="broadcast",
        content={},
        metadata=None,
    )


def test_a_lone_message_is_one_event_of_its_own() -> None:
    [(group, event)] = group_events([(record("a", 1),)])
    assert group == cluster_group("a")
    assert event == {"type": "ledger.message", "message": record("a", 1).to_wire()}


def test_queued_batches_are_coalesced_per_cluster_in_order_and_in_chunks() -> None:
    # given what queued up while a send was in flight: a's 1-150, b's 1, a's 151
    queued = [
        tuple(record("a", n) for n in range(1, 101)),
        tuple(record("a", n) for n in range(101, 151)),
        (record("b", 1),),
        (record("a", 151),),
    ]

    events = group_events(queued)

    # then one event per run of a cluster, at most CHUNK messages each, in hand-over order
    shape = [
        (group, event["type"], [int(m["sequence"]) for m in event.get("messages", [])])
        for group, event in events
    ]
    assert shape == [
        (cluster_group("a"), "ledger.messages", list(range(1, CHUNK + 1))),
        (cluster_group("a"), "ledger.messages", list(range(CHUNK + 1, 151))),
        (cluster_group("b"), "ledger.message", []),
        (cluster_group("a"), "ledger.message", []),
    ]


class Listener:
    """A channel in a cluster's group, read as events arrive, on the push's own loop (where
    this test's publishing threads, which have no event loop, send)."""

    def __init__(self, cluster_id: str) -> None:
        self.loop = pusher._own_loop()
        self.layer = get_channel_layer()
        if not isinstance(self.layer, InMemoryChannelLayer):
            # A layer of its own: a Redis layer receives on one event loop only, and the tests
            # after this one receive on theirs. (In memory, groups live in the one instance.)
            self.layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        self.group = cluster_group(cluster_id)
        self.channel = self._run(self.layer.new_channel())
        self._run(self.layer.group_add(self.group, self.channel))
        self.received: list[dict[str, Any]] = []
        self._reading = asyncio.run_coroutine_threadsafe(self._read(), self.loop)

    def _run(self, coroutine: Any, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _read(self) -> None:
        while True:
            self.received.append(await self.layer.receive(self.channel))

    def events(self, until: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 20
        while not until(list(self.received)):
            assert time.monotonic() < deadline, f"only {len(self.received)} events arrived"
            time.sleep(0.01)
        return list(self.received)

    def close(self) -> None:
        self._reading.cancel()
        self._run(self.layer.group_discard(self.group, self.channel))


@contextmanager
def loop_held(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Keep ``loop`` busy until the block ends: nothing can be sent meanwhile."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(10)

    loop.call_soon_threadsafe(hold)
    assert entered.wait(5)
    try:
        yield
    finally:
        release.set()


def sequences(events: list[dict[str, Any]]) -> list[int]:
    found: list[int] = []
    for event in events:
        wires = event["messages"] if event["type"] == "ledger.messages" else [event["message"]]
        found.extend(int(w["sequence"]) for w in wires)
    return found


class SlowSends:
    """The channel layer, each group send taking ``seconds`` before it is made: a send in
    flight for long enough that the test can hand more over meanwhile."""

    def __init__(self, layer: Any, seconds: float) -> None:
        self.layer, self.seconds = layer, seconds
        self.sends = 0

    async def group_send(self, group: str, event: dict[str, Any]) -> None:
        self.sends += 1
        await asyncio.sleep(self.seconds)
        await self.layer.group_send(group, event)


def test_what_comes_during_and_right_after_a_send_waits_a_moment_and_goes_in_one_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a steady stream, the sender waits its gathering moment after each send too: what
    was handed over while a send was in flight, and what comes within the moment after it, go
    out as one event, not the first of them alone as soon as the send ends."""
    monkeypatch.setattr(ledger.push, "GATHER_SECONDS", 0.5)
    listener = Listener("steady")
    slow = SlowSends(listener.layer, 0.3)
    monkeypatch.setattr(ledger.push, "get_channel_layer", lambda: slow)
    sender = ledger.push._LoopSender(listener.loop)
    try:
        sender.hand_over((record("steady", 1),))
        deadline = time.monotonic() + 10
        while slow.sends < 1:  # 1 is being sent
            assert time.monotonic() < deadline
            time.sleep(0.005)
        sender.hand_over((record("steady", 2),))  # while 1's send is in flight
        listener.events(until=lambda got: len(got) >= 1)  # 1's send has ended
        sender.hand_over((record("steady", 3),))  # within the moment after it
        sender.hand_over((record("steady", 4),))

        events = listener.events(until=lambda got: len(sequences(got)) >= 4)

        assert [sequences([event]) for event in events] == [[1], [2, 3, 4]]
        assert sender.wait_idle(5)
    finally:
        listener.close()


@pytest.mark.django_db(transaction=True)
def test_a_publish_returns_while_its_push_cannot_be_sent_yet(cluster: str) -> None:
    listener = Listener(cluster)
    try:
        # given the loop that sends pushes is busy
        with loop_held(listener.loop):
            # when messages are published, alone and in a batch
            for _ in range(5):
                message_publish(
                    cluster_id=cluster, draft=MessageDraft(topic="T", sender="s", content={})
                )
            message_publish_batch(
                cluster_id=cluster,
                drafts=[MessageDraft(topic="T", sender="s") for _ in range(150)],
            )
            # then every publish has returned, and nothing has been sent
            assert Message.objects.filter(cluster_id=cluster).count() == 155

        # and once the loop is free, what queued up goes out coalesced, in order
        events = listener.events(until=lambda got: len(sequences(got)) >= 155)
        assert sequences(events) == list(range(1, 156))
        assert [e["type"] for e in events] == ["ledger.messages", "ledger.messages"]
        assert pusher.flush(5)
    finally:
        listener.close()


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_with_snapshotter_and_push_on_stay_gapless_and_in_order() -> None:
    # given a running cluster whose trigger messages make snapshots, the pipeline in its
    # worker thread as in a server, and a live client of the cluster
    cluster = cluster_create(cluster_id="push-order", state="running").id
    listener = Listener(cluster)
    writers, per_writer = 8, 60
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def writer(n: int) -> None:
        try:
            start.wait()
            for i in range(per_writer):
                topic = "ISSUE_OPENED" if (i % 10 == 0 and n == 0) else "WORKER_PROGRESS"
                if i % 15 == 7:
                    message_publish_batch(
                        cluster_id=cluster,
                        drafts=[
                            MessageDraft(topic=topic, sender=f"w{n}", content={"text": f"{i}"})
                        ],
                    )
                else:
                    message_publish(
                        cluster_id=cluster,
                        draft=MessageDraft(topic=topic, sender=f"w{n}", content={"text": f"{i}"}),
                    )
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    from ledger.pipeline import pipeline

    try:
        with override_settings(PIPELINE_MODE="thread"):
            try:
                # when eight writers publish at once
                threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                assert errors == []
            finally:
                pipeline.stop()
        # the worker's turns end first, then whatever it has not reached is run here: a run
        # asked for while the worker holds the cluster only marks it for another round, which a
        # stopping worker may not take. Out of the thread mode, so that the snapshot this run
        # may publish does not start another scheduler.
        pipeline.run(cluster)
        total = Message.objects.filter(cluster_id=cluster).count()

        # then the ledger is gapless, every message was pushed once, in sequence order
        stored = list(
            Message.objects.filter(cluster_id=cluster)
            .order_by("sequence")
            .values_list("sequence", flat=True)
        )
        assert stored == list(range(1, total + 1))
        assert total >= writers * per_writer + 1  # the snapshot(s) too
        events = listener.events(until=lambda got: len(sequences(got)) >= total)
        assert sequences(events) == list(range(1, total + 1))
        # and the last snapshot is the fold of every trigger message, in sequence order
        snapshot = snapshot_latest(cluster_id=cluster)
        assert snapshot is not None
        assert isinstance(snapshot.data, dict)
        expected: Any = None
        for message in message_query(
            cluster_id=cluster,
            where=MessageFilter(topic=tuple(SNAPSHOT_TRIGGER_TOPICS)),
            limit=1000,
        ):
            expected = snapshot_apply(expected, message, cluster_id=cluster)
        assert snapshot_equal(expected, snapshot.data)
    finally:
        listener.close()
