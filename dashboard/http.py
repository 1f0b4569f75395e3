"""Requests as the dashboard's views see them, and the one choice between a page and a region.

Each page is one template whose ``{% partialdef %}`` regions are rendered alone for htmx swaps
(``page.html#region``); a history-restore request gets the whole page again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request after django-htmx's middleware has added ``htmx``."""

    htmx: HtmxDetails


def wants_region(request: HtmxHttpRequest) -> bool:
    """Whether htmx asked to swap one region (a history restore wants the whole page)."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def render_page_or_region(
    request: HtmxHttpRequest,
    page: str,
    *,
    region: str,
    context: Mapping[str, Any],
    page_context: Callable[[], Mapping[str, Any]],
) -> HttpResponse:
    """Render ``page#region`` for an htmx swap, else the whole page with ``page_context()`` too.

    ``page_context`` holds what only the parts of the page outside the region need, so a swap
    never pays for it.
    """
    if wants_region(request):
        return render(request, f"{page}#{region}", context)
    return render(request, page, {**context, **page_context()})
