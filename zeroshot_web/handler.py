"""Django's ASGI handler, with a synchronous view's request on a long-lived thread, in one
thread hand-off.

Django serves a request under ASGI through its middleware chain in async mode. Ours holds
middlewares that are synchronous only (the project's four, whitenoise), so Django runs the outer
part of the chain on a thread, comes back to the event loop for the inner part
(``async_to_sync``), and goes to a thread again for a synchronous view: three hand-offs, each a
copy of the context, a future and a loop wake-up, where one does the work (docs/decisions/0216).
The dashboard's pages are synchronous views.

``SyncViewHandler`` resolves the path first. When its view is synchronous, the whole request
runs in one hand-off through a second handler whose chain is loaded in sync mode, as the WSGI
handler loads it: the same middlewares, in the same order. Any other request (an async view, a
path no view answers) goes through Django's async chain unchanged.

Django also gives every request a thread of its own: a new one, started for its first
thread-sensitive call and joined by another new one after it. A thread's first query opens its
database connection, so on SQLite every page opened the file again, ran its PRAGMAs and
prepared every statement anew. A synchronous view's request borrows one of ``SyncViewThreads``
instead, threads that live as long as the server and keep their connection; all of the
request's thread-sensitive work (the view, ``request_started`` and ``request_finished``)
runs on the thread it borrowed, as it ran on its own before (docs/decisions/0310).

A synchronous view's streamed answer (an export) is read from its iterator one part at a time
on that same thread, and sent as it comes; Django's handler would first read all of it into
memory.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from asgiref.sync import ThreadSensitiveContext, iscoroutinefunction, sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from django.urls import Resolver404, get_resolver


class SyncViewThreads:
    """Up to ``size`` threads, each an executor of one worker, lent to one request at a time.

    A thread is started the first time none is free, up to ``size``; past that, a request
    waits, in arrival order, for one to be given back. Lent and given back on the event loop.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("SyncViewThreads needs at least one thread")
        self.size = size
        self.started = 0
        self._free: deque[ThreadPoolExecutor] = deque()
        self._waiting: deque[asyncio.Future[ThreadPoolExecutor]] = deque()

    async def borrow(self) -> ThreadPoolExecutor:
        if self._free:
            return self._free.pop()
        if self.started < self.size:
            self.started += 1
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix="sync-view")
        waiter: asyncio.Future[ThreadPoolExecutor] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give_back(waiter.result())  # lent as it was cancelled: pass it on
            raise

    def give_back(self, thread: ThreadPoolExecutor) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(thread)
                return
        self._free.append(thread)


class SyncViewHandler(ASGIHandler):
    """``ASGIHandler`` that answers a synchronous view's request on a long-lived thread, in one
    thread hand-off."""

    def __init__(self) -> None:
        super().__init__()
        self._sync = BaseHandler()
        self._sync.load_middleware(is_async=False)
        self._in_one_hop = sync_to_async(self._sync.get_response, thread_sensitive=True)
        self.threads = SyncViewThreads(settings.SYNC_VIEW_THREADS)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not _sync_view(_path_info(scope)):
            await super().__call__(scope, receive, send)
            return
        thread = await self.threads.borrow()
        try:
            # Every thread-sensitive call of the request goes to the borrowed thread; the context
            # leaves the thread running (asgiref's ``ThreadSensitiveContext(executor=...)``).
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send)
        finally:
            self.threads.give_back(thread)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        if not _sync_view(request.path_info):
            return await super().get_response_async(request)
        response: HttpResponseBase = await self._in_one_hop(request)
        if isinstance(response, StreamingHttpResponse) and not response.is_async:
            parts = cast(Iterator[bytes], response.streaming_content)
            response.streaming_content = _read_on_the_thread(parts)
        return response


async def _read_on_the_thread(parts: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A synchronous iterator's parts, each read by a thread-sensitive call: on the thread the
    request borrowed, where its view ran (and its database connection is). The response still
    closes the iterator when it is closed, as Django does."""
    read = sync_to_async(_next_part, thread_sensitive=True)
    while (part := await read(parts)) is not None:
        yield part


def _next_part(parts: Iterator[bytes]) -> bytes | None:
    return next(parts, None)


def _path_info(scope: Mapping[str, Any]) -> str:
    """The path Django resolves for ``scope`` (``ASGIRequest.path_info``)."""
    prefix = get_script_prefix(scope)
    path: str = scope["path"]
    return path.removeprefix(prefix) if prefix else path


def _sync_view(path: str) -> bool:
    """Whether the view ``path`` resolves to is a synchronous function (no middleware here
    sets ``request.urlconf``: the project's URLconf decides)."""
    try:
        match = get_resolver(settings.ROOT_URLCONF).resolve(path)
    except Resolver404:
        return False
    return not iscoroutinefunction(match.func)
