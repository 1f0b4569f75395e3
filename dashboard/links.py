"""Links reversed once: ``reverse()`` walks the URL patterns on every call (10 to 30 µs each), and
a cluster's page asks for the same twenty-odd links on every load (docs/decisions/0251).

``reverse_kept`` answers as ``django.urls.reverse`` does, keeping each answer per view name,
arguments, current app, script prefix and URL configuration: every input of the answer, so a
kept one is never stale. Arguments other than ``str`` and ``int`` (a model, a lazy text, an
object whose text may change) are reversed every time. A ``NoReverseMatch`` is raised every
time, never kept.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils.safestring import SafeString

# Enough for every page's links of a few hundred clusters; the oldest are dropped first.
KEPT_LINKS = 4096


# A template's literal (``{% url 'dashboard:cluster' ... %}``) is a ``SafeString``: the same text.
_KEPT_TYPES = frozenset((str, SafeString, int))


def _keepable(value: Any) -> bool:
    return type(value) in _KEPT_TYPES


def reverse_kept(
    viewname: str,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    current_app: str | None = None,
) -> str:
    """``reverse(viewname, args=args, kwargs=kwargs, current_app=current_app)``, kept."""
    args_key = tuple(args or ())
    kwargs_key = tuple(sorted((kwargs or {}).items()))
    if (
        type(viewname) not in _KEPT_TYPES
        or not (current_app is None or _keepable(current_app))
        or not all(_keepable(v) for v in args_key)
        or not all(_keepable(v) for _, v in kwargs_key)
    ):
        return reverse(viewname, args=args, kwargs=kwargs, current_app=current_app)
    urlconf = get_urlconf() or settings.ROOT_URLCONF
    return _reversed(viewname, args_key, kwargs_key, current_app, get_script_prefix(), urlconf)


@functools.lru_cache(maxsize=KEPT_LINKS)
def _reversed(
    viewname: str,
    args: tuple[Any, ...],
    kwargs: tuple[tuple[str, Any], ...],
    current_app: str | None,
    prefix: str,
    urlconf: Any,
) -> str:
    # ``prefix`` and ``urlconf`` are the thread's own, which ``reverse`` reads: they are here
    # to tell answers apart, not passed on.
    return reverse(viewname, args=list(args), kwargs=dict(kwargs), current_app=current_app)
