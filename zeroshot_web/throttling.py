"""Requests per API key on the agent API: a fixed-window counter in Django's cache.

Plugged into Ninja's throttling, which answers a refused request with 429 and ``Retry-After``
(the seconds until the window ends). Each request adds one to the key's counter of the
current window with the cache's atomic increment: in Redis (``REDIS_URL``) every server
process counts into the same counter; without Redis each process counts alone. Why this and
not Ninja's own ``SimpleRateThrottle``: docs/decisions/0062-rate-limits.md.
"""

from __future__ import annotations

import math
import threading
import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from ninja.throttling import BaseThrottle

from ledger.keys import ApiKeyIdentity

PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def rate_parse(rate: str) -> tuple[int, int]:
    """``"50/s"``, ``"600/m"``, ``"10/5s"`` → (requests, seconds per window)."""
    count, _, period = rate.partition("/")
    digits = period.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = period[len(digits) :] or "s"
    if unit not in PERIODS or not count.strip().isdigit() or (digits and not digits.isdigit()):
        raise ValueError(f"a rate is N/period with a period of s, m, h or d, got {rate!r}")
    requests, seconds = int(count), int(digits or 1) * PERIODS[unit]
    if requests < 1 or seconds < 1:
        raise ValueError(f"a rate needs at least one request per second or longer, got {rate!r}")
    return requests, seconds


class ApiKeyRateThrottle(BaseThrottle):
    """At most ``API_RATE_LIMIT`` requests per API key and window; off when the setting is empty.

    Signed-in operators (the dashboard) are not counted: the limit protects the server from
    agents. The setting is read on every request, so that it can be changed in tests.
    """

    def __init__(self) -> None:
        # Ninja keeps one throttle for every request and asks ``wait()`` right after a refusal
        # in the same thread: the answer for that request is kept per thread.
        self._local = threading.local()

    def allow_request(self, request: HttpRequest) -> bool:
        identity = getattr(request, "auth", None)
        if not isinstance(identity, ApiKeyIdentity):
            return True
        allowed, self._local.wait = rate_count(identity)
        return allowed

    def wait(self) -> float | None:
        wait = getattr(self._local, "wait", None)
        return retry_after(wait) if wait is not None else None


def rate_count(identity: ApiKeyIdentity) -> tuple[bool, float | None]:
    """Count one request of ``identity``: whether it is allowed, and the seconds until its
    window ends (None when there is no limit). Also used by the claim route of ``runs.asgi``."""
    rate = settings.API_RATE_LIMIT
    if not rate:
        return True, None
    limit, seconds = rate_parse(rate)
    now = time.time()
    window = int(now // seconds)
    key = f"ratelimit:{identity.prefix}:{seconds}:{window}"
    # A little longer than the window, so that a counter never vanishes inside it.
    if cache.add(key, 1, timeout=seconds + 1):
        count = 1
    else:
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add and incr: this request opens a window
            cache.set(key, 1, timeout=seconds + 1)
            count = 1
    return count <= limit, (window + 1) * seconds - now


def retry_after(wait: float) -> float:
    """The ``Retry-After`` of a refused request: whole seconds, at least one."""
    return max(1.0, math.ceil(wait))
