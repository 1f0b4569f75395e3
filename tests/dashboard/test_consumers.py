"""Live pushes of the cluster page: a message is rendered once per process, not once per socket."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

import dashboard.consumers
import dashboard.fragments
import ledger.fanout
from dashboard.consumers import ClusterFanout, ClusterTimelineConsumer, SharedRenders, fanout
from dashboard.fragments import PushFragments, push_fragments
from ledger.interfaces import MessageRecord, cluster_group
from ledger.services import MessageDraft, message_publish, message_publish_batch
from tests.communicators import CONNECT_TIMEOUT
from zeroshot_web.asgi import application

pytestmark = pytest.mark.django_db

XSS = "<script>window.__xss=1</script>"


@pytest.fixture
def operator_client() -> Client:
    user = get_user_model().objects.create_user("op", password="pw-not-used-123")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def template_renders(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each template (``page#partial``) or the rows were rendered for a fragment."""
    renders: Counter[str] = Counter()
    render = dashboard.fragments.render_to_string

    def counting(name: str, *args: Any, **kwargs: Any) -> str:
        renders[name.partition("#")[2]] += 1
        return render(name, *args, **kwargs)

    rows = dashboard.fragments.rows_html

    def counting_rows(*args: Any, **kwargs: Any) -> str:
        renders["timeline-rows"] += 1
        return rows(*args, **kwargs)

    monkeypatch.setattr(dashboard.fragments, "render_to_string", counting)
    monkeypatch.setattr(dashboard.fragments, "rows_html", counting_rows)
    return renders


def row_sequences(html: str) -> list[str]:
    return re.findall(r'<li class="msg" id="msg-(\d+)"', html)


@pytest.mark.django_db(transaction=True)
def test_many_pages_on_one_cluster_cost_one_render_per_message(
    cluster: str, operator_client: Client, template_renders: Counter[str]
) -> None:
    headers = [
        (b"cookie", f"sessionid={operator_client.cookies['sessionid'].value}".encode()),
        (b"origin", b"http://localhost"),
    ]
    # six plain pages, three filtered to one topic, three showing a search (no rows)
    queries = [""] * 6 + ["?topic=TOKEN_USAGE"] * 3 + ["?q=login"] * 3

    async def scenario() -> list[list[str]]:
        pages = [
            WebsocketCommunicator(
                application, f"/ws/clusters/{cluster}/timeline/{query}", headers=headers
            )
            for query in queries
        ]
        for page in pages:
            assert (await page.connect(timeout=CONNECT_TIMEOUT))[0]
        # one message alone, then two in one transaction (one push each, back to back)
        await database_sync_to_async(message_publish)(
            cluster_id=cluster,
            draft=MessageDraft(topic="AGENT_OUTPUT", sender="worker", content={"text": XSS}),
        )
        await database_sync_to_async(message_publish_batch)(
            cluster_id=cluster,
            drafts=[
                MessageDraft(topic="TOKEN_USAGE", sender="worker", content={"data": {"n": 1}}),
                MessageDraft(topic="AGENT_OUTPUT", sender="validator", content={"text": "ok"}),
            ],
        )
        # the pushes arrive in one frame or several, as the push loop coalesces them
        received = []
        for page in pages:
            frames = [await page.receive_from(timeout=5)]
            while 'data-sequence="3" hx-swap-oob="true"' not in frames[-1]:
                frames.append(await page.receive_from(timeout=5))
            received.append(frames)
        for page in pages:
            assert await page.receive_nothing(timeout=0.1)
            await page.disconnect()
        return ["".join(frames) for frames in received]

    received = asyncio.run(scenario())

    # every page got every message, each with the rows its filters want, and the count
    rows = [row_sequences(pushes) for pushes in received]
    assert rows == [["1", "2", "3"]] * 6 + [["2"]] * 3 + [[]] * 3
    # pages with the same filters got the very same HTML, the agent's text escaped
    assert all(pushes == received[0] for pushes in received[:6])
    assert "&lt;script&gt;" in received[0]
    assert XSS not in received[0]
    # twelve pages, three messages: three rows rendered, not one per page, and the count once
    # a delivery (the two pushes were gathered into one, or came apart), not once a message
    assert template_renders["timeline-rows"] == 3
    assert template_renders["message-count"] in (1, 2)
    assert set(template_renders) == {"timeline-rows", "message-count"}


