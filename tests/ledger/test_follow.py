"""Following a live zeroshot ledger: new rows reach our ledger and the websocket."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from ledger.importing import zeroshot_follow, zeroshot_import
from ledger.keys import api_key_create
from ledger.records import MessageRecord
from ledger.selectors import message_tail
from tests.communicators import CONNECT_TIMEOUT
from zeroshot_web.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

CLUSTER = "tidal-ember-5"
INSERT = "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"


def row(i: int) -> tuple[Any, ...]:
    data = '{"event":"TASK_STARTED"}'
    return (
        f"msg_{i:032x}",
        1000 + i,
        "AGENT_LIFECYCLE",
        "worker",
        "system",
        f"r{i}",
        data,
        None,
        CLUSTER,
    )


def live_ledger(folder: Path, rows: int) -> sqlite3.Connection:
    """A ledger in WAL mode with ``rows`` rows and its writer still open, like zeroshot's."""
    conn = sqlite3.connect(folder / f"{CLUSTER}.db", check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL").fetchall()
    from ledger.zeroshot import MESSAGES_DDL, SEQUENCE_DDL

    conn.executescript(MESSAGES_DDL + SEQUENCE_DDL)
    with conn:
        conn.executemany(INSERT, [row(i) for i in range(1, rows + 1)])
    return conn


def stored_ids() -> list[str]:
    return [r.id for r in message_tail(cluster_id=CLUSTER, after=0, limit=1000)]


def test_follow_imports_new_rows_and_pushes_them_to_the_websocket(tmp_path: Path) -> None:
    # given a live ledger already imported, a client on its websocket and the follower running
    writer = live_ledger(tmp_path, rows=3)
    zeroshot_import(path=tmp_path)
    _, key = api_key_create(name="watcher")
    stop = threading.Event()
    seen: list[MessageRecord] = []
    follow = database_sync_to_async(zeroshot_follow, thread_sensitive=False)

    async def scenario() -> list[dict[str, Any]]:
        client = WebsocketCommunicator(application, f"/ws/clusters/{CLUSTER}/?key={key}")
        connected, _ = await client.connect(timeout=CONNECT_TIMEOUT)
        assert connected
        task = asyncio.ensure_future(
            follow(path=tmp_path, poll_interval=0.05, stop=stop, on_message=seen.extend)
        )
        try:
            events = []
            for i in range(4, 9):
                # when zeroshot appends rows one at a time, one of them after a checkpoint
                with writer:
                    writer.execute(INSERT, row(i))
                if i == 6:
                    writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                events.append(await client.receive_json_from(timeout=5))
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=10)
            await client.disconnect()
        return events

    try:
        events = asyncio.run(scenario())
    finally:
        writer.close()

    # then
    expected = [f"msg_{i:032x}" for i in range(1, 9)]
    assert stored_ids() == expected
    assert [e["data"]["id"] for e in events] == expected[3:]
    assert [e["data"]["sequence"] for e in events] == ["4", "5", "6", "7", "8"]
    assert events[0]["data"]["content"] == {"text": "r4", "data": {"event": "TASK_STARTED"}}
    # Row 4 may land before the follower's first import, which reports no messages one by one.
    assert [r.id for r in seen][-4:] == expected[4:]


def wait_for_messages(count: int, *, seconds: float = 5) -> None:
    for _ in range(int(seconds / 0.02)):
        if len(stored_ids()) >= count:
            return
        threading.Event().wait(0.02)


def test_follow_starts_with_an_import_and_stops_cleanly(tmp_path: Path) -> None:
    # given a ledger never imported
    writer = live_ledger(tmp_path, rows=2)
    stop = threading.Event()
    results: list[Any] = []

    def run() -> None:
        try:
            results.append(
                zeroshot_follow(path=tmp_path / f"{CLUSTER}.db", poll_interval=0.02, stop=stop)
            )
        finally:
            from django.db import connection

            connection.close()

    thread = threading.Thread(target=run)

    # when
    thread.start()
    try:
        wait_for_messages(2)
        with writer:
            writer.executemany(INSERT, [row(3), row(4)])
        wait_for_messages(4)
    finally:
        stop.set()
        thread.join(timeout=10)
        writer.close()

    # then
    assert not thread.is_alive()
    assert stored_ids() == [f"msg_{i:032x}" for i in range(1, 5)]
    assert [(r.imported, r.created) for r in results[0].ledgers] == [(2, True)]
