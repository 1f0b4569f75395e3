"""Read-your-writes (issue 17, item 13): a read that depends on the pipeline — the snapshot, a
context build "now" — reflects every message whose publish has returned, against a real server
whose pipeline runs in its worker threads, as in production."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from ledger.interfaces import api_key_create, cluster_create
from tests.live_server import LiveServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timed]

PUBLISHERS = 8
ROUNDS = 125  # 8 x 125 = 1,000 publishes, each read back twice (on one server)
READER = {
    "id": "reader",
    "role": "implementation",
    "prompt": "Read the plan.",
    "contextStrategy": {"sources": [{"topic": "STATE_SNAPSHOT", "amount": 1}]},
}


@pytest.fixture
def servers(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[LiveServer]]:
    with ExitStack() as stack:
        started = []
        for n in range(request.param):
            (tmp_path / str(n)).mkdir()
            started.append(stack.enter_context(LiveServer(tmp_path / str(n))))
        yield started


@pytest.mark.parametrize(
    ("servers", "rounds"),
    [(1, ROUNDS), (2, 25)],
    ids=["one server", "publish to one, read from another"],
    indirect=["servers"],
)
def test_each_publish_is_in_the_snapshot_and_the_build_read_right_after_it(
    servers: list[LiveServer], rounds: int
) -> None:
    # given eight clusters, one per publisher, and a key; with two servers (their own pipelines
    # each), each publish goes to the first and each read to the last
    publish_to, read_from = servers[0], servers[-1]
    clusters = [cluster_create(cluster_id=f"ryw-{n}").id for n in range(PUBLISHERS)]
    _, key = api_key_create(name="publishers")
    stale: list[str] = []
    failures: list[str] = []

    def publisher(cluster_id: str) -> None:
        base = f"/api/v1/clusters/{cluster_id}"
        auth = {"Authorization": f"Bearer {key}"}
        with (
            httpx.Client(base_url=publish_to.url, headers=auth, timeout=30) as writer,
            httpx.Client(base_url=read_from.url, headers=auth, timeout=30) as client,
        ):
            for n in range(1, rounds + 1):
                plan = f"plan-{n:04d}."
                # when a plan is published, and as soon as its 201 arrives …
                published = writer.post(
                    f"{base}/messages",
                    json={"topic": "PLAN_READY", "sender": "planner", "content": {"text": plan}},
                )
                if published.status_code != 201:
                    failures.append(f"publish {published.status_code} {published.text[:200]}")
                    return
                # … the snapshot is read, and a context is built from it
                snapshot = client.get(f"{base}/snapshot")
                built = client.post(
                    f"{base}/context", json={"agent_id": "reader", "agent": READER, "preview": True}
                )
                if snapshot.status_code not in (200, 404) or built.status_code != 200:
                    failures.append(f"reads {snapshot.status_code} {built.status_code}")
                    return
                # (404: no snapshot yet, as stale as an older one)
                seen = (
                    snapshot.json()["content"]["data"]["plan"]["text"]
                    if (snapshot.status_code == 200)
                    else None
                )
                if seen != plan:
                    stale.append(f"{cluster_id} snapshot: {seen} after publishing {plan}")
                if plan not in built.json()["context"]:
                    stale.append(f"{cluster_id} build: without {plan}")

    threads = [threading.Thread(target=publisher, args=(cid,)) for cid in clusters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    # then every read saw the publish before it: never stale
    assert not any(thread.is_alive() for thread in threads)
    assert failures == [], read_from.log_tail()
    assert stale == [], f"{len(stale)} stale reads of {PUBLISHERS * rounds}: {stale[:5]}"
