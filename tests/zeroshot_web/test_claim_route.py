"""The claim route in front of Django (zeroshot_web/claims.py): the Ninja endpoint's answers,
without a thread of Django's."""

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

from ledger.interfaces import MessageDraft, cluster_create, message_publish
from ledger.keys import api_key_create
from runs.api import ClaimOut, TaskOut
from runs.services import task_claim, task_complete, task_fail
from tests.conftest import ApiClient
from zeroshot_web.claims import ClaimRoute, shaped

pytestmark = pytest.mark.django_db(transaction=True)

CLAIM = "/api/v1/tasks/claim"


class Counting:
    """Django's ASGI app, counting the requests that reach it."""

    def __init__(self) -> None:
        self.app = get_asgi_application()
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        await self.app(scope, receive, send)


def through_route(key: str, body: str, django: Counting) -> httpx.Response:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=ClaimRoute(django))
        try:
            async with httpx.AsyncClient(
                transport=transport, base_url="http://testserver"
            ) as client:
                return await client.post(
                    CLAIM,
                    content=body.encode(),
                    headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                )
        finally:
            # The route's database work ran on asgiref's thread: its connection goes too.
            await sync_to_async(connections.close_all)()

    return asyncio.run(call())


def running(cluster_id: str = "c1") -> str:
    worker = {
        "id": "worker",
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": "GO"}],
    }
    return cluster_create(cluster_id=cluster_id, config={"agents": [worker]}, state="running").id


BODIES = [
    json.dumps({"wait": 0}),
    "[1",
    "[1]",
    "",
    json.dumps({"wait": "x"}),
    json.dumps({"wait": 31}),
    json.dumps({"lease": 3}),
    json.dumps({"nope": 1}),
    json.dumps({"agents": ["a"] * 101}),
    '{"worker": "\\u0000"}',
    json.dumps({"cluster": "elsewhere"}),
    json.dumps({"labels": {"pool": "demo"}, "providers": ["claude"], "worker": "w"}),
    json.dumps({"labels": {"a b": "x"}}),
    json.dumps({"labels": {"pool": 1}}),
    json.dumps({"providers": ["p"] * 33}),
    json.dumps({"providers": ["p" * 65]}),
]


@pytest.mark.parametrize("body", BODIES)
def test_the_route_answers_as_the_ninja_endpoint_does(body: str) -> None:
    # given a key limited to one cluster, and no work
    cluster_id = running()
    _, key = api_key_create(name="scoped", cluster_id=cluster_id)
    django = Counting()
    # when the same body is claimed through the route and through Django
    ours = through_route(key, body, django)
    theirs = ApiClient(key).post(CLAIM, raw=body)
    # then the answers are the same, and Django never saw the route's request
    assert ours.status_code == theirs.status_code
    assert (ours.content and ours.json()) == (theirs.content and theirs.json())
    for header in ("Content-Type", "Content-Security-Policy", "X-Content-Type-Options"):
        assert ours.headers[header] == theirs.headers[header]
    assert django.calls == 0


def test_a_claimed_task_has_the_ninja_endpoints_shape() -> None:
    cluster_id = running()
    for _ in range(2):
        message_publish(cluster_id=cluster_id, draft=MessageDraft(topic="GO", sender="system"))
    _, key = api_key_create(name="w")
    # two tasks of two agents would be needed to claim one each way: complete the first
    theirs = ApiClient(key).post(CLAIM, {"wait": 0}).json()
    done = ApiClient(key).post(
        f"/api/v1/tasks/{theirs['task']['id']}/complete",
        {"lease_id": theirs["task"]["lease_id"], "result": {"summary": "ok"}},
    )
    assert done.status_code == 200
    ours = through_route(key, json.dumps({"wait": 5}), Counting())
    assert ours.status_code == 200
    claimed = ours.json()
    assert claimed.keys() == theirs.keys()
    assert claimed["task"].keys() == theirs["task"].keys()
    assert claimed["task"]["iteration"] == 2
    assert claimed["prompt"]


def test_a_bad_key_is_refused_and_a_session_is_left_to_django() -> None:
    django = Counting()
    refused = through_route("zsk_nothing_here", json.dumps({"wait": 0}), django)
    assert refused.status_code == 401
    assert refused.json() == ApiClient("zsk_nothing_here").post(CLAIM, {"wait": 0}).json()
    assert django.calls == 0


def test_the_rate_limit_counts_the_routes_claims() -> None:
    _, key = api_key_create(name="w")
    with override_settings(API_RATE_LIMIT="1/m"):
        assert through_route(key, "{}", Counting()).status_code == 204
        limited = through_route(key, "{}", Counting())
    assert limited.status_code == 429
    assert limited.json() == {"code": "rate_limited", "message": "Too many requests."}
    assert 1 <= int(limited.headers["Retry-After"]) <= 60


def test_the_route_filters_on_labels_and_providers_as_the_endpoint_does() -> None:
    # given a task of an unlabelled cluster, whose agent names no provider
    cluster_id = running()
    message_publish(cluster_id=cluster_id, draft=MessageDraft(topic="GO", sender="system"))
    _, key = api_key_create(name="w")
    # then a claim of the demo's pool gets nothing, a claim of a provider gets it
    demo = through_route(key, json.dumps({"wait": 0, "labels": {"pool": "demo"}}), Counting())
    assert demo.status_code == 204
    codex = through_route(key, json.dumps({"wait": 0, "providers": ["codex"]}), Counting())
    assert codex.status_code == 200
    assert codex.json()["task"]["cluster_id"] == cluster_id


def test_shaped_answers_are_the_schemas_byte_for_byte() -> None:
    # given a claim, a completed task with a result and usage, a failed one and a queued one
    agents = [
        {"id": f"w{n}", "role": "implementation", "prompt": "Work.", "triggers": [{"topic": "GO"}]}
        for n in range(3)
    ]
    cluster_id = cluster_create(cluster_id="shapes", config={"agents": agents}, state="running").id
    message_publish(cluster_id=cluster_id, draft=MessageDraft(topic="GO", sender="system"))
    claims = [task_claim(cluster_id=cluster_id, worker="w") for _ in range(3)]
    first, second, third = (c for c in claims if c is not None)
    done = task_complete(
        task_id=first.task.id,
        lease_id=first.task.lease_id,
        result={"summary": "ok", "nested": [1, 2.5, None, {"é": "\u2028"}]},
        output="{}",
        usage={"inputTokens": 3, "costUsd": 0.25},
    )
    failed = task_fail(
        task_id=second.task.id, lease_id=second.task.lease_id, error="no", retryable=True
    )
    wires = [done.task.to_wire(), failed.to_wire(), third.task.to_wire(with_lease=True)]
    wires.append({k: v for k, v in wires[0].items() if k not in ("error", "usage", "result")})
    # when each is shaped as the schema would validate and dump it
    for schema, wire in [(TaskOut, w) for w in wires] + [(ClaimOut, third.to_wire())]:
        for unset in (False, True):
            ours = json.dumps(shaped(schema, wire, exclude_unset=unset))
            theirs = schema.model_validate(wire).model_dump(mode="json", exclude_unset=unset)
            # then the bytes are the same, key order included
            assert ours == json.dumps(theirs)
    # and a value without a field the schema requires is refused, as validation refuses it
    with pytest.raises(KeyError):
        shaped(TaskOut, {k: v for k, v in wires[0].items() if k != "attempts"})
