"""Database work for async views, on long-lived threads with long-lived connections.

A thread's first query opens a connection (on SQLite: the file, the PRAGMAs, Django's SQL
functions; on PostgreSQL: a connection from the pool). An async view or route that hands its
database work to ``in_database`` runs it on the event loop's executor threads, which live as long
as the server and keep their connection (``CONN_MAX_AGE``; broken or expired ones are replaced
before and after each call, as Channels does for consumers), rather than on a request's thread
(for requests that reach Django, one it borrows: zeroshot_web/handler.py).
docs/decisions/0072-async-publish.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings

P = ParamSpec("P")
R = TypeVar("R")


def in_database(fn: Callable[P, R]) -> Callable[P, Any]:
    """``fn`` as an awaitable that runs on a long-lived executor thread (with the setting
    ``DATABASE_WORK_ON_REQUEST_THREAD``, on the request's thread, as Django would)."""
    if settings.DATABASE_WORK_ON_REQUEST_THREAD:
        return sync_to_async(fn, thread_sensitive=True)
    return database_sync_to_async(fn, thread_sensitive=False)  # type: ignore[no-any-return]
