"""Requests per API key on the agent API: a fixed-window counter in Django's cache.

Plugged into Ninja's throttling, which answers a refused request with 429 and ``Retry-After``
(the seconds until the window ends). Each request adds one to the key's counter of the
current window with the cache's atomic increment: in Redis (``REDIS_URL``) every server
process counts into the same counter; without Redis each process counts alone. Why this and
not Ninja's own ``SimpleRateThrottle``: docs/decisions/0062-rate-limits.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio
from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, caches
from django.core.cache.backends.redis import RedisCache
from django.http import HttpRequest
from ninja.throttling import BaseThrottle
from redis.exceptions import NoScriptError

from ledger.keys import ApiKeyIdentity

# The counter counted up, and given its expiry when this made it: one command, atomic.
COUNT_LUA = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then
    redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return count
"""
COUNT_SHA = hashlib.sha1(COUNT_LUA.encode()).hexdigest()

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
    window = _window(identity, rate)
    count = _count(window.key, window.timeout)
    return count <= window.limit, window.left


async def rate_count_on_loop(identity: ApiKeyIdentity) -> tuple[bool, float | None]:
    """``rate_count`` for a caller on an event loop, without a thread: in Redis the count is
    awaited on the loop's own client (the same counter, one round trip); the process's memory
    is counted in at once."""
    rate = settings.API_RATE_LIMIT
    backend = caches[DEFAULT_CACHE_ALIAS]
    if not rate or not isinstance(backend, RedisCache):
        return rate_count(identity)
    window = _window(identity, rate)
    stored_key = backend.make_and_validate_key(window.key)
    client = _loop_client(backend)
    try:
        count = await client.evalsha(COUNT_SHA, 1, stored_key, window.timeout)
    except NoScriptError:
        count = await client.eval(COUNT_LUA, 1, stored_key, window.timeout)
    return int(count) <= window.limit, window.left


@dataclass(frozen=True, slots=True)
class _Window:
    """The counter of a key's current window: its cache key, how long it lives, the requests
    it allows, and the seconds until the window ends."""

    key: str
    timeout: int
    limit: int
    left: float


def _window(identity: ApiKeyIdentity, rate: str) -> _Window:
    limit, seconds = rate_parse(rate)
    now = time.time()
    window = int(now // seconds)
    return _Window(
        key=f"ratelimit:{identity.prefix}:{seconds}:{window}",
        # A little longer than the window, so that a counter never vanishes inside it.
        timeout=seconds + 1,
        limit=limit,
        left=(window + 1) * seconds - now,
    )


def _count(key: str, timeout: int) -> int:
    """Add one to the counter ``key`` of the cache, made with ``timeout`` if it is new.

    In Redis, one round trip on a connection kept for the process (``_redis_client``): a script
    counts up and gives a new counter its expiry (``COUNT_LUA``). The cache's own ``add`` then
    ``incr`` cost three round trips (``incr`` asks whether the key exists first), on a new
    connection per request: 1.25 ms of CPU a request, 0.06 ms now
    (docs/decisions/0231-rate-limit-in-one-round-trip.md). The key and the stored integer are
    the cache's own, so processes counting either way count into the same counter.
    """
    backend = caches[DEFAULT_CACHE_ALIAS]
    if isinstance(backend, RedisCache):
        stored_key = backend.make_and_validate_key(key)
        client = _redis_client(backend)
        try:
            count = client.evalsha(COUNT_SHA, 1, stored_key, timeout)
        except NoScriptError:
            count = client.eval(COUNT_LUA, 1, stored_key, timeout)
        return int(count)
    if backend.add(key, 1, timeout=timeout):
        return 1
    try:
        return int(backend.incr(key))
    except ValueError:  # expired between add and incr: this request opens a window
        backend.set(key, 1, timeout=timeout)
        return 1


# The Redis client of each cache's servers, kept for the process: Django makes a cache backend
# per request under ASGI (its handle lives in the request's context), and each of those a
# connection pool of its own, so the cache's own client opened a new connection to Redis for
# every request. redis-py's client and pool are shared safely by threads, and a forked child's
# pool opens connections of its own.
_clients: dict[tuple[str, ...], Any] = {}
_clients_lock = threading.Lock()


def _redis_client(backend: RedisCache) -> Any:
    servers = tuple(backend._servers)  # type: ignore[attr-defined]
    client = _clients.get(servers)
    if client is None:
        with _clients_lock:
            made = backend._cache.get_client(write=True)  # type: ignore[attr-defined]
            client = _clients.setdefault(servers, made)
    return client


# The asyncio Redis client of each event loop and cache servers (a client is bound to its loop).
_loop_clients: dict[tuple[asyncio.AbstractEventLoop, tuple[str, ...]], Any] = {}


def _loop_client(backend: RedisCache) -> Any:
    servers = tuple(backend._servers)  # type: ignore[attr-defined]
    loop = asyncio.get_running_loop()
    client = _loop_clients.get((loop, servers))
    if client is None:
        # Clients of loops that are gone (a test's) have nothing to answer any more.
        for gone in [key for key in _loop_clients if key[0].is_closed()]:
            del _loop_clients[gone]
        # Django writes to the first server of a cache's location.
        client = _loop_clients[(loop, servers)] = redis.asyncio.Redis.from_url(servers[0])
    return client


def retry_after(wait: float) -> float:
    """The ``Retry-After`` of a refused request: whole seconds, at least one."""
    return max(1.0, math.ceil(wait))
