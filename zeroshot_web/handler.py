"""Django's ASGI handler, with a request's synchronous work on a thread that outlives it, and a
synchronous view's request in one thread hand-off.

Django gives every request under ASGI a thread-sensitive context of its own
(``ThreadSensitiveContext()``): its first synchronous call (``request_started``'s receivers,
the middlewares Django adapts, a view) starts a new thread, and when it ends another new thread
is started to join that one. A thread's first query opens its database connection, so on SQLite
every page and every API query opened the file again, ran its PRAGMAs and prepared every
statement anew. Here a request borrows one of ``RequestThreads`` at its first synchronous call
instead, and all of its synchronous work runs there, as it ran on its own thread before; the
thread keeps its connection for the next request (docs/decisions/0310).

Django also serves a request through its middleware chain in async mode. Ours holds
middlewares that are synchronous only (the project's four, whitenoise), so Django runs the outer
part of the chain on a thread, comes back to the event loop for the inner part
(``async_to_sync``), and goes to a thread again for a synchronous view: three hand-offs, each a
copy of the context, a future and a loop wake-up, where one does the work (docs/decisions/0216).
``SyncViewHandler`` resolves the path first. When its view is synchronous (the dashboard's
pages), the whole chain runs in one hand-off through a second handler whose chain is loaded in
sync mode, as the WSGI handler loads it: the same middlewares, in the same order. Any other
request (an async view, a path no view answers) goes through Django's async chain.

A streamed answer read from a synchronous iterator (an export, a static file WhiteNoise serves)
is read one part at a time on the request's thread, and sent as it comes; Django's handler would
first read all of it into memory (and warn).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar, cast

from asgiref.sync import ThreadSensitiveContext, iscoroutinefunction, sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from django.urls import Resolver404, get_resolver

P = ParamSpec("P")
R = TypeVar("R")


class RequestThreads:
    """Threads for requests' synchronous work, each an executor of one worker, lent to one
    request at a time; up to ``keep`` of them wait, idle, for the next requests.

    A request is never kept waiting for a thread: when none is free, a new one is started, as
    Django would, and past ``keep`` it is let go once given back (a burst of pages, or long
    polls that hold theirs while they wait, cost what they cost before, no more).
    """

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError("RequestThreads keeps at least one thread")
        self.keep = keep
        self.started = 0  # for the tests and a debugger
        self._free: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()

    def lend(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._free:
                return self._free.pop()
            self.started += 1
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def give_back(self, thread: ThreadPoolExecutor) -> None:
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append(thread)
                return
        thread.shutdown(wait=False)  # its worker ends once it has nothing left to run

    @property
    def idle(self) -> int:
        return len(self._free)


class LentThread(Executor):
    """One request's thread: borrowed from ``threads`` at the request's first synchronous call
    (a request that makes none borrows none), given back by ``release`` when it ends."""

    def __init__(self, threads: RequestThreads) -> None:
        self._threads = threads
        self._thread: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        if self._thread is None:
            self._thread = self._threads.lend()
        return self._thread.submit(fn, *args, **kwargs)

    def release(self) -> None:
        if self._thread is not None:
            self._threads.give_back(self._thread)
            self._thread = None


class SyncViewHandler(ASGIHandler):
    """``ASGIHandler`` whose requests do their synchronous work on threads that outlive them,
    and that answers a synchronous view's request in one thread hand-off."""

    def __init__(self) -> None:
        super().__init__()
        self._sync = BaseHandler()
        self._sync.load_middleware(is_async=False)
        self._in_one_hop = sync_to_async(self._sync.get_response, thread_sensitive=True)
        self.threads = RequestThreads(settings.REQUEST_THREADS)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)  # Django refuses it
            return
        thread = LentThread(self.threads)
        try:
            # Every thread-sensitive call of the request goes to its lent thread; the context
            # leaves the thread running (asgiref's ``ThreadSensitiveContext(executor=...)``).
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send)
        finally:
            thread.release()

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase
        if _sync_view(request.path_info):
            response = await self._in_one_hop(request)
        else:
            response = await super().get_response_async(request)
        if isinstance(response, StreamingHttpResponse) and not response.is_async:
            parts = cast(Iterator[bytes], response.streaming_content)
            response.streaming_content = _read_on_the_thread(parts)
        return response


async def _read_on_the_thread(parts: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A synchronous iterator's parts, each read by a thread-sensitive call: on the request's
    thread, where its view ran (and its database connection is). The response still closes the
    iterator when it is closed, as Django does."""
    read = sync_to_async(_next_part, thread_sensitive=True)
    while (part := await read(parts)) is not None:
        yield part


def _next_part(parts: Iterator[bytes]) -> bytes | None:
    return next(parts, None)


def _sync_view(path: str) -> bool:
    """Whether the view ``path`` resolves to is a synchronous function (no middleware here
    sets ``request.urlconf``: the project's URLconf decides)."""
    try:
        match = get_resolver(settings.ROOT_URLCONF).resolve(path)
    except Resolver404:
        return False
    return not iscoroutinefunction(match.func)
