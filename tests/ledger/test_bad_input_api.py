"""Input that used to break a cluster or get a 500 (issue 9): each now gets a 4xx with the
error shape, stores nothing, and leaves the cluster usable. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.testing import ApplicationCommunicator, HttpCommunicator
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection
from django.test import Client, override_settings

from context.models import ContextBuild
from ledger.keys import api_key_create
from ledger.models import Cluster, Message
from ledger.services import cluster_create, now_ms
from tests.conftest import ApiClient
from zeroshot_web.asgi import application

pytestmark = pytest.mark.django_db

AGENTS = {
    "agents": [
        {
            "id": "worker",
            "role": "implementation",
            "prompt": "Do the work.",
            "triggers": [{"topic": "T", "action": "execute_task"}],
        }
    ]
}
TIMESTAMP_MAX = 253_402_300_799_999


@pytest.fixture
def agents_cluster(db: None) -> str:
    return cluster_create(cluster_id="hardened", config=AGENTS).id


def error_shape(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert {"code", "message"} <= set(body) <= {"code", "message", "details"}
    return body  # type: ignore[no-any-return]


def assert_usable(api: ApiClient, cluster: str, *, stored: int) -> None:
    """Nothing more than ``stored`` messages; publishing, querying and a recorded build work."""
    assert Message.objects.filter(cluster_id=cluster).count() == stored
    published = api.post(f"/api/v1/clusters/{cluster}/messages", {"topic": "T", "sender": "s"})
    assert published.status_code == 201, published.content
    assert published.json()["timestamp"] <= now_ms() + 1000
    assert api.get(f"/api/v1/clusters/{cluster}/messages").status_code == 200
    build = api.post(f"/api/v1/clusters/{cluster}/context", {"agent_id": "worker"})
    assert build.status_code == 200, build.content
    assert build.json()["recorded"] is True


# --- 1, 2: timestamps ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "timestamp",
    [
        2**63 - 1,  # once broke every later publish and recorded build (500)
        2**64,
        TIMESTAMP_MAX + 1,  # past year 9999: the pages could not show it
        -1,
    ],
)
def test_a_timestamp_out_of_range_is_422_single_and_batch(
    api: ApiClient, agents_cluster: str, timestamp: int
) -> None:
    single = api.post(
        f"/api/v1/clusters/{agents_cluster}/messages",
        {"topic": "T", "sender": "s", "timestamp": timestamp},
    )
    batch = api.post(
        f"/api/v1/clusters/{agents_cluster}/messages/batch",
        {
            "messages": [
                {"topic": "T", "sender": "s"},
                {"topic": "T", "sender": "s", "timestamp": timestamp},
            ]
        },
    )

    assert error_shape(single, 422)["code"] == "validation_error"
    assert "timestamp" in error_shape(batch, 422)["message"]
    assert_usable(api, agents_cluster, stored=0)


def test_a_timestamp_further_ahead_than_the_allowed_skew_is_422(
    api: ApiClient, agents_cluster: str
) -> None:
    tomorrow = now_ms() + 24 * 3600 * 1000

    response = api.post(
        f"/api/v1/clusters/{agents_cluster}/messages",
        {"topic": "T", "sender": "s", "timestamp": tomorrow},
    )

    assert "ahead of the server's clock" in error_shape(response, 422)["message"]
    assert_usable(api, agents_cluster, stored=0)


@override_settings(LEDGER_MAX_CLOCK_SKEW_MS=48 * 3600 * 1000)
def test_the_allowed_skew_is_a_setting(api: ApiClient, agents_cluster: str) -> None:
    tomorrow = now_ms() + 24 * 3600 * 1000

    response = api.post(
        f"/api/v1/clusters/{agents_cluster}/messages",
        {"topic": "T", "sender": "s", "timestamp": tomorrow},
    )

    assert response.status_code == 201
    assert response.json()["timestamp"] == tomorrow


def test_after_a_refused_far_future_timestamp_the_pages_still_show(
    api: ApiClient, agents_cluster: str
) -> None:
    api.post(
        f"/api/v1/clusters/{agents_cluster}/messages",
        {"topic": "T", "sender": "s", "timestamp": 253402300800000},
    )
    operator = Client()
    operator.force_login(get_user_model().objects.create_user("op", password="unused-pw-1"))

    assert operator.get("/").status_code == 200
    assert operator.get(f"/clusters/{agents_cluster}/").status_code == 200


# --- 5, 6, 7: strings and numbers the databases refuse -------------------------------------------

NUL = "\\u0000"
SURROGATE = "\\ud800"


def message(**fields: str) -> str:
    """A raw JSON message body; values are JSON text (escapes stay escapes)."""
    body = {"topic": '"T"', "sender": '"s"', **fields}
    return "{" + ", ".join(f'"{k}": {v}' for k, v in body.items()) + "}"


BAD_MESSAGES = {
    "NUL in sender": message(sender=f'"a{NUL}b"'),
    "NUL in receiver": message(receiver=f'"a{NUL}b"'),
    "NUL in text": message(content=f'{{"text": "a{NUL}b"}}'),
    "NUL in data": message(content=f'{{"data": {{"x": "{NUL}"}}}}'),
    "NUL in a metadata key": message(metadata=f'{{"a{NUL}": 1}}'),
    "NUL in the idempotency key": message(idempotency_key=f'"k{NUL}"'),
    "lone surrogate in text": message(content=f'{{"text": "a{SURROGATE}"}}'),
    "lone surrogate in data": message(content=f'{{"data": ["{SURROGATE}"]}}'),
    "lone surrogate in a metadata key": message(metadata=f'{{"{SURROGATE}": 1}}'),
    "NaN in data": message(content='{"data": {"x": NaN}}'),
    "Infinity in metadata": message(metadata='{"x": Infinity}'),
    "-Infinity in data": message(content='{"data": [-Infinity]}'),
    "1e309 in data": message(content='{"data": 1e309}'),
    "1e309 in metadata": message(metadata='{"big": -1e309}'),
}


@pytest.mark.parametrize("raw", BAD_MESSAGES.values(), ids=BAD_MESSAGES.keys())
def test_unstorable_strings_and_numbers_are_422_on_publish(
    api: ApiClient, agents_cluster: str, raw: str
) -> None:
    single = api.post(f"/api/v1/clusters/{agents_cluster}/messages", raw=raw)
    batch = api.post(
        f"/api/v1/clusters/{agents_cluster}/messages/batch",
        raw=f'{{"messages": [{message()}, {raw}]}}',
    )

    body = error_shape(single, 422)
    assert body["code"] == "validation_error"
    assert "CHECK constraint" not in single.content.decode()
    assert error_shape(batch, 422)["code"] == "validation_error"
    assert_usable(api, agents_cluster, stored=0)


def test_the_error_names_where_the_value_is(api: ApiClient, agents_cluster: str) -> None:
    raw = message(content=f'{{"data": {{"items": [1, {{"name": "x{NUL}"}}]}}}}')

    body = error_shape(api.post(f"/api/v1/clusters/{agents_cluster}/messages", raw=raw), 422)

    assert body["message"].startswith("body.content.data.items[1].name must not contain NUL")


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/v1/clusters/hardened/messages", {"topic": "T\x00"}),
        ("/api/v1/clusters/hardened/messages", {"sender": "a\x00b"}),
        ("/api/v1/clusters", {"search": "x\x00"}),
        ("/api/v1/clusters/hardened/builds", {"agent_id": "w\x00"}),
        ("/api/v1/clusters/hard%00ened/messages", {}),
        ("/api/v1/clusters/hard%00ened", {}),
        ("/api/v1/templates/a%00b", {}),
    ],
)
def test_nul_in_a_path_or_a_query_is_422(
    api: ApiClient, agents_cluster: str, path: str, params: dict[str, str]
) -> None:
    response = api.get(path, **params)

    assert "NUL" in error_shape(response, 422)["message"]
    assert_usable(api, agents_cluster, stored=0)


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("/api/v1/clusters/hard%00ened/messages", message()),
        ("/api/v1/clusters", f'{{"config": {{"agents": [], "note": "{NUL}"}}}}'),
        ("/api/v1/clusters", f'{{"template": "a{NUL}b"}}'),
        ("/api/v1/clusters", f'{{"id": "c{NUL}"}}'),
        (
            "/api/v1/clusters/hardened/context",
            '{"agent_id": "worker", "triggering_message": '
            f'{{"topic": "T", "sender": "s", "content": {{"text": "go{NUL}"}}}}}}',
        ),
        ("/api/v1/clusters/hardened/context", f'{{"agent_id": "work{SURROGATE}"}}'),
        ("/api/v1/strategies/validate", f'{{"contextStrategy": {{"sources": [], "x": "{NUL}"}}}}'),
        ("/api/v1/templates/validate", f'{{"template": {{"name": "{NUL}"}}}}'),
    ],
)
def test_nul_or_a_surrogate_in_any_other_body_is_422(
    api: ApiClient, agents_cluster: str, path: str, raw: str
) -> None:
    response = api.post(path, raw=raw)

    assert error_shape(response, 422)["code"] == "validation_error"
    assert Cluster.objects.count() == 1
    assert_usable(api, agents_cluster, stored=0)


# --- 8: numbers beyond their columns ------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"agent_id": "worker", "iteration": 2**31},
        {"agent_id": "worker", "iteration": 2**63},
        {"agent_id": "worker", "max_tokens": 2**31},
        {"agent_id": "worker", "as_of_sequence": 2**63},
        {"agent_id": "worker", "as_of_timestamp": 2**63},
    ],
)
def test_build_numbers_beyond_their_columns_are_422(
    api: ApiClient, agents_cluster: str, body: dict[str, Any]
) -> None:
    api.post(f"/api/v1/clusters/{agents_cluster}/messages", {"topic": "T", "sender": "s"})

    response = api.post(f"/api/v1/clusters/{agents_cluster}/context", body)

    assert error_shape(response, 422)["code"] == "validation_error"
    assert ContextBuild.objects.count() == 0
    assert_usable(api, agents_cluster, stored=1)


def test_the_largest_iteration_a_column_holds_is_recorded(
    api: ApiClient, agents_cluster: str
) -> None:
    api.post(f"/api/v1/clusters/{agents_cluster}/messages", {"topic": "T", "sender": "s"})

    response = api.post(
        f"/api/v1/clusters/{agents_cluster}/context", {"agent_id": "worker", "iteration": 2**31 - 1}
    )

    assert response.status_code == 200
    assert ContextBuild.objects.get().iteration == 2**31 - 1


@pytest.mark.parametrize(
    "params",
    [
        {"since": str(2**63)},
        {"until": "999999999999999999999"},
        {"since": str(TIMESTAMP_MAX + 1)},
        {"after": str(2**64)},
        {"limit": "0"},
        {"topic": "T" * 65},
    ],
)
def test_query_bounds_are_422(api: ApiClient, agents_cluster: str, params: dict[str, str]) -> None:
    response = api.get(f"/api/v1/clusters/{agents_cluster}/messages", **params)

    assert error_shape(response, 422)["code"] == "validation_error"


def test_builds_query_bounds_are_422(api: ApiClient, agents_cluster: str) -> None:
    response = api.get(f"/api/v1/clusters/{agents_cluster}/builds", before=str(2**64))

    assert error_shape(response, 422)["code"] == "validation_error"


# --- 9: size, batch length and depth ------------------------------------------------------------


def asgi_post(path: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    async def scenario() -> dict[str, Any]:
        communicator = HttpCommunicator(application, "POST", path, body=body, headers=headers)
        return await communicator.get_response(timeout=10)  # type: ignore[no-any-return]

    return asyncio.run(scenario())


@pytest.mark.django_db(transaction=True)
@override_settings(API_MAX_BODY_BYTES=10_000)
def test_a_declared_body_over_the_limit_is_413_before_anything_is_read(
    api_key: str, cluster: str
) -> None:
    # Declares a gigabyte and sends nothing: only the header can have been looked at.
    response = asgi_post(
        f"/api/v1/clusters/{cluster}/messages/batch",
        b"",
        [(b"content-length", b"1000000000"), (b"authorization", f"Bearer {api_key}".encode())],
    )

    assert response["status"] == 413
    assert json.loads(response["body"])["code"] == "too_large"
    assert Message.objects.count() == 0


@pytest.mark.django_db(transaction=True)
@override_settings(API_MAX_BODY_BYTES=10_000)
def test_a_chunked_body_is_counted_as_it_arrives_and_refused_past_the_limit(
    api_key: str, cluster: str
) -> None:
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "path": f"/api/v1/clusters/{cluster}/messages/batch",
        "query_string": b"",
        "headers": [
            (b"transfer-encoding", b"chunked"),
            (b"authorization", f"Bearer {api_key}".encode()),
        ],
    }

    async def scenario() -> tuple[int, dict[str, Any]]:
        communicator = ApplicationCommunicator(application, scope)
        sent = 0
        # Chunks of 4 KB keep coming; the answer must come before the body ends.
        for _ in range(100):
            await communicator.send_input(
                {"type": "http.request", "body": b" " * 4096, "more_body": True}
            )
            sent += 4096
            if not await communicator.receive_nothing(timeout=0.05):
                break
        start = await communicator.receive_output(timeout=5)
        body = await communicator.receive_output(timeout=5)
        return sent, {"status": start["status"], "body": body["body"]}

    sent, response = asyncio.run(scenario())

    assert response["status"] == 413
    assert json.loads(response["body"])["code"] == "too_large"
    assert sent < 100 * 4096
    assert Message.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_body_within_the_limit_passes_the_guard(api_key: str, cluster: str) -> None:
    body = json.dumps({"topic": "T", "sender": "s"}).encode()

    response = asgi_post(
        f"/api/v1/clusters/{cluster}/messages",
        body,
        [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", f"Bearer {api_key}".encode()),
            (b"host", b"localhost"),
        ],
    )

    assert response["status"] == 201
    assert Message.objects.count() == 1


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_a_body_over_the_limit_is_413_behind_any_server_too(
    api: ApiClient, agents_cluster: str
) -> None:
    raw = message(content=json.dumps({"text": "x" * 2000}))

    response = api.post(f"/api/v1/clusters/{agents_cluster}/messages", raw=raw)

    assert error_shape(response, 413)["code"] == "too_large"


@override_settings(LEDGER_MAX_BATCH=10)
def test_a_batch_over_the_limit_is_413_before_its_messages_are_checked(
    api: ApiClient, agents_cluster: str
) -> None:
    messages = [{"topic": "T", "sender": "s"}] * 10 + [{"topic": "bad", "sender": ""}]

    response = api.post(f"/api/v1/clusters/{agents_cluster}/messages/batch", {"messages": messages})

    body = error_shape(response, 413)
    assert body["code"] == "too_large"
    assert body["details"]["limit"] == 10
    assert_usable(api, agents_cluster, stored=0)


@pytest.mark.parametrize(("depth", "status"), [(65, 422), (100_000, 400)])
def test_json_nested_too_deeply_is_refused(
    api: ApiClient, agents_cluster: str, depth: int, status: int
) -> None:
    nested = "[" * depth + "]" * depth
    raw = message(content=f'{{"data": {nested}}}')

    response = api.post(f"/api/v1/clusters/{agents_cluster}/messages", raw=raw)

    assert error_shape(response, status)["code"] in ("validation_error", "bad_request")
    assert_usable(api, agents_cluster, stored=0)


def test_json_just_within_the_depth_limit_is_stored(api: ApiClient, agents_cluster: str) -> None:
    nested = "[" * 60 + "]" * 60
    raw = message(content=f'{{"data": {nested}}}')

    response = api.post(f"/api/v1/clusters/{agents_cluster}/messages", raw=raw)

    assert response.status_code == 201


def test_a_body_that_is_not_utf8_is_400(api: ApiClient, agents_cluster: str) -> None:
    response = api.client.post(
        f"/api/v1/clusters/{agents_cluster}/messages",
        data=b'{"topic": "T", "sender": "\xff"}',
        content_type="application/json",
        headers=api.headers,
    )

    assert error_shape(response, 400)["code"] == "bad_request"


# --- 13: the error shape everywhere, and authentication --------------------------------------


def test_a_database_failure_is_a_500_with_the_shape_and_no_database_text(
    api: ApiClient, agents_cluster: str
) -> None:
    def failing(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "ledger_cluster" in sql:
            raise DatabaseError('CHECK constraint failed: (JSON_VALID("content")) secret')
        return execute(sql, params, many, context)

    with connection.execute_wrapper(failing):
        response = api.get(f"/api/v1/clusters/{agents_cluster}")

    body = error_shape(response, 500)
    assert body["code"] == "server_error"
    assert "CHECK" not in response.content.decode()
    assert "secret" not in response.content.decode()


def test_a_duplicate_message_id_is_409_without_database_text(
    api: ApiClient, agents_cluster: str
) -> None:
    first = api.post(
        f"/api/v1/clusters/{agents_cluster}/messages", {"topic": "T", "sender": "s", "id": "m-1"}
    )
    again = api.post(
        f"/api/v1/clusters/{agents_cluster}/messages", {"topic": "T", "sender": "s", "id": "m-1"}
    )

    assert first.status_code == 201
    body = error_shape(again, 409)
    assert body["message"] == "a message with id 'm-1' already exists in the cluster"
    assert "constraint" not in again.content.decode().lower()
    assert_usable(api, agents_cluster, stored=1)


@pytest.mark.parametrize("method", ["get", "post", "put", "patch", "delete"])
def test_no_credentials_is_401_on_every_method_never_a_csrf_403(
    agents_cluster: str, method: str
) -> None:
    browser = Client(enforce_csrf_checks=True)
    # A cookie of a session that signs nobody in, as a browser may still hold.
    browser.cookies["sessionid"] = "stale-session"

    for path in (f"/api/v1/clusters/{agents_cluster}/messages", "/api/v1/clusters"):
        body = {} if method == "get" else {"data": "{}", "content_type": "application/json"}
        response = getattr(browser, method)(path, **body)
        assert response.status_code in (401, 405), (method, path, response.content)
        assert error_shape(response, response.status_code)


def test_a_signed_in_session_still_needs_its_csrf_token_to_write(agents_cluster: str) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(get_user_model().objects.create_user("op", password="unused-pw-1"))

    response = browser.post(
        f"/api/v1/clusters/{agents_cluster}/messages",
        data=json.dumps({"topic": "T", "sender": "s"}),
        content_type="application/json",
    )

    assert error_shape(response, 403)["code"] == "forbidden"
    assert Message.objects.count() == 0


def test_a_scoped_key_lists_and_reads_only_its_clusters_template(api: ApiClient) -> None:
    made = api.post("/api/v1/clusters", {"id": "from-template", "template": "single-worker"})
    assert made.status_code == 201, made.content
    _, plain = api_key_create(name="scoped", cluster_id="from-template")
    scoped = ApiClient(plain)

    listed = scoped.get("/api/v1/templates")
    everything = api.get("/api/v1/templates")

    assert [t["name"] for t in listed.json()] == ["single-worker"]
    assert len(everything.json()) > 1
    assert scoped.get("/api/v1/templates/single-worker").status_code == 200
    other = next(t["name"] for t in everything.json() if t["name"] != "single-worker")
    assert error_shape(scoped.get(f"/api/v1/templates/{other}"), 403)["code"] == "forbidden"


def test_a_key_scoped_to_a_cluster_without_template_lists_none(
    api: ApiClient, cluster: str
) -> None:
    _, plain = api_key_create(name="scoped", cluster_id=cluster)

    assert ApiClient(plain).get("/api/v1/templates").json() == []


# --- 14: rate limits ----------------------------------------------------------------------------


@override_settings(API_RATE_LIMIT="3/m")
def test_a_key_over_its_rate_gets_429_with_retry_after(cluster: str) -> None:
    _, first_key = api_key_create(name="busy")
    _, second_key = api_key_create(name="calm")
    busy, calm = ApiClient(first_key), ApiClient(second_key)

    answers = [busy.get(f"/api/v1/clusters/{cluster}/messages") for _ in range(4)]
    refused = answers[-1]

    assert [a.status_code for a in answers[:3]] == [200, 200, 200]
    assert error_shape(refused, 429)["code"] == "rate_limited"
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert calm.get(f"/api/v1/clusters/{cluster}/messages").status_code == 200
    published = busy.post(f"/api/v1/clusters/{cluster}/messages", {"topic": "T", "sender": "s"})
    assert published.status_code == 429
    assert Message.objects.count() == 0


def test_without_a_rate_there_is_no_limit(api: ApiClient, cluster: str) -> None:
    statuses = {api.get(f"/api/v1/clusters/{cluster}/messages").status_code for _ in range(60)}

    assert statuses == {200}


# --- 4: agent ids -------------------------------------------------------------------------------


@pytest.mark.parametrize("agent_id", ["team/worker", "", "x" * 65, "über", "ok\n"])
def test_a_config_whose_agent_id_breaks_spec_4_is_422_and_makes_no_cluster(
    api: ApiClient, agent_id: str
) -> None:
    config = {"agents": [{"id": "fine", "role": "r"}, {"id": agent_id, "role": "r"}]}

    response = api.post("/api/v1/clusters", {"id": "odd-agents", "config": config})

    body = error_shape(response, 422)
    assert body["message"].startswith("config.agents[1].id must be 1-64 letters")
    assert not Cluster.objects.filter(pk="odd-agents").exists()


def test_a_config_with_the_same_agent_twice_is_422(api: ApiClient) -> None:
    config = {"agents": [{"id": "w", "role": "r"}, {"id": "w", "role": "r"}]}

    response = api.post("/api/v1/clusters", {"id": "twice", "config": config})

    assert "is used by another agent" in error_shape(response, 422)["message"]
