"""The request-size guard: a body over ``API_MAX_BODY_BYTES`` is refused before it is read.

An ASGI middleware in front of Django, because Django reads the whole body before any of its
own middleware runs: a declared ``Content-Length`` over the limit is answered 413 at once, and
a body without one (chunked) is counted as it arrives and refused as soon as it passes the
limit. Nothing is parsed, so a server refusing huge bodies stays responsive.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

Scope = dict[str, Any]
Message = Any
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class RequestBodyLimit:
    """Wraps an ASGI app; HTTP requests with a body over the limit get 413."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = int(settings.API_MAX_BODY_BYTES)
        declared = _content_length(scope)
        if declared is not None:
            # The server delivers exactly the declared bytes: the header is the whole check.
            if declared > limit:
                await _refuse(scope, send, limit)
            else:
                await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > limit:
                await _refuse(scope, send, limit)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(messages, receive), send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """The messages already read, then whatever the server sends next (a disconnect)."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _refuse(scope: Scope, send: Send, limit: int) -> None:
    message = f"the request body is larger than {limit} bytes"
    if str(scope.get("path", "")).startswith("/api/"):
        body = json.dumps({"code": "too_large", "message": message}).encode()
        content_type = b"application/json"
    else:
        body = message.encode()
        content_type = b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                # The rest of the body is not read: the connection cannot carry another request.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
