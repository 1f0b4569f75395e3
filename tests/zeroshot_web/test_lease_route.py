"""The lease route in front of Django (zeroshot_web/leases.py): the Ninja endpoints' answers to a
completion, a heartbeat and a failure, without Django's middleware chain."""

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

from ledger.interfaces import MessageDraft, cluster_create, message_publish, message_query
from ledger.keys import api_key_create
from runs.selectors import task_get
from runs.services import task_claim
from tests.conftest import ApiClient
from zeroshot_web.leases import LeaseRoute

pytestmark = pytest.mark.django_db(transaction=True)


class Counting:
    """Django's ASGI app, counting the requests that reach it."""

    def __init__(self) -> None:
        self.app = get_asgi_application()
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        await self.app(scope, receive, send)


def through_route(path: str, body: str, django: Counting, *, key: str) -> httpx.Response:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=LeaseRoute(django))
        try:
            async with httpx.AsyncClient(
                transport=transport, base_url="http://testserver"
            ) as client:
                return await client.post(
                    path,
                    content=body.encode(),
                    headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                )
        finally:
            # The route's database work ran on asgiref's threads: their connections go too.
            await sync_to_async(connections.close_all)()

    return asyncio.run(call())


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


def running(cluster_id: str = "c1", agents: int = 1) -> str:
    config = {
        "agents": [
            {
                "id": f"w{n}",
                "role": "implementation",
                "prompt": "Work.",
                "triggers": [{"topic": "GO"}],
            }
            for n in range(agents)
        ]
    }
    cluster_create(cluster_id=cluster_id, config=config, state="running")
    message_publish(cluster_id=cluster_id, draft=MessageDraft(topic="GO", sender="system"))
    return cluster_id


def claimed(cluster_id: str) -> tuple[str, str]:
    claim = task_claim(cluster_id=cluster_id, worker="w")
    assert claim is not None
    return claim.task.id, claim.task.lease_id


def path(task_id: str, call: str) -> str:
    return f"/api/v1/tasks/{task_id}/{call}"


REFUSED = {
    "complete": [
        "",
        "[1",
        "[1]",
        "null",
        "{}",
        json.dumps({"lease_id": ""}),
        json.dumps({"lease_id": "x" * 41}),
        json.dumps({"lease_id": "L", "nope": 1}),
        json.dumps({"lease_id": "L", "result": 5}),
        json.dumps({"lease_id": "L", "output": 5}),
        json.dumps({"lease_id": "L", "usage": {"inputTokens": -1}}),
        json.dumps({"lease_id": "L", "usage": {"inputTokens": "1"}}),
        json.dumps({"lease_id": "L", "usage": {"costUsd": -0.5}}),
        '{"lease_id": "L", "result": {"data": 1e309}}',
        '{"lease_id": "\\u0000"}',
        json.dumps({"lease_id": "not-the-lease", "result": {}}),
    ],
    "heartbeat": ["", "{}", json.dumps({"lease_id": "L", "x": 1}), json.dumps({"lease_id": 5})],
    "fail": [
        "{}",
        json.dumps({"lease_id": "L"}),
        json.dumps({"lease_id": "L", "error": ""}),
        json.dumps({"lease_id": "L", "error": "e", "retryable": "yes"}),
        json.dumps({"lease_id": "not-the-lease", "error": "e"}),
    ],
}


@pytest.mark.parametrize(
    ("call", "body"), [(call, body) for call, bodies in REFUSED.items() for body in bodies]
)
def test_a_refused_call_gets_the_endpoints_answer(call: str, body: str) -> None:
    # given a claimed task, and a key
    cluster_id = running()
    task_id, lease_id = claimed(cluster_id)
    _, key = api_key_create(name="agent")
    body = body.replace('"L"', json.dumps(lease_id))
    django = Counting()
    # when the same body is sent through the route and through Django
    ours = through_route(path(task_id, call), body, django, key=key)
    theirs = ApiClient(key).post(path(task_id, call), raw=body)
    # then the answers are the same, Django never saw the route's request, and nothing moved
    same_answer(ours, theirs)
    assert ours.status_code in (400, 409, 422)
    assert django.calls == 0
    assert task_get(task_id=task_id).state == "claimed"


@pytest.mark.parametrize("case", ["unknown task", "another cluster's key", "bad key"])
@pytest.mark.parametrize("call", ["complete", "heartbeat", "fail"])
def test_a_refused_caller_gets_the_endpoints_answer(case: str, call: str) -> None:
    cluster_id = running()
    cluster_create(cluster_id="c2")
    task_id, lease_id = claimed(cluster_id)
    _, key = api_key_create(name="agent", cluster_id="c2" if case != "unknown task" else None)
    if case == "bad key":
        key = "zsk_nothing_here"
    target = "task_nope" if case == "unknown task" else task_id
    body = json.dumps(
        {"lease_id": lease_id, "error": "e"} if call == "fail" else {"lease_id": lease_id}
    )
    django = Counting()
    ours = through_route(path(target, call), body, django, key=key)
    theirs = ApiClient(key).post(path(target, call), raw=body)
    same_answer(ours, theirs)
    assert ours.status_code in (401, 403, 404)
    assert django.calls == 0
    assert task_get(task_id=task_id).state == "claimed"


