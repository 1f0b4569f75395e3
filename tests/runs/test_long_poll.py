"""Long-polling claims: they wake when a task is queued and hold no database connection."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from django.db import connection, connections
from django.test import AsyncClient
from django.test.utils import CaptureQueriesContext

from ledger.interfaces import MessageDraft, cluster_create, message_publish
from ledger.keys import api_key_create
from runs.models import Runner, Task
from runs.waiting import ClaimFilter, claim_waiting, claim_watch, claims_stop_waiting

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


@pytest.mark.parametrize("waits", [False, True])
def test_a_claim_records_its_runner_once_in_the_claim(
    waits: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a task to claim, and the claim's database work run in order on this thread
    running_cluster()
    message_publish(cluster_id="poll", draft=MessageDraft(topic="GO", sender="system"))
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    statements: list[str] = []

    async def claim() -> Any:
        return await claim_waiting(
            wanted=ClaimFilter(cluster_id="poll"),
            wait=5 if waits else 0,
            lease_seconds=None,
            worker="r1",
            run=_captured(statements),
        )

    # when a worker claims, waiting or not, while no other claim waits
    claimed = asyncio.run(claim())
    # then it claims at once, and its runner is written once: by the statement that counts
    # the claim, not read or marked seen before it
    runner = connection.ops.quote_name(Runner._meta.db_table)
    reads = [sql for sql in statements if sql.startswith("SELECT") and runner in sql]
    assert claimed is not None
    assert reads == []
    writes = [sql for sql in statements if sql.startswith("INSERT") and runner in sql]
    assert len(writes) == 1
    assert Runner.objects.get(name="r1").claimed == 1


def test_a_claim_arriving_while_another_waits_waits_behind_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a claim waiting for work (it found none)
    running_cluster()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    first_ran: list[str] = []
    second_ran: list[str] = []

    def claim(worker: str, wait: float, ran: list[str]) -> Any:
        return claim_waiting(
            wanted=ClaimFilter(cluster_id="poll"),
            wait=wait,
            lease_seconds=None,
            worker=worker,
            run=_captured(ran),
        )

    async def waiting(count: int) -> None:
        watch = claim_watch(_captured([]))
        while watch.waiting < count:
            await asyncio.sleep(0.01)

    async def scenario() -> tuple[Any, Any]:
        first = asyncio.create_task(claim("r1", 10, first_ran))
        await waiting(1)
        # when another claim arrives, and then a task is queued
        second = asyncio.create_task(claim("r2", 1, second_ran))
        await waiting(2)
        message_publish(cluster_id="poll", draft=MessageDraft(topic="GO", sender="system"))
        return await first, await second

    first, second = asyncio.run(scenario())
    # then the claim that waited longer takes the task, and the other waited behind it: marked
    # seen before its wait, it never asked for a task itself
    assert first is not None
    assert second is None
    tasks = connection.ops.quote_name(Task._meta.db_table)
    assert not any(tasks in sql for sql in second_ran), second_ran
    assert Runner.objects.get(name="r2").claimed == 0
    assert Runner.objects.get(name="r1").claimed == 1


def test_a_stopping_server_ends_the_waiting_claims_and_later_ones_do_not_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a claim waiting 30 s for work (it found none)
    running_cluster()
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

    def claim(worker: str) -> Any:
        return claim_waiting(
            wanted=ClaimFilter(cluster_id="poll"),
            wait=30,
            lease_seconds=None,
            worker=worker,
            run=_captured([]),
        )

    async def scenario() -> tuple[Any, Any, int]:
        first = asyncio.create_task(claim("r1"))
        watch = claim_watch(_captured([]))
        while watch.waiting < 1:
            await asyncio.sleep(0.01)
        # when the server is asked to stop (its signal handler, another thread in effect)
        claims_stop_waiting(asyncio.get_running_loop())
        answered = await asyncio.wait_for(first, 5)
        # and a claim comes in afterwards
        later = await asyncio.wait_for(claim("r2"), 5)
        return answered, later, watch.waiting

    answered, later, still_waiting = asyncio.run(scenario())
    # then both are answered with no task, at once, and nothing waits
    assert answered is None
    assert later is None
    assert still_waiting == 0


def _captured(into: list[str]) -> Any:
    """A ``run`` for ``claim_waiting`` that runs on this thread and keeps the statements."""

    async def here(fn: Any) -> Any:
        with CaptureQueriesContext(connection) as ran:
            done = fn()
        into.extend(q["sql"] for q in ran.captured_queries)
        return done

    return here
