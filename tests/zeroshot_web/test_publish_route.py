"""The publish route in front of Django (zeroshot_web/publishing.py): the Ninja endpoints'
answers, without Django's middleware chain."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.asgi import get_asgi_application
from django.db import connections
from django.test import override_settings

from ledger.interfaces import MessageFilter, cluster_create, message_query
from ledger.keys import api_key_create
from operations.metrics import PUBLISH_SECONDS
from tests.conftest import ApiClient
from zeroshot_web.publishing import PublishRoute

pytestmark = pytest.mark.django_db(transaction=True)


class Counting:
    """Django's ASGI app, counting the requests that reach it."""

    def __init__(self) -> None:
        self.app = get_asgi_application()
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        await self.app(scope, receive, send)


def through_route(
    path: str, body: str, django: Counting, *, key: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=PublishRoute(django))
        try:
            async with httpx.AsyncClient(
                transport=transport, base_url="http://testserver"
            ) as client:
                return await client.post(
                    path,
                    content=body.encode(),
                    headers={
                        "Authorization": f"Bearer {key}",
                        "Content-Type": "application/json",
                        **(headers or {}),
                    },
                )
        finally:
            # The route's database work ran on asgiref's threads: their connections go too.
            await sync_to_async(connections.close_all)()

    return asyncio.run(call())


def single(cluster_id: str) -> str:
    return f"/api/v1/clusters/{cluster_id}/messages"


def batch(cluster_id: str) -> str:
    return f"/api/v1/clusters/{cluster_id}/messages/batch"


MESSAGE = {"topic": "AGENT_OUTPUT", "sender": "worker", "content": {"text": "hello"}}
# Bodies that are refused: the same refusal both ways.
REFUSED_SINGLE = [
    "[1",
    "[1]",
    "",
    "null",
    '"text"',
    json.dumps({}),
    json.dumps({**MESSAGE, "nope": 1}),
    json.dumps({**MESSAGE, "topic": "lower case"}),
    json.dumps({**MESSAGE, "sender": ""}),
    json.dumps({**MESSAGE, "timestamp": "1"}),
    json.dumps({**MESSAGE, "timestamp": -1}),
    json.dumps({**MESSAGE, "content": []}),
    json.dumps({**MESSAGE, "content": {"text": 5}}),
    json.dumps({**MESSAGE, "id": "x" * 129}),
    '{"topic": "A", "sender": "\\u0000"}',
    '{"topic": "A", "sender": "w", "content": {"data": 1e309}}',
    "[" * 200 + "]" * 200,
    b"\xff".decode("latin-1"),
]
REFUSED_BATCH = [
    "[]",
    json.dumps({"messages": {}}),
    json.dumps({"messages": [MESSAGE, {**MESSAGE, "sender": ""}]}),
    json.dumps({"messages": [MESSAGE], "extra": 1}),
    json.dumps({"messages": [MESSAGE] * 1001}),
    json.dumps({"messages": []}),
]


def same_answer(ours: httpx.Response, theirs: Any) -> None:
    assert ours.status_code == theirs.status_code, (ours.content, theirs.content)
    assert ours.json() == json.loads(theirs.content)
    for header in (
        "Content-Type",
        "Content-Security-Policy",
        "X-Content-Type-Options",
        "X-Frame-Options",
        "Referrer-Policy",
    ):
        assert ours.headers[header] == theirs.headers[header]


@pytest.mark.parametrize(
    ("kind", "body"),
    [("single", b) for b in REFUSED_SINGLE] + [("batch", b) for b in REFUSED_BATCH],
)
def test_a_refused_body_gets_the_endpoints_answer(kind: str, body: str) -> None:
    # given a cluster and a key
    cluster_id = cluster_create(cluster_id="c1").id
    _, key = api_key_create(name="agent")
    path = (single if kind == "single" else batch)(cluster_id)
    django = Counting()
    # when the same body is published through the route and through Django
    ours = through_route(path, body, django, key=key)
    theirs = ApiClient(key).post(path, raw=body)
    # then the answers are the same, and Django never saw the route's request
    same_answer(ours, theirs)
    assert ours.status_code in (400, 413, 422)
    assert django.calls == 0
    assert message_query(cluster_id=cluster_id) == []


def test_a_published_message_is_stored_and_answered_as_the_endpoint_does() -> None:
    cluster_id = cluster_create(cluster_id="c1").id
    _, key = api_key_create(name="agent")
    django = Counting()
    sent = {**MESSAGE, "metadata": {"k": [1, 2]}, "id": "m-1", "idempotency_key": "i-1"}
    ours = through_route(single(cluster_id), json.dumps(sent), django, key=key)
    theirs = ApiClient(key).post(
        single(cluster_id), {**sent, "id": "m-2", "idempotency_key": "i-2"}
    )
    assert ours.status_code == theirs.status_code == 201
    mine, other = ours.json(), theirs.json()
    assert mine.keys() == other.keys()
    assert {**mine, "id": "", "sequence": "", "timestamp": 0} == {
        **other,
        "id": "",
        "sequence": "",
        "timestamp": 0,
    }
    assert (mine["id"], mine["sequence"]) == ("m-1", "1")
    stored = message_query(cluster_id=cluster_id)
    assert stored[0].to_wire() == mine
    # the same message again: the idempotent answer, as Django gives it
    again = through_route(single(cluster_id), json.dumps(sent), django, key=key)
    same_answer(again, ApiClient(key).post(single(cluster_id), sent))
    # the same id with another content: the conflict, as Django gives it
    clash = json.dumps({**sent, "content": {"text": "other"}})
    same_answer(
        through_route(single(cluster_id), clash, django, key=key),
        ApiClient(key).post(single(cluster_id), raw=clash),
    )
    assert django.calls == 0


