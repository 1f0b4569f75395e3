"""A thousand waiting claims on one real server (the image's command in a subprocess): they cost
no thread, other requests stay fast, each ends on time, and a task queued meanwhile goes to one
of them."""

from __future__ import annotations

import asyncio
import json
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.interfaces import cluster_create
from ledger.keys import api_key_create
from tests.live_server import LiveServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timed]

CLAIMS = 1000
WAIT = 20  # seconds each claim waits
# Claims opened together, every RAMP_PAUSE: a thousand within eight seconds, so that a server on
# a busy machine takes them in as they come; then all of them wait together for twelve seconds.
RAMP_BATCH = 50
RAMP_PAUSE = 0.4
OTHER_EVERY = 0.05  # seconds between two other requests
FILES_NEEDED = 4 * CLAIMS + 512  # both ends of each connection, in this process and the server's


@pytest.fixture
def files() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(soft, min(hard, FILES_NEEDED))
    if wanted < FILES_NEEDED:
        pytest.skip(f"needs {FILES_NEEDED} open files, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def server(tmp_path: Path, files: None) -> Iterator[LiveServer]:
    with LiveServer(tmp_path) as live:
        yield live


async def http(
    port: int, method: str, path: str, key: str, body: Any = None, timeout: float = 60
) -> tuple[int, bytes]:
    """One request on a connection of its own; the status and the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = b"" if body is None else json.dumps(body).encode()
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode() + data)
    await writer.drain()
    try:
        answer = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count")


def test_a_thousand_waiting_claims_cost_no_thread_and_one_of_them_gets_the_task(
    server: LiveServer,
) -> None:
    # given a running cluster with nothing to do, and a server
    worker = {
        "id": "worker",
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": "GO"}],
    }
    cluster_id = cluster_create(
        cluster_id="waiting", config={"agents": [worker]}, state="running"
    ).id
    _, key = api_key_create(name="workers")
    assert server.process is not None
    port, pid = server.port, server.process.pid

    async def claim() -> tuple[int, float, bytes]:
        started = time.monotonic()
        status, body = await http(port, "POST", "/api/v1/tasks/claim", key, {"wait": WAIT})
        return status, time.monotonic() - started, body

    async def scenario() -> dict[str, Any]:
        # when a thousand workers wait for work
        ramp_started = time.monotonic()
        claims = []
        for _ in range(CLAIMS // RAMP_BATCH):
            claims += [asyncio.create_task(claim()) for _ in range(RAMP_BATCH)]
            await asyncio.sleep(RAMP_PAUSE)
        all_waiting = time.monotonic() + 0.5
        await asyncio.sleep(all_waiting - time.monotonic())
        threads = threads_of(pid)
        # and other requests are made while they all wait, and a task is queued meanwhile
        latencies: list[float] = []
        published = False
        until = ramp_started + WAIT - 0.5  # before the first claims end
        while time.monotonic() < until:
            started = time.monotonic()
            status, _ = await http(port, "GET", f"/api/v1/clusters/{cluster_id}", key)
            latencies.append(time.monotonic() - started)
            assert status == 200
            if not published and time.monotonic() > all_waiting + 2:
                draft = {"topic": "GO", "sender": "system", "content": {"text": "go"}}
                status, _ = await http(
                    port, "POST", f"/api/v1/clusters/{cluster_id}/messages", key, draft
                )
                assert status == 201
                published = True
            await asyncio.sleep(OTHER_EVERY)
        answers = await asyncio.gather(*claims, return_exceptions=True)
        return {"answers": answers, "latencies": latencies, "threads": threads}

    outcome = asyncio.run(scenario())

    # then every claim was answered (none refused), one with the task, the others 204 in time
    answers = outcome["answers"]
    failures = [a for a in answers if isinstance(a, BaseException)]
    assert failures == [], failures[:3]
    statuses = [status for status, _, _ in answers]
    assert statuses.count(200) == 1, server.log_tail()
    assert statuses.count(204) == CLAIMS - 1
    [handed] = [json.loads(body) for status, _, body in answers if status == 200]
    assert handed["task"]["agent_id"] == "worker"
    late = [elapsed for status, elapsed, _ in answers if status == 204 and elapsed > WAIT + 1]
    assert late == [], (len(late), max(late))
    # other requests stayed fast, and the waiting held no thread each
    latencies = sorted(outcome["latencies"])
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    assert len(latencies) > 50
    assert p99 < 0.1, (p99, latencies[-5:])
    assert outcome["threads"] < 60, outcome["threads"]
