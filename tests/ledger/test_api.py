from __future__ import annotations

import itertools
import json
import re

import pytest
from django.test import Client, override_settings

from ledger.keys import api_key_create
from ledger.models import Message
from ledger.services import cluster_create
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

ERROR_KEYS = {"code", "message"}


def assert_error(response, status: int, code: str | None = None) -> dict:  # type: ignore[no-untyped-def,type-arg]
    assert response.status_code == status, response.content
    body = response.json()
    assert ERROR_KEYS <= set(body) <= {"code", "message", "details"}
    if code is not None:
        assert body["code"] == code
    return body  # type: ignore[no-any-return]


def test_publish_returns_201_with_the_stored_message(api: ApiClient, cluster: str) -> None:
    response = api.post(
        f"/api/v1/clusters/{cluster}/messages",
        {"topic": "PLAN_READY", "sender": "planner", "content": {"text": "Plan", "data": {"n": 1}}},
    )

    assert response.status_code == 201
    body = response.json()
    assert re.fullmatch(r"msg_[0-9a-f]{32}", body["id"])
    assert body["sequence"] == "1"
    assert isinstance(body["timestamp"], int)
    assert body["cluster_id"] == cluster
    assert body["receiver"] == "broadcast"
    assert body["content"] == {"text": "Plan", "data": {"n": 1}}


def test_message_without_content_has_no_content_field(api: ApiClient, cluster: str) -> None:
    body = api.post(f"/api/v1/clusters/{cluster}/messages", {"topic": "T", "sender": "a"}).json()

    assert "content" not in body
    assert body["metadata"] is None


def test_batch_of_ten_keeps_order_one_ms_apart(api: ApiClient, cluster: str) -> None:
    messages = [
        {"topic": "WORKER_PROGRESS", "sender": "w", "content": {"text": str(i)}} for i in range(10)
    ]

    response = api.post(f"/api/v1/clusters/{cluster}/messages/batch", {"messages": messages})

    assert response.status_code == 201
    items = response.json()
    assert [m["content"]["text"] for m in items] == [str(i) for i in range(10)]
    assert [int(m["sequence"]) for m in items] == list(range(1, 11))
    stamps = [m["timestamp"] for m in items]
    assert [b - a for a, b in itertools.pairwise(stamps)] == [1] * 9


def test_batch_with_one_bad_message_is_422_naming_index_and_field(
    api: ApiClient, cluster: str
) -> None:
    messages = [
        {"topic": "OK", "sender": "w"},
        {"topic": "OK", "sender": "w"},
        {"topic": "bad", "sender": "w"},
    ]

    response = api.post(f"/api/v1/clusters/{cluster}/messages/batch", {"messages": messages})

    body = assert_error(response, 422, "validation_error")
    assert "messages.2.topic" in body["message"]
    assert body["details"][0]["loc"] == ["messages", 2, "topic"]
    assert Message.objects.count() == 0


def test_idempotent_retry_stores_once_and_other_body_is_409(api: ApiClient, cluster: str) -> None:
    url = f"/api/v1/clusters/{cluster}/messages"
    body = {"topic": "T", "sender": "a", "idempotency_key": "retry-1"}

    first = api.post(url, body)
    second = api.post(url, body)
    clash = api.post(url, {**body, "sender": "b"})

    assert first.status_code == second.status_code == 201
    assert first.json() == second.json()
    assert_error(clash, 409, "conflict")
    assert Message.objects.count() == 1


def test_no_key_is_401(cluster: str) -> None:
    response = Client().get(f"/api/v1/clusters/{cluster}/messages")

    assert_error(response, 401, "unauthorized")


def test_wrong_key_is_401(cluster: str) -> None:
    response = ApiClient("zsk_000000000000_nope").get("/api/v1/clusters")

    assert_error(response, 401, "unauthorized")


def test_cluster_scoped_key_gets_403_elsewhere(cluster: str) -> None:
    other = cluster_create(cluster_id="other").id
    _, plain = api_key_create(name="scoped", cluster_id=cluster)
    scoped = ApiClient(plain)

    assert scoped.get(f"/api/v1/clusters/{cluster}/messages").status_code == 200
    assert_error(scoped.get(f"/api/v1/clusters/{other}/messages"), 403, "forbidden")
    assert_error(
        scoped.post(f"/api/v1/clusters/{other}/messages", {"topic": "T", "sender": "a"}), 403
    )
    assert [c["id"] for c in scoped.get("/api/v1/clusters").json()] == [cluster]
    assert_error(scoped.post("/api/v1/clusters", {}), 403)
    assert Message.objects.count() == 0


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ("{not json", 400),
        ('{"topic": "T"}', 422),
        ('{"topic": "T", "sender": "a", "timestamp": "soon"}', 422),
        ('{"topic": "T", "sender": "a", "timestamp": 1.5}', 422),
        ('{"topic": "T", "sender": 5}', 422),
        ('{"topic": "T", "sender": "a", "content": "text"}', 422),
        ('{"topic": "T", "sender": "a", "content": {"text": 7}}', 422),
        ('{"topic": "T", "sender": "a", "metadata": [1]}', 422),
        ('{"topic": "T", "sender": "a", "colour": "red"}', 422),
        ('{"topic": "lower", "sender": "a"}', 422),
        ('{"topic": "T", "sender": ""}', 422),
        ("[]", 422),
    ],
)
def test_bad_input_gets_the_error_shape_and_stores_nothing(
    api: ApiClient, cluster: str, raw: str, status: int
) -> None:
    response = api.post(f"/api/v1/clusters/{cluster}/messages", raw=raw)

    assert_error(response, status)
    assert Message.objects.count() == 0


