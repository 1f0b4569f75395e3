"""Long-polling claims: they wake when a task is queued and hold no database connection."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, connections
from django.test import AsyncClient

from ledger.interfaces import MessageDraft, cluster_create, message_publish
from ledger.keys import api_key_create

pytestmark = pytest.mark.django_db(transaction=True)


def running_cluster() -> str:
    worker = {
        "id": "worker",
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": "GO"}],
    }
    return cluster_create(cluster_id="poll", config={"agents": [worker]}, state="running").id


def long_poll(key: str, wait: float, into: list[Any]) -> None:
    """Claim with ``wait`` from another thread, as a worker's request would."""
    import asyncio

    async def call() -> Any:
        return await AsyncClient().post(
            "/api/v1/tasks/claim",
            {"wait": wait},
            content_type="application/json",
            headers={"Authorization": f"Bearer {key}"},
        )

    try:
        into.append(asyncio.run(call()))
    finally:
        connections.close_all()


def test_a_waiting_claim_wakes_when_a_task_is_queued(db: None) -> None:
    # given a worker waiting for work
    cluster_id = running_cluster()
    _, key = api_key_create(name="w")
    answers: list[Any] = []
    poller = threading.Thread(target=long_poll, args=(key, 20, answers))
    started = time.monotonic()
    poller.start()
    time.sleep(0.3)
    # when a trigger arrives
    message_publish(cluster_id=cluster_id, draft=MessageDraft(topic="GO", sender="system"))
    poller.join(25)
    # then the claim returns with the task, long before its wait is over
    assert time.monotonic() - started < 10
    [answer] = answers
    assert answer.status_code == 200
    assert answer.json()["task"]["agent_id"] == "worker"


def test_an_empty_wait_ends_with_204(db: None) -> None:
    _, key = api_key_create(name="w")
    answers: list[Any] = []
    long_poll(key, 0.5, answers)
    assert answers[0].status_code == 204


@pytest.mark.postgres_only
def test_a_waiting_claim_holds_no_database_connection(on_postgres: bool) -> None:
    if not on_postgres:
        pytest.skip("PostgreSQL run only: counts the server's connections")
    # given the connections open before a worker starts waiting
    _, key = api_key_create(name="w")
    count_sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"

    def connections_now() -> int:
        with connection.cursor() as cursor:
            cursor.execute(count_sql)
            return int(cursor.fetchone()[0])

    before = connections_now()
    answers: list[Any] = []
    poller = threading.Thread(target=long_poll, args=(key, 3, answers))
    # when it waits three seconds for work that never comes
    poller.start()
    during = []
    while poller.is_alive():
        during.append(connections_now())
        time.sleep(0.1)
    poller.join()
    # then no connection was held through the wait (one may open for a look, every second)
    assert answers[0].status_code == 204
    assert len(during) > 10
    held = sorted(during)[len(during) // 2]
    assert held <= before