@pytest.mark.django_db(transaction=True)
def test_pages_of_one_cluster_share_one_subscription_and_one_frame_per_push(
    cluster: str, operator_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the suite's layer: in memory on SQLite, Redis on PostgreSQL."""
    layer = get_channel_layer()
    group = cluster_group(cluster)
    calls: Counter[str] = Counter()
    received: list[dict[str, Any]] = []
    group_add, group_discard, receive = layer.group_add, layer.group_discard, layer.receive

    async def counting_add(name: str, channel: str) -> None:
        calls["add"] += name == group
        await group_add(name, channel)

    async def counting_discard(name: str, channel: str) -> None:
        calls["discard"] += name == group
        await group_discard(name, channel)

    async def counting_receive(channel: str) -> dict[str, Any]:
        event: dict[str, Any] = await receive(channel)
        received.append(event)
        return event

    monkeypatch.setattr(layer, "group_add", counting_add)
    monkeypatch.setattr(layer, "group_discard", counting_discard)
    monkeypatch.setattr(layer, "receive", counting_receive)
    headers = [
        (b"cookie", f"sessionid={operator_client.cookies['sessionid'].value}".encode()),
        (b"origin", b"http://localhost"),
    ]
    path = f"/ws/clusters/{cluster}/timeline/"

    async def publish(text: str) -> None:
        await database_sync_to_async(message_publish)(
            cluster_id=cluster,
            draft=MessageDraft(topic="AGENT_OUTPUT", sender="worker", content={"text": text}),
        )

    async def until(page: WebsocketCommunicator, sequence: int) -> str:
        frames = [await page.receive_from(timeout=5)]
        while f'data-sequence="{sequence}" hx-swap-oob="true"' not in frames[-1]:
            frames.append(await page.receive_from(timeout=5))
        return "".join(frames)

    async def scenario() -> tuple[list[str], int, int, str]:
        pages = [WebsocketCommunicator(application, path, headers=headers) for _ in range(8)]
        for page in pages:
            assert (await page.connect(timeout=CONNECT_TIMEOUT))[0]
        frames_before, renders_before = fanout.frames, fanout.renders.renders
        for n in range(3):
            await publish(f"{XSS} {n}")
            # one push after the other: each its own event, in order
            await pages[0].receive_from(timeout=5)
        pushes = [await until(page, 3) if page is not pages[0] else "" for page in pages]
        frames, renders = fanout.frames - frames_before, fanout.renders.renders - renders_before
        for page in pages:
            assert await page.receive_nothing(timeout=0.1)
            await page.disconnect()
        # the last page gone, the process left the group; a page coming back subscribes again
        assert calls["discard"] == 1
        again = WebsocketCommunicator(application, path, headers=headers)
        assert (await again.connect(timeout=CONNECT_TIMEOUT))[0]
        await publish("after the reconnect")
        back = await until(again, 4)
        await again.disconnect()
        return pushes[1:], frames, renders, back

    pushes, frames, renders, back = asyncio.run(scenario())

    # every other page got the three messages, in order, escaped
    assert all(row_sequences(p) == ["1", "2", "3"] for p in pushes)
    assert all(p == pushes[0] for p in pushes)
    assert XSS not in pushes[0]
    assert "&lt;script&gt;" in pushes[0]
    # eight pages: one subscription and one receive, render and frame per push, not eight
    assert calls["add"] == 2  # the eight pages, then the page that came back
    push_events = [e for e in received if e.get("type", "").startswith("ledger.message")]
    assert len(push_events) == 4
    assert (frames, renders) == (3, 3)
    assert row_sequences(back) == ["4"]


def wire_of(sequence: int, text: str = "hello") -> dict[str, Any]:
    return MessageRecord(
        id=f"msg_{sequence:032x}",
        cluster_id="c-1",
        sequence=sequence,
        timestamp=1_767_000_000_000 + sequence,
        topic="AGENT_OUTPUT",
        sender="worker",
        content={"text": text},
    ).to_wire()


def test_a_push_to_a_page_not_accepted_yet_is_kept_for_after_its_accept() -> None:
    """A page joins its cluster before it is accepted, as it joined the group before: a push in
    between is written after the accept, not lost and not sent before it."""
    hub = ClusterFanout(SharedRenders())
    group = cluster_group("c-1")
    connecting, open_page = ClusterTimelineConsumer(), ClusterTimelineConsumer()
    connecting.backlog = []
    sent: list[str] = []

    async def frame_send(message: dict[str, Any]) -> None:
        assert message["type"] == "websocket.send"
        sent.append(message["text"])

    open_page.frame_send = frame_send  # what connect takes from the scope

    async def scenario() -> list[str]:
        layer = get_channel_layer()
        await hub.join(group, connecting)
        await hub.join(group, open_page)
        await layer.group_send(group, {"type": "ledger.message", "message": wire_of(1)})
        deadline = asyncio.get_running_loop().time() + 5
        while not sent:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        await hub.leave(group, connecting)
        await hub.leave(group, open_page)
        return [message["text"] for message in connecting.backlog or []]

    kept = asyncio.run(scenario())

    assert kept == sent
    assert row_sequences(kept[0]) == ["1"]
    assert hub.frames == 1
    assert hub.subscribes == 1


class RecordingPage(ClusterTimelineConsumer):
    """An accepted page without a server: the frames pushed to it, and a gate that can hold its
    writes back (a socket whose write is slow)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.frame_send = self.record

    async def record(self, message: dict[str, Any]) -> None:
        assert message["type"] == "websocket.send"
        await self.gate.wait()
        self.sent.append(message["text"])


async def frames_of(page: RecordingPage, rows: int) -> list[str]:
    """The frames written to ``page`` once they hold ``rows`` rows in all (5 s at most)."""
    deadline = asyncio.get_running_loop().time() + 5
    while len(row_sequences("".join(page.sent))) < rows:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.005)
    return list(page.sent)


def test_pushes_within_the_gathering_moment_of_a_frame_are_the_next_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A push after a quiet moment is a frame of its own; the pushes that arrive within
    ``gather_seconds`` of it go to each page as one frame holding every message's fragments,
    in order, and the header's count once: one frame built per delivery, one write per page,
    the new messages rendered in one worker-thread call."""
    calls: list[int] = []
    render_all = dashboard.consumers.render_all

    def counting(wires: list[dict[str, Any]]) -> list[PushFragments]:
        calls.append(len(wires))
        return render_all(wires)

    monkeypatch.setattr(dashboard.consumers, "render_all", counting)
    hub = ClusterFanout(SharedRenders())
    hub.gather_seconds = 0.5  # ample for three sends on a loaded machine
    group = cluster_group("c-1")
    pages = [RecordingPage() for _ in range(3)]

    async def scenario() -> list[list[str]]:
        layer = get_channel_layer()
        for page in pages:
            await hub.join(group, page)
        await layer.group_send(group, {"type": "ledger.message", "message": wire_of(1)})
        await frames_of(pages[0], 1)
        await layer.group_send(
            group, {"type": "ledger.messages", "messages": [wire_of(2), wire_of(3)]}
        )
        await layer.group_send(group, {"type": "ledger.message", "message": wire_of(4)})
        sent = [await frames_of(page, 4) for page in pages]
        for page in pages:
            await hub.leave(group, page)
        return sent

    sent = asyncio.run(scenario())

    assert hub.frames == 2
    assert calls == [1, 3]
    assert sent == [sent[0]] * 3
    assert [row_sequences(frame) for frame in sent[0]] == [["1"], ["2", "3", "4"]]
    counts = re.findall(r'id="cluster-count"[^>]*data-sequence="(\d+)"', sent[0][1])
    assert counts == ["4"]  # the header's count once, the last message's


def test_the_gathering_moment_grows_with_the_pages_open_up_to_its_most() -> None:
    """Frames to a cluster's pages are held to ``page_writes_per_second`` writes a second: the
    moment between two frames is the pages open over that rate, 5 ms at the least (few pages)
    and 40 ms at the most (200 pages and more)."""
    hub = ClusterFanout(SharedRenders())

    moments = [hub.gather_seconds_for(pages) for pages in (0, 1, 25, 100, 150, 200, 1000)]

    assert moments == pytest.approx([0.005, 0.005, 0.005, 0.02, 0.03, 0.04, 0.04])


def test_a_delivery_waits_the_moment_of_the_pages_open_not_a_fixed_one() -> None:
    """With no least moment, three pages at a rate of six writes a second still get the pushes
    that arrive within half a second of a frame as one frame: the writer waits the moment its
    members make."""
    hub = ClusterFanout(SharedRenders())
    hub.gather_seconds = 0.0
    hub.most_gather_seconds = 1.0
    hub.page_writes_per_second = 6  # three pages: 0.5 s between two frames
    group = cluster_group("c-1")
    pages = [RecordingPage() for _ in range(3)]

    async def scenario() -> list[list[str]]:
        layer = get_channel_layer()
        for page in pages:
            await hub.join(group, page)
        await layer.group_send(group, {"type": "ledger.message", "message": wire_of(1)})
        await frames_of(pages[0], 1)
        for sequence in (2, 3, 4):
            await layer.group_send(group, {"type": "ledger.message", "message": wire_of(sequence)})
            await asyncio.sleep(0.02)
        sent = [await frames_of(page, 4) for page in pages]
        for page in pages:
            await hub.leave(group, page)
        return sent

    sent = asyncio.run(scenario())

    assert hub.frames == 2
    assert [row_sequences(frame) for frame in sent[0]] == [["1"], ["2", "3", "4"]]


def test_a_push_after_a_quiet_moment_is_not_held_and_the_last_page_calls_off_the_next() -> None:
    """However long the gathering moment, a push after a quiet one is written at once; the
    push after it waits for the moment to pass, and is called off when the last page leaves
    meanwhile: nothing is rendered or built for nobody, and no task of the hub outlives the
    subscription."""
    hub = ClusterFanout(SharedRenders())
    hub.gather_seconds = 60.0
    group = cluster_group("c-1")
    page = RecordingPage()

    async def scenario() -> set[asyncio.Task[Any]]:
        layer = get_channel_layer()
        await hub.join(group, page)
        await layer.group_send(group, {"type": "ledger.message", "message": wire_of(1)})
        await frames_of(page, 1)
        await layer.group_send(group, {"type": "ledger.message", "message": wire_of(2)})
        await asyncio.sleep(0.2)  # received, waiting for the moment to pass
        await hub.leave(group, page)
        await asyncio.sleep(0.1)
        return asyncio.all_tasks() - {asyncio.current_task()}

    left = asyncio.run(scenario())

    assert left == set()
    assert [row_sequences(frame) for frame in page.sent] == [["1"]]
    assert (hub.renders.renders, hub.frames) == (1, 1)


def test_pushes_received_while_a_frame_is_written_go_out_together_next() -> None:
    """Without a gathering moment, what arrives while the pages are still being written to
    waits and goes to each page as the next frame, all of it, in order; nothing is lost or
    written twice."""
    hub = ClusterFanout(SharedRenders())
    hub.gather_seconds = 0.0
    group = cluster_group("c-1")
    slow, quick = RecordingPage(), RecordingPage()
    slow.gate.clear()

    async def scenario() -> tuple[list[str], list[str]]:
        layer = get_channel_layer()
        await hub.join(group, slow)
        await hub.join(group, quick)
        await layer.group_send(group, {"type": "ledger.message", "message": wire_of(1)})
        deadline = asyncio.get_running_loop().time() + 5
        while hub.frames < 1:  # the first frame is being written: the slow page holds it
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.005)
        for sequence in (2, 3, 4):
            await layer.group_send(group, {"type": "ledger.message", "message": wire_of(sequence)})
        await asyncio.sleep(0.05)  # received meanwhile, and held behind the slow write
        slow.gate.set()
        sent = (await frames_of(slow, 4), await frames_of(quick, 4))
        await hub.leave(group, slow)
        await hub.leave(group, quick)
        return sent

    slow_sent, quick_sent = asyncio.run(scenario())

    assert slow_sent == quick_sent
    assert [row_sequences(frame) for frame in slow_sent] == [["1"], ["2", "3", "4"]]
    assert hub.frames == 2


