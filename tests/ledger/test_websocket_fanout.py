"""The agents' streams of one cluster on one process share one subscription and one frame a push.

On the suite's channel layer: in memory on SQLite, Redis on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from ledger.fanout import MessageFanout, ServerSend, message_fanout, message_frame
from ledger.push import cluster_group, pusher
from ledger.services import MessageDraft, message_publish, message_publish_batch
from tests.communicators import CONNECT_TIMEOUT
from zeroshot_web.asgi import application
from zeroshot_web.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def layer_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often the channel layer was asked to add, discard and receive (push events only)."""
    layer = get_channel_layer()
    calls: Counter[str] = Counter()
    group_add, group_discard, receive = layer.group_add, layer.group_discard, layer.receive

    async def counting_add(name: str, channel: str) -> None:
        calls["add"] += 1
        await group_add(name, channel)

    async def counting_discard(name: str, channel: str) -> None:
        calls["discard"] += 1
        await group_discard(name, channel)

    async def counting_receive(channel: str) -> dict[str, Any]:
        event: dict[str, Any] = await receive(channel)
        calls["receive"] += str(event.get("type", "")).startswith("ledger.message")
        return event

    monkeypatch.setattr(layer, "group_add", counting_add)
    monkeypatch.setattr(layer, "group_discard", counting_discard)
    monkeypatch.setattr(layer, "receive", counting_receive)
    return calls


async def open_streams(cluster: str, api_key: str, count: int) -> list[WebsocketCommunicator]:
    streams = [
        WebsocketCommunicator(application, f"/ws/clusters/{cluster}/?key={api_key}")
        for _ in range(count)
    ]
    for stream in streams:
        assert (await stream.connect(timeout=CONNECT_TIMEOUT))[0]
    return streams


async def sequences(stream: WebsocketCommunicator, count: int) -> list[str]:
    frames = [await stream.receive_json_from(timeout=5) for _ in range(count)]
    assert all(frame["type"] == "message" for frame in frames)
    return [frame["data"]["sequence"] for frame in frames]


def test_many_streams_get_every_message_once_in_order_from_one_subscription(
    cluster: str, api_key: str, layer_calls: Counter[str]
) -> None:
    async def scenario() -> tuple[list[list[str]], int, int]:
        streams = await open_streams(cluster, api_key, 8)
        frames_before = message_fanout.frames
        # one message alone, then three in one transaction (a coalesced push)
        await database_sync_to_async(message_publish)(
            cluster_id=cluster, draft=MessageDraft(topic="T", sender="s", content={"text": "1"})
        )
        await database_sync_to_async(message_publish_batch)(
            cluster_id=cluster,
            drafts=[
                MessageDraft(topic="T", sender="s", content={"text": str(n)}) for n in (2, 3, 4)
            ],
        )
        got = [await sequences(stream, 4) for stream in streams]
        for stream in streams:
            assert await stream.receive_nothing(timeout=0.1)
        frames = message_fanout.frames - frames_before
        members = len(message_fanout.members(cluster_group(cluster)))
        for stream in streams:
            await stream.disconnect()
        return got, frames, members

    got, frames, members = asyncio.run(scenario())

    assert got == [["1", "2", "3", "4"]] * 8
    assert members == 8
    # eight streams: one subscription, each push received once and each frame built once
    assert layer_calls["add"] == 1
    assert 1 <= layer_calls["receive"] <= 2  # two pushes, or one when the pusher coalesced them
    assert frames == 4
    # the last stream gone, the process left the group
    assert layer_calls["discard"] == 1


def test_a_stream_that_closes_is_dropped_and_the_others_go_on(
    cluster: str, api_key: str, layer_calls: Counter[str]
) -> None:
    group = cluster_group(cluster)

    async def publish(text: str) -> None:
        await database_sync_to_async(message_publish)(
            cluster_id=cluster, draft=MessageDraft(topic="T", sender="s", content={"text": text})
        )

    async def scenario() -> tuple[list[str], list[str], list[int], list[str]]:
        first, second, third = await open_streams(cluster, api_key, 3)
        await publish("to all three")
        before = [await sequences(s, 1) for s in (first, second, third)]
        await second.disconnect()
        await publish("to two")
        after = [*(await sequences(first, 1)), *(await sequences(third, 1))]
        counts = [len(message_fanout.members(group))]
        await first.disconnect()
        await third.disconnect()
        counts.append(len(message_fanout.members(group)))
        # a stream that comes back subscribes the process again
        [again] = await open_streams(cluster, api_key, 1)
        await publish("after the last left")
        back = await sequences(again, 1)
        await again.disconnect()
        return [s for seqs in before for s in seqs], after, counts, back

    before, after, counts, back = asyncio.run(scenario())

    assert before == ["1", "1", "1"]
    assert after == ["2", "2"]
    assert counts == [2, 0]
    assert back == ["3"]
    assert (layer_calls["add"], layer_calls["discard"]) == (2, 2)