def test_a_batch_is_stored_and_answered_as_the_endpoint_does() -> None:
    cluster_id = cluster_create(cluster_id="c1").id
    _, key = api_key_create(name="agent")
    odd = {"topic": "A", "sender": "w", "content": {}, "metadata": {"n": [1, {"x": None}]}}
    body = json.dumps({"messages": [MESSAGE, {**MESSAGE, "receiver": "validator"}, odd]})
    ours = through_route(batch(cluster_id), body, Counting(), key=key)
    theirs = ApiClient(key).post(batch(cluster_id), raw=body)
    assert ours.status_code == theirs.status_code == 201
    assert [m["sequence"] for m in ours.json()] == ["1", "2", "3"]
    assert [m.keys() for m in ours.json()] == [m.keys() for m in theirs.json()]
    unnumbered = {"id": "", "sequence": "", "timestamp": 0}
    assert [{**m, **unnumbered} for m in ours.json()] == [
        {**m, **unnumbered} for m in theirs.json()
    ]
    assert [m.to_wire() for m in message_query(cluster_id=cluster_id)][:3] == ours.json()


def test_a_batch_is_found_by_a_search_as_soon_as_it_is_answered() -> None:
    # given a cluster with a message already, then a batch of 100 through the route
    cluster_id = cluster_create(cluster_id="c1").id
    _, key = api_key_create(name="agent")
    through_route(single(cluster_id), json.dumps(MESSAGE), Counting(), key=key)
    texts = [f"shipment {n} arrived" if n % 2 else f"parcel {n} left" for n in range(100)]
    body = json.dumps({"messages": [{**MESSAGE, "content": {"text": text}} for text in texts]})
    answered = through_route(batch(cluster_id), body, Counting(), key=key).json()
    # when the cluster is searched right after the answer
    found = message_query(cluster_id=cluster_id, where=MessageFilter(q="shipment arrived"))
    by_prefix = message_query(cluster_id=cluster_id, where=MessageFilter(q="parc"), limit=None)
    # then every message of the batch is found, in sequence order, under its answered id
    assert [r.id for r in found] == [m["id"] for m in answered[1::2]]
    assert [r.id for r in by_prefix] == [m["id"] for m in answered[::2]]


@pytest.mark.parametrize("case", ["unknown cluster", "another cluster's key", "bad key"])
def test_a_refused_publish_gets_the_endpoints_answer(case: str) -> None:
    cluster_id = cluster_create(cluster_id="c1").id
    cluster_create(cluster_id="c2")
    _, key = api_key_create(name="agent", cluster_id="c2" if case != "unknown cluster" else None)
    if case == "bad key":
        key = "zsk_nothing_here"
    target = "nope" if case == "unknown cluster" else cluster_id
    django = Counting()
    body = json.dumps(MESSAGE)
    ours = through_route(single(target), body, django, key=key)
    theirs = ApiClient(key).post(single(target), raw=body)
    same_answer(ours, theirs)
    assert ours.status_code >= 400
    assert django.calls == 0


def test_other_requests_go_on_to_django() -> None:
    cluster_id = cluster_create(cluster_id="c1").id
    _, key = api_key_create(name="agent")
    body = json.dumps(MESSAGE)
    for path in (single(cluster_id) + "?x=1", single(cluster_id) + "/", "/api/v1/clusters/"):
        django = Counting()
        through_route(path, body, django, key=key)
        assert django.calls == 1, path


def test_the_rate_limit_and_the_publish_timer_count_the_routes_publishes() -> None:
    cluster_id = cluster_create(cluster_id="c1").id
    _, key = api_key_create(name="agent")
    timed = PUBLISH_SECONDS._sum.get()  # type: ignore[attr-defined]
    counted = sum(b.get() for b in PUBLISH_SECONDS._buckets)  # type: ignore[attr-defined]
    with override_settings(API_RATE_LIMIT="1/m"):
        body = json.dumps(MESSAGE)
        assert through_route(single(cluster_id), body, Counting(), key=key).status_code == 201
        limited = through_route(single(cluster_id), body, Counting(), key=key)
    assert limited.status_code == 429
    assert limited.json() == {"code": "rate_limited", "message": "Too many requests."}
    assert sum(b.get() for b in PUBLISH_SECONDS._buckets) == counted + 2  # type: ignore[attr-defined]
    assert PUBLISH_SECONDS._sum.get() > timed  # type: ignore[attr-defined]
