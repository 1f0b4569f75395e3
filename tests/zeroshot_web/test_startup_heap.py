"""A served process leaves the objects of its start out of the garbage collector's full
collections, from its first connection on (docs/decisions/0255)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from zeroshot_web.asgi import PipelineStarter

SCOPE = {"type": "http", "method": "GET", "path": "/healthz", "query_string": b"", "headers": []}


class _Loaded:
    """Something the server's start made and keeps."""


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def _connect(starter: PipelineStarter) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    starter.app = app
    asyncio.run(starter(SCOPE, receive, send))
    return sent


def test_the_first_connection_leaves_what_the_start_keeps_out_of_the_collectors_walks() -> None:
    # given an object the start keeps, and a cycle it made and dropped
    kept = _Loaded()
    dropped = _Loaded()
    dropped.cycle = dropped  # type: ignore[attr-defined]
    gone = weakref.ref(dropped)
    del dropped
    starter = PipelineStarter(None)
    assert any(o is kept for o in gc.get_objects())

    # when the server takes its first connection
    sent = _connect(starter)

    # then the kept object is no longer walked by a collection, the dropped cycle was freed
    # rather than kept, and the request was answered
    assert gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())
    assert gone() is None
    assert sent[0]["status"] == 204


def test_later_connections_freeze_nothing_more() -> None:
    starter = PipelineStarter(None)
    _connect(starter)
    gc.unfreeze()

    made_by_a_request = _Loaded()
    _connect(starter)

    assert gc.get_freeze_count() == 0
    assert any(o is made_by_a_request for o in gc.get_objects())