def test_a_slow_page_holds_pushes_back_in_the_channel_layer_and_frames_stay_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a page is slow to take its frame, at most ``RECEIVED_LIMIT`` pushes wait in the
    process and the rest stay in the channel layer; a frame then holds at most
    ``DELIVERY_EVENTS`` pushes, and every message still arrives once, in order."""
    monkeypatch.setattr(ledger.fanout, "RECEIVED_LIMIT", 3)
    monkeypatch.setattr(ledger.fanout, "DELIVERY_EVENTS", 2)
    hub = ClusterFanout(SharedRenders())
    hub.gather_seconds = 0.0
    group = cluster_group("c-1")
    slow = RecordingPage()
    slow.gate.clear()

    async def scenario() -> tuple[int, list[str]]:
        layer = get_channel_layer()
        await hub.join(group, slow)
        subscription = hub._subscriptions[(asyncio.get_running_loop(), group)]
        await layer.group_send(group, {"type": "ledger.message", "message": wire_of(1)})
        deadline = asyncio.get_running_loop().time() + 5
        while hub.frames < 1:  # the first frame is being written: the slow page holds it
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.005)
        for sequence in range(2, 9):
            await layer.group_send(group, {"type": "ledger.message", "message": wire_of(sequence)})
        while len(subscription.received) < 3:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.1)  # time for the reader to take more, were it not held
        held = len(subscription.received)
        slow.gate.set()
        sent = await frames_of(slow, 8)
        await hub.leave(group, slow)
        return held, sent

    held, sent = asyncio.run(scenario())

    assert held == 3
    assert [row for frame in sent for row in row_sequences(frame)] == [str(n) for n in range(1, 9)]
    assert max(len(row_sequences(frame)) for frame in sent[1:]) <= 2


def test_sockets_asking_at_once_share_the_first_render() -> None:
    renders = SharedRenders()
    wire = wire_of(1)

    async def scenario() -> list[Any]:
        return list(await asyncio.gather(*(renders.fragments(wire) for _ in range(50))))

    results = asyncio.run(scenario())

    assert renders.renders == 1
    assert all(result is results[0] for result in results)
    assert row_sequences(results[0].html(with_row=True)) == ["1"]
    assert row_sequences(results[0].html(with_row=False)) == []


def test_a_socket_closing_while_it_waits_leaves_the_render_to_the_others() -> None:
    renders = SharedRenders()
    wire = wire_of(1)

    async def scenario() -> Any:
        closing = asyncio.ensure_future(renders.fragments(wire))
        staying = asyncio.ensure_future(renders.fragments(wire))
        await asyncio.sleep(0)
        closing.cancel()
        return await staying

    fragments = asyncio.run(scenario())

    assert renders.renders == 1
    assert row_sequences(fragments.row) == ["1"]


def test_recent_renders_are_kept_within_their_bounds() -> None:
    renders = SharedRenders(keep=2, keep_chars=10**9)

    async def ask(shared: SharedRenders, *wires: dict[str, Any]) -> None:
        for wire in wires:
            await shared.fragments(wire)

    asyncio.run(ask(renders, wire_of(1), wire_of(2), wire_of(3), wire_of(3), wire_of(2)))
    assert renders.renders == 3  # 2 and 3 are the two kept
    asyncio.run(ask(renders, wire_of(1)))
    assert renders.renders == 4  # 1 had been dropped

    by_size = SharedRenders(keep=100, keep_chars=1)
    big = wire_of(4, "x" * 1000)
    asyncio.run(ask(by_size, big, big, wire_of(5), big))
    assert by_size.renders == 3  # past the size, only the newest render is kept


def test_the_page_and_the_push_print_the_same_row(operator_client: Client, cluster: str) -> None:
    message = message_publish(
        cluster_id=cluster,
        draft=MessageDraft(
            topic="AGENT_OUTPUT",
            sender="worker",
            content={"text": f"first {XSS}\nsecond", "data": {"ok": True}},
            metadata={"attempt": 2},
        ),
    )

    page = operator_client.get(f"/clusters/{cluster}/").content.decode()
    pushed = push_fragments(message).row

    row = re.search(r'<li class="msg" id="msg-1".*?</li>', pushed, re.S)
    assert row is not None
    assert row.group(0) in page
    assert "&lt;script&gt;" in row.group(0)
    assert '"attempt": 2' in row.group(0).replace("&quot;", '"')


def test_pages_with_the_same_filters_have_their_rows_chosen_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A push to many pages reads each page's filters only once per distinct filters: pages
    that filter alike share the choice and the frame's ``websocket.send``; the others get
    their own."""
    hub = ClusterFanout(SharedRenders())
    pages = [ClusterTimelineConsumer() for _ in range(5)]
    for page in pages[:3]:
        page.filters = (False, "", "", None)
    for page in pages[3:]:
        page.topic = "OTHER_TOPIC"
        page.filters = (False, "OTHER_TOPIC", "", None)
    received: dict[int, list[dict[str, Any]]] = {id(page): [] for page in pages}
    for page in pages:

        async def frame_send(message: dict[str, Any], page: Any = page) -> None:
            received[id(page)].append(message)

        page.frame_send = frame_send
    asked = Counter[str]()
    wanted = ClusterTimelineConsumer.wanted

    def counting_wanted(self: ClusterTimelineConsumer, wire: dict[str, Any]) -> bool:
        asked[self.topic] += 1
        return wanted(self, wire)

    monkeypatch.setattr(ClusterTimelineConsumer, "wanted", counting_wanted)
    events = [
        {"type": "ledger.message", "message": wire_of(1)},
        {"type": "ledger.messages", "messages": [wire_of(2), wire_of(3)]},
    ]

    async def scenario() -> None:
        for event in events:
            await hub.deliver(pages, [event])

    asyncio.run(scenario())

    assert asked == {"": 3, "OTHER_TOPIC": 3}  # one wire, then two, once per filters
    shown = [row_sequences(m["text"]) for m in received[id(pages[0])]]
    hidden = [row_sequences(m["text"]) for m in received[id(pages[3])]]
    assert shown == [["1"], ["2", "3"]]
    assert hidden == [[], []]
    for event_index in range(2):
        alike = {id(received[id(page)][event_index]) for page in pages[:3]}
        assert len(alike) == 1
        assert received[id(pages[0])][event_index] is not received[id(pages[3])][event_index]
    assert hub.frames == 4
