"""Live pushes of the cluster page: a message is rendered once per process, not once per socket."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

import dashboard.fragments
from dashboard.consumers import SharedRenders
from dashboard.fragments import push_fragments
from ledger.interfaces import MessageRecord
from ledger.services import MessageDraft, message_publish, message_publish_batch
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
    """How often each template (``page#partial``) was rendered for a fragment."""
    renders: Counter[str] = Counter()
    render = dashboard.fragments.render_to_string

    def counting(name: str, *args: Any, **kwargs: Any) -> str:
        renders[name.partition("#")[2]] += 1
        return render(name, *args, **kwargs)

    monkeypatch.setattr(dashboard.fragments, "render_to_string", counting)
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
            assert (await page.connect())[0]
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
    # twelve pages, three messages: three rows and three counts rendered, not one per page
    assert template_renders == {"timeline-rows": 3, "message-count": 3}


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
