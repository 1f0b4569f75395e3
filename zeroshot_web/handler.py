"""Django's ASGI handler, with one thread hand-off for a request whose view is synchronous.

Django serves a request under ASGI through its middleware chain in async mode. Ours holds
middlewares that are synchronous only (the project's four, whitenoise), so Django runs the outer
part of the chain on a thread, comes back to the event loop for the inner part
(``async_to_sync``), and goes to a thread again for a synchronous view: three hand-offs, each a
copy of the context, a future and a loop wake-up, where one does the work (docs/decisions/0216).
The dashboard's pages are synchronous views.

``SyncViewHandler`` resolves the path first. When its view is synchronous, the whole request
runs in one hand-off through a second handler whose chain is loaded in sync mode, as the WSGI
handler loads it: the same middlewares, in the same order, on the same thread Django's
``thread_sensitive`` calls use (so on the same database connection). Any other request (an
async view, a path no view answers) goes through Django's async chain unchanged.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.http import HttpRequest, HttpResponseBase
from django.urls import Resolver404, get_resolver


class SyncViewHandler(ASGIHandler):
    """``ASGIHandler`` that answers a synchronous view's request in one thread hand-off."""

    def __init__(self) -> None:
        super().__init__()
        self._sync = BaseHandler()
        self._sync.load_middleware(is_async=False)
        self._in_one_hop = sync_to_async(self._sync.get_response, thread_sensitive=True)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        if _sync_view(request.path_info):
            return await self._in_one_hop(request)
        return await super().get_response_async(request)


def _sync_view(path: str) -> bool:
    """Whether the view ``path`` resolves to is a synchronous function (no middleware here
    sets ``request.urlconf``: the project's URLconf decides)."""
    try:
        match = get_resolver(settings.ROOT_URLCONF).resolve(path)
    except Resolver404:
        return False
    return not iscoroutinefunction(match.func)