def without_moments(value: Any) -> Any:
    """The answer without what differs between two tasks: ids, sequences, times, leases."""
    varying = {
        "id",
        "task_id",
        "sequence",
        "timestamp",
        "created_at",
        "claimed_at",
        "finished_at",
        "lease_expires_at",
        "agent_id",
        "agent",
        "sender",
        "build_id",
        "taskId",
        "text",
    }
    if isinstance(value, dict):
        return {k: (k if k in varying else without_moments(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [without_moments(v) for v in value]
    return value


def test_a_completion_is_stored_and_answered_as_the_endpoint_does() -> None:
    # given two claimed tasks of two agents
    cluster_id = running(agents=2)
    first, first_lease = claimed(cluster_id)
    second, second_lease = claimed(cluster_id)
    _, key = api_key_create(name="agent")
    sent = {
        "result": {"summary": "ok", "n": [1, {"x": None}]},
        "output": "line\n",
        "usage": {"inputTokens": 3, "outputTokens": 4, "model": "m", "costUsd": 0.5},
    }
    django = Counting()
    # when one completes through the route, the other through Django
    body = json.dumps({**sent, "lease_id": first_lease})
    ours = through_route(path(first, "complete"), body, django, key=key)
    theirs = ApiClient(key).post(path(second, "complete"), {**sent, "lease_id": second_lease})
    # then both answers have the same shape and values but for the task's own
    assert ours.status_code == theirs.status_code == 200
    mine, other = ours.json(), theirs.json()
    assert without_moments(mine) == without_moments(other)
    assert [m["topic"] for m in mine["messages"]] == [
        "TOKEN_USAGE",
        "AGENT_LIFECYCLE",
        "AGENT_SCHEMA_WARNING",
    ]
    assert mine["task"]["state"] == "completed"
    assert mine["task"]["result"] == sent["result"]
    stored = {m.id: m.to_wire() for m in message_query(cluster_id=cluster_id)}
    assert [stored[m["id"]] for m in mine["messages"]] == mine["messages"]
    # the same completion again: the same answer, as Django gives it; another body: the conflict
    same_answer(
        through_route(path(first, "complete"), body, django, key=key),
        ApiClient(key).post(path(first, "complete"), raw=body),
    )
    clash = json.dumps({**sent, "lease_id": first_lease, "result": {"summary": "other"}})
    same_answer(
        through_route(path(first, "complete"), clash, django, key=key),
        ApiClient(key).post(path(first, "complete"), raw=clash),
    )
    assert django.calls == 0


@pytest.mark.parametrize("call", ["heartbeat", "fail"])
def test_a_heartbeat_and_a_failure_are_answered_as_the_endpoints_do(call: str) -> None:
    cluster_id = running(agents=2)
    first, first_lease = claimed(cluster_id)
    second, second_lease = claimed(cluster_id)
    _, key = api_key_create(name="agent")
    extra = {"error": "it broke", "retryable": True} if call == "fail" else {}
    django = Counting()
    ours = through_route(
        path(first, call), json.dumps({"lease_id": first_lease, **extra}), django, key=key
    )
    theirs = ApiClient(key).post(path(second, call), {"lease_id": second_lease, **extra})
    assert ours.status_code == theirs.status_code == 200
    assert without_moments(ours.json()) == without_moments(theirs.json())
    assert ours.json() == task_get(task_id=first).to_wire() | {
        k: v for k, v in ours.json().items() if k not in task_get(task_id=first).to_wire()
    }
    assert task_get(task_id=first).state == ("claimed" if call == "heartbeat" else "queued")
    assert django.calls == 0


def test_a_refused_result_fails_the_attempt_as_the_endpoint_does() -> None:
    cluster_id = running(agents=2)
    first, first_lease = claimed(cluster_id)
    second, second_lease = claimed(cluster_id)
    _, key = api_key_create(name="agent")
    ours = through_route(
        path(first, "complete"),
        json.dumps({"lease_id": first_lease, "result": "not json"}),
        Counting(),
        key=key,
    )
    theirs = ApiClient(key).post(
        path(second, "complete"), {"lease_id": second_lease, "result": "not json"}
    )
    assert ours.status_code == theirs.status_code == 422
    assert without_moments(ours.json()) == without_moments(json.loads(theirs.content))
    assert task_get(task_id=first).state == task_get(task_id=second).state == "queued"


def test_other_requests_go_on_to_django() -> None:
    cluster_id = running()
    task_id, lease_id = claimed(cluster_id)
    _, key = api_key_create(name="agent")
    body = json.dumps({"lease_id": lease_id})
    for other in (
        path(task_id, "heartbeat") + "?x=1",
        path(task_id, "heartbeat") + "/",
        path(task_id, "output"),
        f"/api/v1/tasks/{task_id}",
    ):
        django = Counting()
        through_route(other, body, django, key=key)
        assert django.calls == 1, other


def test_the_rate_limit_counts_the_routes_calls() -> None:
    cluster_id = running()
    task_id, lease_id = claimed(cluster_id)
    _, key = api_key_create(name="agent")
    body = json.dumps({"lease_id": lease_id})
    with override_settings(API_RATE_LIMIT="1/m"):
        assert (
            through_route(path(task_id, "heartbeat"), body, Counting(), key=key).status_code == 200
        )
        limited = through_route(path(task_id, "heartbeat"), body, Counting(), key=key)
    assert limited.status_code == 429
    assert limited.json() == {"code": "rate_limited", "message": "Too many requests."}