def test_a_push_while_a_stream_catches_up_is_sent_once_after_what_it_missed(
    cluster: str, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream joins before it reads what it missed: a message committed in between is both
    read and pushed, and goes out once, in its place."""
    import ledger.consumers

    for n in range(1, 4):
        message_publish(
            cluster_id=cluster, draft=MessageDraft(topic="T", sender="s", content={"text": str(n)})
        )
    pusher.flush()  # their pushes have gone out: the stream below opens after them
    tail = ledger.consumers.message_tail
    published: list[int] = []

    def tail_after_a_commit(**kwargs: Any) -> Any:
        if not published:  # committed after the join, before the first read
            record = message_publish(
                cluster_id=cluster, draft=MessageDraft(topic="T", sender="s", content={"text": "4"})
            )
            published.append(record.sequence)
        return tail(**kwargs)

    monkeypatch.setattr(ledger.consumers, "message_tail", tail_after_a_commit)

    async def scenario() -> list[str]:
        [late] = await open_streams(cluster, api_key + "&after=1", 1)
        got = await sequences(late, 3)
        # the push of message 4 has come meanwhile; a new one follows it
        await database_sync_to_async(message_publish)(
            cluster_id=cluster, draft=MessageDraft(topic="T", sender="s")
        )
        got += await sequences(late, 1)
        assert await late.receive_nothing(timeout=0.3)
        await late.disconnect()
        return got

    assert asyncio.run(scenario()) == ["2", "3", "4", "5"]
    assert published == [4]


def test_a_frame_is_the_message_as_send_json_wrote_it() -> None:
    wire = {"id": "msg_1", "cluster_id": "c", "sequence": "7", "content": {"text": "<é>"}}

    assert message_frame(wire) == json.dumps({"type": "message", "data": wire})


class SendRecorder:
    """An ASGI middleware that notes the type of every message sent through it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def noting_send(message: dict[str, Any]) -> None:
            self.seen.append(message["type"])
            await send(message)

        await self.app(scope, receive, noting_send)


@pytest.mark.parametrize("server_send", [True, False], ids=["server-send", "without"])
def test_pushed_frames_go_through_the_server_s_send_past_the_wrappers_below_it(
    cluster: str, api_key: str, server_send: bool
) -> None:
    """Under ``ServerSend`` a pushed frame skips the send wrappers beneath it (the accept and
    what a stream catches up on still pass); without it, frames take the consumer's send."""
    recorder = SendRecorder(URLRouter(websocket_urlpatterns))
    app = ServerSend(recorder) if server_send else recorder
    message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="s"))
    pusher.flush()

    async def scenario() -> list[str]:
        stream = WebsocketCommunicator(app, f"/ws/clusters/{cluster}/?key={api_key}&after=0")
        assert (await stream.connect(timeout=CONNECT_TIMEOUT))[0]
        got = await sequences(stream, 1)  # caught up from the ledger
        for n in range(3):
            await database_sync_to_async(message_publish)(
                cluster_id=cluster,
                draft=MessageDraft(topic="T", sender="s", content={"text": str(n)}),
            )
        got += await sequences(stream, 3)
        await stream.disconnect()
        return got

    assert asyncio.run(scenario()) == ["1", "2", "3", "4"]
    pushed = 0 if server_send else 3
    assert recorder.seen == ["websocket.accept"] + ["websocket.send"] * (1 + pushed)


def test_a_pushed_message_is_one_send_for_every_stream() -> None:
    """Each message of a push becomes one frame and one ``websocket.send``, the same object
    for every socket, in order, however many pushes are delivered together (SPEC §6.3);
    nothing is built per socket."""
    hub = MessageFanout()

    class Sink:
        def __init__(self) -> None:
            self.sent: list[tuple[int, dict[str, Any]]] = []

        async def write(self, sequence: int, sent: dict[str, Any]) -> None:
            self.sent.append((sequence, sent))

    sinks = [Sink() for _ in range(4)]
    wires = [{"id": f"msg_{n}", "sequence": n, "topic": "T"} for n in (1, 2, 3)]

    async def scenario() -> None:
        await hub.deliver(
            list(sinks),
            [
                {"type": "ledger.message", "message": wires[0]},
                {"type": "ledger.messages", "messages": wires[1:]},
            ],
        )

    asyncio.run(scenario())

    assert hub.frames == 3
    first = sinks[0].sent
    assert [sequence for sequence, _ in first] == [1, 2, 3]
    assert [sent for _, sent in first] == [
        {"type": "websocket.send", "text": message_frame(wire)} for wire in wires
    ]
    for sink in sinks[1:]:
        assert [(s, id(sent)) for s, sent in sink.sent] == [(s, id(sent)) for s, sent in first]