@override_settings(LEDGER_MAX_TEXT_BYTES=100)
def test_oversize_text_is_413(api: ApiClient, cluster: str) -> None:
    response = api.post(
        f"/api/v1/clusters/{cluster}/messages",
        {"topic": "T", "sender": "a", "content": {"text": "x" * 101}},
    )

    body = assert_error(response, 413, "too_large")
    assert body["details"]["field"] == "content.text"
    assert Message.objects.count() == 0


def test_unknown_cluster_is_404(api: ApiClient) -> None:
    assert_error(api.get("/api/v1/clusters/nope"), 404, "not_found")
    assert_error(api.get("/api/v1/clusters/nope/messages"), 404, "not_found")
    assert_error(api.post("/api/v1/clusters/nope/messages", {"topic": "T", "sender": "a"}), 404)


def test_clusters_create_list_get(api: ApiClient) -> None:
    agents = [{"id": "worker", "role": "implementation", "prompt": "Do it"}]

    created = api.post("/api/v1/clusters", {"id": "my-run", "config": {"agents": agents}})
    generated = api.post("/api/v1/clusters", {})
    listed = api.get("/api/v1/clusters").json()
    one = api.get("/api/v1/clusters/my-run").json()

    assert created.status_code == 201
    assert created.json()["id"] == "my-run"
    assert re.fullmatch(r"[a-z]+-[a-z]+-\d+", generated.json()["id"])
    assert {c["id"] for c in listed} == {"my-run", generated.json()["id"]}
    assert one["agents"] == agents
    assert one["agent_count"] == 1
    assert one["state"] == "initializing"  # it runs its agents once started
    assert_error(api.post("/api/v1/clusters", {"id": "my-run"}), 409)
    assert_error(api.post("/api/v1/clusters", {"id": "bad id"}), 422)


def test_query_filters_and_pages_with_next_after(api: ApiClient, cluster: str) -> None:
    messages = [{"topic": "A" if i % 2 else "B", "sender": f"s{i % 3}"} for i in range(7)]
    api.post(f"/api/v1/clusters/{cluster}/messages/batch", {"messages": messages})
    url = f"/api/v1/clusters/{cluster}/messages"

    first = api.get(url, limit=3).json()
    second = api.get(url, limit=3, after=first["next_after"]).json()
    third = api.get(url, limit=3, after=second["next_after"]).json()
    topic_a = api.get(url, topic="A").json()
    sender = api.get(url, sender="s0", order="desc").json()

    assert [m["sequence"] for m in first["items"]] == ["1", "2", "3"]
    assert first["next_after"] == "3"
    assert [m["sequence"] for m in second["items"]] == ["4", "5", "6"]
    assert [m["sequence"] for m in third["items"]] == ["7"]
    assert third["next_after"] is None
    assert [m["sequence"] for m in topic_a["items"]] == ["2", "4", "6"]
    assert [m["sequence"] for m in sender["items"]] == ["7", "4", "1"]
    assert_error(api.get(url, limit=0), 422)
    assert_error(api.get(url, order="sideways"), 422)


def test_openapi_is_served(api: ApiClient) -> None:
    response = Client().get("/api/v1/openapi.json")

    assert response.status_code == 200
    paths = json.loads(response.content)["paths"]
    assert "/api/v1/clusters/{cluster_id}/messages/batch" in paths


def test_list_endpoints_have_pinned_query_counts(
    api: ApiClient,
    cluster: str,
    django_assert_num_queries,  # type: ignore[no-untyped-def]
) -> None:
    for i in range(30):
        cluster_create(cluster_id=f"c{i}")
    api.post(
        f"/api/v1/clusters/{cluster}/messages/batch",
        {"messages": [{"topic": "T", "sender": "a"}] * 50},
    )

    # key lookup + clusters
    with django_assert_num_queries(2):
        assert len(api.get("/api/v1/clusters").json()) == 31
    # key lookup + cluster exists + messages
    with django_assert_num_queries(3):
        assert (
            len(api.get(f"/api/v1/clusters/{cluster}/messages", limit=1000).json()["items"]) == 50
        )


def test_routing_misses_get_the_error_shape_too(api: ApiClient, cluster: str) -> None:
    unknown = api.get("/api/v1/no-such-thing")
    wrong_method = api.client.put(f"/api/v1/clusters/{cluster}/messages", headers=api.headers)

    assert_error(unknown, 404, "not_found")
    body = assert_error(wrong_method, 405, "method_not_allowed")
    assert "PUT" in body["message"]
    assert "POST" in wrong_method["Allow"]
