"""A tenant's schema or an agent's result cannot reach outside the server or hold it (issue 17,
items 1, 2 and 7), through the API."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from runs.models import Task
from tests.conftest import ApiClient
from tests.runs.test_tasks import agent, claim, complete, publish, running

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def http_hits() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server that records every path asked of it."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = b'{"ptr": {"enum": ["FROM-THE-NETWORK"]}}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hits
    server.shutdown()
    server.server_close()


def messages_text(done: Any) -> str:
    return str(done.content.decode())


def test_a_file_ref_in_a_schema_is_never_read(api: ApiClient, tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"ptr": {"enum": ["TOP-SECRET"]}}')
    schema = {"type": "object", "properties": {"summary": {"$ref": f"{secret.as_uri()}#/ptr"}}}
    cid = running(agent("worker", jsonSchema=schema))
    publish(cid)
    task = claim(api)["task"]

    done = complete(api, task, {"summary": "ok"})

    assert done.status_code == 200
    assert "TOP-SECRET" not in messages_text(done)
    errors = [m for m in done.json()["messages"] if m["topic"] == "AGENT_ERROR"]
    assert len(errors) == 1
    assert "points outside the schema" in errors[0]["content"]["text"]


def test_a_non_json_file_ref_is_no_500(api: ApiClient, tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("not json at all")
    cid = running(agent("worker", jsonSchema={"$ref": plain.as_uri()}))
    publish(cid)
    task = claim(api)["task"]

    done = complete(api, task, {"summary": "ok"})

    assert done.status_code == 200
    assert "not json at all" not in messages_text(done)


def test_an_http_ref_in_a_schema_is_never_fetched(
    api: ApiClient, http_hits: tuple[str, list[str]]
) -> None:
    base, hits = http_hits
    schema = {"type": "object", "properties": {"summary": {"$ref": f"{base}/s.json#/ptr"}}}
    cid = running(agent("worker", jsonSchema=schema, strictSchema=True))
    publish(cid)
    task = claim(api)["task"]

    done = complete(api, task, {"summary": "ok"})

    assert done.status_code == 200
    assert hits == []
    assert "FROM-THE-NETWORK" not in messages_text(done)


@pytest.mark.timed
def test_a_catastrophic_pattern_answers_quickly_and_others_are_served_meanwhile(
    api: ApiClient,
) -> None:
    schema = {"type": "object", "properties": {"summary": {"pattern": "^(a+)+$"}}}
    cid = running(agent("worker", jsonSchema=schema))
    publish(cid)
    task = claim(api)["task"]
    answered: dict[str, Any] = {}

    def completer() -> None:
        started = time.monotonic()
        answered["response"] = complete(api, task, {"summary": "a" * 29 + "!"})
        answered["seconds"] = time.monotonic() - started
        connection.close()

    thread = threading.Thread(target=completer)
    thread.start()
    others = []
    while thread.is_alive() or not others:
        started = time.monotonic()
        assert api.get(f"/api/v1/clusters/{cid}").status_code == 200
        others.append(time.monotonic() - started)
    thread.join()

    assert answered["seconds"] < 2.0
    assert answered["response"].status_code == 200
    warnings = [
        m for m in answered["response"].json()["messages"] if m["topic"] == "AGENT_SCHEMA_WARNING"
    ]
    assert "does not match" in str(warnings[0]["content"]["data"])
    assert max(others) < 1.0


def test_a_result_nested_past_the_parser_is_refused_not_a_500(api: ApiClient) -> None:
    cid = running(agent("worker", maxRetries=0))
    publish(cid)
    task = claim(api)["task"]

    refused = complete(api, task, "[" * 100_000)

    assert refused.status_code == 422
    assert refused.json()["code"] == "result_refused"
    assert Task.objects.get(pk=task["id"]).state == "failed"


def test_a_result_deeper_than_kept_is_refused(api: ApiClient) -> None:
    cid = running(agent("worker", maxRetries=0))
    publish(cid)
    task = claim(api)["task"]
    deep = '{"a":' * 200 + "1" + "}" * 200

    refused = complete(api, task, deep)

    assert refused.status_code == 422
    assert "nest" in refused.json()["message"]


def test_a_result_larger_than_kept_is_refused(api: ApiClient) -> None:
    cid = running(agent("worker", maxRetries=0))
    publish(cid)
    task = claim(api)["task"]

    refused = complete(api, task, {"summary": "x" * (1 << 20)})

    assert refused.status_code == 422
    assert "at most 1048576" in refused.json()["message"]


def test_schema_warnings_quote_a_large_value_only_in_part(api: ApiClient) -> None:
    schema = {"type": "object", "properties": {"summary": {"type": "integer"}}}
    cid = running(agent("worker", jsonSchema=schema))
    publish(cid)
    task = claim(api)["task"]

    done = complete(api, task, {"summary": "x" * 900_000})

    assert done.status_code == 200
    warning = next(m for m in done.json()["messages"] if m["topic"] == "AGENT_SCHEMA_WARNING")
    (error,) = warning["content"]["data"]["errors"]
    assert len(error) < 600
    assert "…" in error
    assert error.endswith("is not of type 'integer'")


def test_a_result_text_longer_than_read_is_refused(api: ApiClient) -> None:
    cid = running(agent("worker", maxRetries=0))
    publish(cid)
    task = claim(api)["task"]

    refused = complete(api, task, " " * 2_000_001 + '{"summary": "ok"}')

    assert refused.status_code == 422
    assert "at most 2000000" in refused.json()["message"]
