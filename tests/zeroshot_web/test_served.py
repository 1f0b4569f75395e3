"""The app as production serves it: the Dockerfile's command (uvicorn), in a subprocess.

A publish, a signed-in page and a websocket push go through it; a body over the limit is refused
before it is sent; a browser's offer of compressed websocket frames is declined; the spans still
queued when the server is stopped (SIGTERM) are exported on the way out (the ASGI lifespan's
shutdown), and a claim still waiting then is answered instead of cut off.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from websockets.sync.client import connect

from ledger.interfaces import cluster_create
from ledger.keys import api_key_create
from operations import tracing
from runs.models import Runner
from tests.live_server import LiveServer
from tests.operations.test_tracing import OtlpReceiver

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def key() -> str:
    return api_key_create(name="served")[1]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path) as live:
        yield live


def raw_request(port: int, head: str, timeout: float = 10) -> bytes:
    """Send ``head`` (a request's line and headers, nothing after them) and read what comes back
    until the server closes or stops talking."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head.encode())
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and answer.startswith(b"HTTP/1.1 101"):
                    break
        except TimeoutError:
            pass
    return answer


def test_the_production_command_answers_a_publish_a_page_and_a_websocket_push(
    server: LiveServer, key: str
) -> None:
    cluster_create(cluster_id="served", config={"agents": []}, state="running")
    user = get_user_model().objects.create_user("served-operator", password="served-pass-47")
    browser = Client()
    browser.force_login(user)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"

    # an agent's stream of the cluster's messages is open while a message is published
    with connect(f"ws://127.0.0.1:{server.port}/ws/clusters/served/?key={key}") as stream:
        published = httpx.post(
            f"{server.url}/api/v1/clusters/served/messages",
            headers={"Authorization": f"Bearer {key}"},
            json={"topic": "AGENT_OUTPUT", "sender": "a1", "content": {"text": "pushed-7731"}},
            timeout=30,
        )
        assert published.status_code == 201, published.text
        frame = stream.recv(timeout=15)
    assert "pushed-7731" in str(frame)
    assert json.loads(frame)["data"]["sequence"] == published.json()["sequence"]

    # and the cluster's page renders it for a signed-in operator
    page = httpx.get(f"{server.url}/clusters/served/", headers={"Cookie": cookie}, timeout=30)
    assert page.status_code == 200
    assert "pushed-7731" in page.text
    assert "Traceback" not in server.log_tail()


def test_a_body_over_the_limit_is_refused_before_it_is_sent(server: LiveServer, key: str) -> None:
    # the headers announce a terabyte; not one byte of it is sent
    answer = raw_request(
        server.port,
        "POST /api/v1/clusters/any/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {10**12}\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["code"] == "too_large"


def test_a_browser_s_offer_of_compressed_frames_is_declined(server: LiveServer, key: str) -> None:
    cluster_create(cluster_id="plain", config={"agents": []}, state="running")
    nonce = base64.b64encode(os.urandom(16)).decode()
    answer = raw_request(
        server.port,
        f"GET /ws/clusters/plain/?key={key} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {nonce}\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n",
    )
    head = answer.partition(b"\r\n\r\n")[0].decode().lower()
    assert head.startswith("http/1.1 101"), head
    assert "sec-websocket-extensions" not in head
    assert "deflate" not in head


# --- traces at shutdown --------------------------------------------------------------------------


class Flushes:
    """A span processor that only counts its flushes."""

    def __init__(self) -> None:
        self.flushed = 0

    def on_start(self, *args: Any, **kwargs: Any) -> None: ...

    def on_end(self, *args: Any) -> None: ...

    def shutdown(self) -> None: ...

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self.flushed += 1
        return True


def test_the_lifespan_starts_at_once_and_flushes_the_spans_at_shutdown() -> None:
    from zeroshot_web.asgi import application

    processor = Flushes()
    tracing.tracing_use(processor)  # type: ignore[arg-type]
    sent: list[dict[str, Any]] = []
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])

    async def receive() -> dict[str, Any]:
        message = next(messages)
        if message["type"] == "lifespan.shutdown":
            assert processor.flushed == 0  # nothing flushed while the server ran
        return message

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    try:
        asyncio.run(application({"type": "lifespan"}, receive, send))
    finally:
        tracing.tracing_use(None)
    assert sent == [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]
    assert processor.flushed == 1


def test_spans_still_queued_when_the_server_is_stopped_are_exported(
    tmp_path: Path, key: str
) -> None:
    receiver = OtlpReceiver()
    agents = [{"id": "a1", "role": "implementation", "prompt": "x", "triggers": [{"topic": "GO"}]}]
    cluster_create(cluster_id="traced", config={"agents": agents}, state="running")
    # traces on, and a batch that waits ten minutes: only a flush sends it
    env = {
        "ZEROSHOT_OTEL": "1",
        "ZEROSHOT_OTEL_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "600000",
    }
    live = LiveServer(tmp_path, env=env).start()
    try:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=live.url, headers=headers, timeout=30) as http:
            http.post(
                "/api/v1/clusters/traced/messages", json={"topic": "GO", "sender": "op"}
            ).raise_for_status()
            claim = http.post("/api/v1/tasks/claim", json={"wait": 10, "worker": "w1"})
            assert claim.status_code == 200, claim.text
        time.sleep(0.5)
        assert receiver.requests == []  # queued, not yet sent
        # when the server is stopped as a container is (SIGTERM): uvicorn shuts down, then
        # ends by the signal it caught (-15), so no exit hook (atexit) of the process runs
        assert live.stop() in (0, -signal.SIGTERM), live.log_tail()
        assert "Application shutdown complete" in live.log_tail()
        # then the claim's spans went out on its way down, from the lifespan's shutdown
        names = {span.name for _, span in receiver.spans()}
        assert {"claim", "context build"} <= names, live.log_tail()
    finally:
        live.stop()
        receiver.close()


def test_a_claim_waiting_when_the_server_is_stopped_is_answered_not_cut_off(
    tmp_path: Path, key: str
) -> None:
    # given the production command, and a runner's claim waiting for work when none is queued
    live = LiveServer(tmp_path).start()
    answers: list[httpx.Response | Exception] = []

    def claim() -> None:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=live.url, headers=headers, timeout=60) as http:
            try:
                answers.append(http.post("/api/v1/tasks/claim", json={"wait": 30, "worker": "w"}))
            except httpx.HTTPError as error:
                answers.append(error)

    waiting = threading.Thread(target=claim)
    waiting.start()
    try:
        # the claim looked once, found nothing and recorded its runner: then it waits
        while not Runner.objects.filter(name="w").exists():
            assert waiting.is_alive(), answers
            time.sleep(0.05)
        time.sleep(0.3)
        # when the server is stopped as a container is (SIGTERM)
        status = live.stop()
        waiting.join(timeout=60)
    finally:
        live.stop()
    # then the claim was answered, with no task (its runner asks again, another server), instead
    # of being cut off when the grace period ran out; the server stopped with nothing cancelled
    assert len(answers) == 1, answers
    answer = answers[0]
    assert isinstance(answer, httpx.Response), answer
    assert answer.status_code == 204, answer.text
    log = live.log_tail(200)
    assert status in (0, -signal.SIGTERM), log
    assert "timeout graceful shutdown exceeded" not in log, log
    assert "Traceback" not in log, log
