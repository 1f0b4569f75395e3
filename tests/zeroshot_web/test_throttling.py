"""The API's rate-limit counter (zeroshot_web/throttling.py) in Redis: one round trip a request,
one connection a process, the cache's own counter."""

from __future__ import annotations

import asyncio
import contextvars
import os
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.core.cache import caches
from django.test import override_settings

from ledger.keys import ApiKeyIdentity
from zeroshot_web.throttling import rate_count, rate_count_on_loop

# The suite's own Redis database, never the default one that other programs use.
REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/4"
REDIS_CACHE = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
}


def identity() -> ApiKeyIdentity:
    # Redis is shared by every test run on the machine: a key prefix of our own keeps it ours.
    return ApiKeyIdentity(id=1, name="n", cluster_id=None, prefix=uuid.uuid4().hex[:12])


def a_request(fn: Callable[[], Any]) -> Any:
    """``fn`` as a request under ASGI runs it: in a context of its own, where Django makes the
    cache's backend anew."""
    return contextvars.Context().run(fn)


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The commands the Redis client sends and the sockets it opens."""
    seen: dict[str, list[str]] = {"commands": [], "connects": []}
    execute: Callable[..., Any] = redis.Redis.execute_command
    connect: Callable[..., Any] = redis.connection.Connection._connect

    def counted_command(self: redis.Redis, *args: Any, **options: Any) -> Any:
        seen["commands"].append(str(args[0]).upper())
        return execute(self, *args, **options)

    def counted_connect(self: Any) -> Any:
        seen["connects"].append(str(self))
        return connect(self)

    monkeypatch.setattr(redis.Redis, "execute_command", counted_command)
    monkeypatch.setattr(redis.connection.Connection, "_connect", counted_connect)
    return seen


@override_settings(CACHES=REDIS_CACHE, API_RATE_LIMIT="3/m")
def test_the_limit_counts_in_redis_and_refuses_past_it() -> None:
    who, other = identity(), identity()

    answers = [a_request(lambda: rate_count(who)) for _ in range(4)]

    assert [allowed for allowed, _ in answers] == [True, True, True, False]
    assert all(0 < wait <= 60 for _, wait in answers)
    assert a_request(lambda: rate_count(other))[0] is True


@override_settings(CACHES=REDIS_CACHE, API_RATE_LIMIT="1000/m")
def test_a_request_is_one_round_trip_and_requests_share_a_connection(
    spied: dict[str, list[str]],
) -> None:
    who = identity()
    a_request(lambda: rate_count(who))
    spied["commands"].clear()
    spied["connects"].clear()

    for _ in range(20):
        a_request(lambda: rate_count(who))

    assert spied["commands"] == ["EVALSHA"] * 20
    assert spied["connects"] == []


@override_settings(CACHES=REDIS_CACHE, API_RATE_LIMIT="5/h")
def test_the_counter_is_the_cache_own_and_expires_after_its_window() -> None:
    who = identity()
    # given a process that counts with the cache's own add and incr
    rate_count(who)
    cache = caches["default"]
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    [stored] = client.keys(f"*ratelimit:{who.prefix}:*")
    window_key = str(stored).split(":", 2)[2]
    assert cache.incr(window_key) == 2

    # then this one counts on from it, and the counter lives a little longer than the window
    assert rate_count(who)[0] is True
    assert cache.get(window_key) == 3
    assert 3600 < client.ttl(stored) <= 3601
    client.close()


@override_settings(CACHES=REDIS_CACHE, API_RATE_LIMIT="3/m")
def test_on_an_event_loop_the_count_is_one_awaited_round_trip_into_the_same_counter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    who = identity()
    sent: list[str] = []
    execute: Callable[..., Any] = redis.asyncio.Redis.execute_command

    async def counted(self: redis.asyncio.Redis, *args: Any, **options: Any) -> Any:
        sent.append(str(args[0]).upper())
        return await execute(self, *args, **options)

    monkeypatch.setattr(redis.asyncio.Redis, "execute_command", counted)

    async def requests() -> list[bool]:
        answers = [await rate_count_on_loop(who) for _ in range(2)]
        return [allowed for allowed, _ in answers]

    # given one request counted in a thread, then two on a loop
    first = rate_count(who)[0]
    on_loop = asyncio.run(requests())

    # then the loop's count went on from the thread's, one command each, the third let in
    # and a fourth refused wherever it is counted
    assert [first, *on_loop] == [True, True, True]
    assert sent == ["EVALSHA", "EVALSHA"]
    assert rate_count(who)[0] is False
