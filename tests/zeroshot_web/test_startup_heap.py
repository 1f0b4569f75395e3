"""A served process leaves the objects of its start out of the garbage collector's full
collections, at the ASGI lifespan's startup (docs/decisions/0255)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from zeroshot_web.asgi import PipelineStarter

HTTP = {"type": "http", "method": "GET", "path": "/healthz", "query_string": b"", "headers": []}
LIFESPAN = {"type": "lifespan", "asgi": {"version": "3.0"}}


class _Loaded:
    """Something the server's start made and keeps."""


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def _served(scope: dict[str, Any], incoming: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``PipelineStarter`` (around an app that answers 204) sends for ``scope``."""
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(PipelineStarter(app)(scope, receive, send))
    return sent


def test_the_startup_leaves_what_the_start_keeps_out_of_the_collectors_walks() -> None:
    # given an object the start keeps, and a cycle it made and dropped
    kept = _Loaded()
    dropped = _Loaded()
    dropped.cycle = dropped  # type: ignore[attr-defined]
    gone = weakref.ref(dropped)
    del dropped
    assert any(o is kept for o in gc.get_objects())

    # when the server starts (the lifespan's startup) and later stops
    startup = _served(LIFESPAN, [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])

    # then the kept object is no longer walked by a collection, and the dropped cycle was freed
    # rather than kept
    assert gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())
    assert gone() is None
    assert [m["type"] for m in startup] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]


def test_a_connection_freezes_nothing() -> None:
    made_by_a_request = _Loaded()

    sent = _served(HTTP, [{"type": "http.request", "body": b"", "more_body": False}])

    assert sent[0]["status"] == 204
    assert gc.get_freeze_count() == 0
    assert any(o is made_by_a_request for o in gc.get_objects())
