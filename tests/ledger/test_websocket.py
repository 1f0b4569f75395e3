from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from ledger.keys import api_key_create
from ledger.push import pusher
from ledger.services import MessageDraft, cluster_create, message_publish, message_publish_batch
from tests.communicators import CONNECT_TIMEOUT
from tests.conftest import ApiClient
from zeroshot_web.asgi import application
from zeroshot_web.settings import redis_channel_layer

pytestmark = pytest.mark.django_db(transaction=True)

# The suite's own Redis database, never the default one that other programs use.
REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/4"


async def connect(
    path: str, headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[WebsocketCommunicator, bool, Any]:
    communicator = WebsocketCommunicator(application, path, headers=headers or [])
    connected, code = await communicator.connect(timeout=CONNECT_TIMEOUT)
    return communicator, connected, code


def test_client_receives_messages_of_its_cluster_only(
    cluster: str, api_key: str, api: ApiClient
) -> None:
    other = cluster_create(cluster_id="other").id

    async def scenario() -> tuple[dict[str, Any], bool]:
        mine, ok_mine, _ = await connect(f"/ws/clusters/{cluster}/?key={api_key}")
        theirs, ok_theirs, _ = await connect(f"/ws/clusters/{other}/?key={api_key}")
        assert ok_mine
        assert ok_theirs
        response = await database_sync_to_async(api.post)(
            f"/api/v1/clusters/{cluster}/messages",
            {"topic": "PLAN_READY", "sender": "planner", "content": {"text": "hello"}},
        )
        assert response.status_code == 201
        event = await mine.receive_json_from(timeout=5)
        nothing = await theirs.receive_nothing(timeout=0.3)
        await mine.disconnect()
        await theirs.disconnect()
        return event, nothing

    event, nothing = asyncio.run(scenario())

    assert event["type"] == "message"
    assert event["data"]["topic"] == "PLAN_READY"
    assert event["data"]["sequence"] == "1"
    assert event["data"]["content"] == {"text": "hello"}
    assert nothing is True


def test_messages_arrive_in_sequence_order(cluster: str, api_key: str) -> None:
    async def scenario() -> list[str]:
        client, ok, _ = await connect(
            f"/ws/clusters/{cluster}/", [(b"authorization", f"Bearer {api_key}".encode())]
        )
        assert ok
        for i in range(5):
            await database_sync_to_async(message_publish)(
                cluster_id=cluster,
                draft=MessageDraft(topic="T", sender="s", content={"text": str(i)}),
            )
        got = [(await client.receive_json_from(timeout=5))["data"]["sequence"] for _ in range(5)]
        await client.disconnect()
        return got

    assert asyncio.run(scenario()) == ["1", "2", "3", "4", "5"]


async def close_code(path: str) -> Any:
    """Connect; the code the server closes with at once (a refusal), or None if it stays open.

    A refusal accepts the socket first and then closes it, so that the close code reaches the
    client: a handshake refused outright is an HTTP 403 with no code in it.
    """
    client, ok, _ = await connect(path)
    assert ok, "refusals accept the socket, then close it with a code"
    if await client.receive_nothing(timeout=0.3):
        await client.disconnect()
        return None
    closing = await client.receive_output()
    assert closing["type"] == "websocket.close"
    return closing.get("code")


def test_anonymous_and_bad_keys_are_closed_with_4401(cluster: str) -> None:
    async def scenario() -> list[Any]:
        return [
            await close_code(f"/ws/clusters/{cluster}/"),
            await close_code(f"/ws/clusters/{cluster}/?key=zsk_nope_nope"),
            await close_code(f"/ws/clusters/{cluster}/?key=zsk_a%00b_c"),
        ]

    assert asyncio.run(scenario()) == [4401, 4401, 4401]


def test_scoped_key_is_closed_on_other_clusters_and_unknown_cluster(cluster: str) -> None:
    other = cluster_create(cluster_id="other").id
    _, scoped = api_key_create(name="scoped", cluster_id=cluster)
    _, unscoped = api_key_create(name="all")

    async def scenario() -> list[Any]:
        return [
            await close_code(f"/ws/clusters/{other}/?key={scoped}"),
            await close_code(f"/ws/clusters/{cluster}/?key={scoped}"),
            await close_code(f"/ws/clusters/missing/?key={unscoped}"),
            await close_code(f"/ws/clusters/bad%00id/?key={unscoped}"),
        ]

    assert asyncio.run(scenario()) == [4403, None, 4404, 4404]


def test_signed_in_operator_session_is_accepted(cluster: str) -> None:
    get_user_model().objects.create_user("operator", password="pw-for-tests-only")
    browser = Client()
    assert browser.login(username="operator", password="pw-for-tests-only")
    cookie = f"sessionid={browser.cookies['sessionid'].value}".encode()

    async def scenario() -> bool:
        client, ok, _ = await connect(
            f"/ws/clusters/{cluster}/", [(b"cookie", cookie), (b"origin", b"http://localhost")]
        )
        if ok:
            await client.disconnect()
        return ok

    assert asyncio.run(scenario()) is True


def test_browser_from_a_foreign_origin_is_refused(cluster: str, api_key: str) -> None:
    async def scenario() -> bool:
        _, ok, _ = await connect(
            f"/ws/clusters/{cluster}/?key={api_key}", [(b"origin", b"http://evil.example")]
        )
        return ok

    assert asyncio.run(scenario()) is False


def test_browser_from_a_foreign_origin_is_refused_again_and_the_allowed_one_accepted(
    cluster: str, api_key: str
) -> None:
    """An Origin's answer, once known, is kept: the same answers every time."""

    async def scenario() -> list[bool]:
        answers = []
        for origin in [b"http://evil.example", b"http://localhost"] * 2:
            client, ok, _ = await connect(
                f"/ws/clusters/{cluster}/?key={api_key}", [(b"origin", origin)]
            )
            if ok:
                await client.disconnect()
            answers.append(ok)
        return answers

    assert asyncio.run(scenario()) == [False, True, False, True]


def test_an_origins_answer_is_worked_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from urllib.parse import urlparse

    from channels.security.websocket import OriginValidator

    from zeroshot_web.asgi import BrowserOriginValidator

    asked: list[str] = []
    validate = OriginValidator.validate_origin

    def counting(self: OriginValidator, parsed: Any) -> bool:
        asked.append(parsed.geturl())
        return bool(validate(self, parsed))

    monkeypatch.setattr(OriginValidator, "validate_origin", counting)
    validator = BrowserOriginValidator(None, ["localhost", "example.org"])
    origins = ["http://localhost", "https://evil.example", "http://localhost:8000", None] * 3

    answers = [validator.valid_origin(urlparse(o) if o else None) for o in origins]

    assert answers == [True, False, True, True] * 3
    assert asked == ["http://localhost", "https://evil.example", "http://localhost:8000"]
    for n in range(BrowserOriginValidator.KEEP * 2):
        assert validator.valid_origin(urlparse(f"http://h{n}.example")) is False
    assert len(validator.answers) <= BrowserOriginValidator.KEEP


@override_settings(CHANNEL_LAYERS={"default": redis_channel_layer(REDIS_URL)})
def test_pushes_travel_through_the_real_redis_layer(api_key: str) -> None:
    # Redis is shared by every test run on the machine: a cluster of our own keeps its group ours.
    cluster = cluster_create(cluster_id=f"redis-{uuid.uuid4().hex[:12]}").id
    channel_layers.backends.pop("default", None)
    try:

        async def scenario() -> dict[str, Any]:
            client, ok, _ = await connect(f"/ws/clusters/{cluster}/?key={api_key}")
            assert ok
            await database_sync_to_async(message_publish)(
                cluster_id=cluster, draft=MessageDraft(topic="VIA_REDIS", sender="s")
            )
            event = await client.receive_json_from(timeout=5)
            await client.disconnect()
            return event

        from channels.layers import get_channel_layer

        assert type(get_channel_layer()).__name__ == "OneTripRedisChannelLayer"
        assert asyncio.run(scenario())["data"]["topic"] == "VIA_REDIS"
    finally:
        channel_layers.backends.pop("default", None)


# Longer than every timeout of the Redis client and of channels_redis's blocking reads (5 s).
IDLE_SECONDS = 30


@override_settings(CHANNEL_LAYERS={"default": redis_channel_layer(REDIS_URL)})
def test_an_idle_socket_stays_open_on_redis_and_still_receives_a_push(api_key: str) -> None:
    cluster = cluster_create(cluster_id=f"redis-idle-{uuid.uuid4().hex[:12]}").id
    channel_layers.backends.pop("default", None)
    try:

        async def scenario() -> tuple[bool, dict[str, Any]]:
            client, ok, _ = await connect(f"/ws/clusters/{cluster}/?key={api_key}")
            assert ok
            # Nothing at all happens on the socket meanwhile: no push, no ping.
            idle = await client.receive_nothing(timeout=IDLE_SECONDS, interval=1)
            await database_sync_to_async(message_publish)(
                cluster_id=cluster, draft=MessageDraft(topic="AFTER_IDLE", sender="s")
            )
            event = await client.receive_json_from(timeout=10)
            await client.disconnect()
            return idle, event

        idle, event = asyncio.run(scenario())

        assert idle is True
        assert event["data"]["topic"] == "AFTER_IDLE"
    finally:
        channel_layers.backends.pop("default", None)


def test_a_client_reconnecting_with_after_gets_what_it_missed_then_live_ones(
    cluster: str, api_key: str
) -> None:
    for i in range(1, 6):
        message_publish(
            cluster_id=cluster, draft=MessageDraft(topic="T", sender="s", content={"text": str(i)})
        )

    async def scenario() -> list[str]:
        client, ok, _ = await connect(f"/ws/clusters/{cluster}/?key={api_key}&after=2")
        assert ok
        missed = [(await client.receive_json_from(timeout=5))["data"]["sequence"] for _ in range(3)]
        await database_sync_to_async(message_publish)(
            cluster_id=cluster, draft=MessageDraft(topic="T", sender="s")
        )
        live = (await client.receive_json_from(timeout=5))["data"]["sequence"]
        assert await client.receive_nothing(timeout=0.3)
        await client.disconnect()
        return [*missed, live]

    assert asyncio.run(scenario()) == ["3", "4", "5", "6"]


def test_a_resync_longer_than_a_page_arrives_whole_and_in_order(cluster: str, api_key: str) -> None:
    from ledger.consumers import RESYNC_PAGE

    drafts = [MessageDraft(topic="T", sender="s") for _ in range(RESYNC_PAGE + 20)]
    for start in range(0, len(drafts), 1000):
        message_publish_batch(cluster_id=cluster, drafts=drafts[start : start + 1000])

    async def scenario() -> list[int]:
        client, ok, _ = await connect(f"/ws/clusters/{cluster}/?key={api_key}&after=10")
        assert ok
        got = [
            int((await client.receive_json_from(timeout=5))["data"]["sequence"])
            for _ in range(len(drafts) - 10)
        ]
        assert await client.receive_nothing(timeout=0.3)
        await client.disconnect()
        return got

    assert asyncio.run(scenario()) == list(range(11, len(drafts) + 1))


def test_an_after_that_is_not_a_sequence_is_ignored(cluster: str, api_key: str) -> None:
    message_publish(cluster_id=cluster, draft=MessageDraft(topic="T", sender="s"))
    pusher.flush()  # its live push has gone out: the socket below opens after it

    async def scenario() -> bool:
        client, ok, _ = await connect(f"/ws/clusters/{cluster}/?key={api_key}&after=-1%00")
        assert ok
        quiet = await client.receive_nothing(timeout=0.3)
        await client.disconnect()
        return bool(quiet)

    assert asyncio.run(scenario()) is True
