"""The Redis layer's group send in one round trip (ledger/channel_layer.py), on a real Redis.

channels_redis's own layer (``RedisChannelLayer``) stands for another server process that
receives: what it reads must be what its own group send would have given it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from channels_redis.core import RedisChannelLayer  # type: ignore[import-untyped]
from redis.asyncio import Redis

from ledger.channel_layer import OneTripRedisChannelLayer
from zeroshot_web.settings import redis_channel_layer

# The suite's own Redis database, never the default one that other programs use.
REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/4"
HOSTS = redis_channel_layer(REDIS_URL)["CONFIG"]["hosts"]

T = TypeVar("T")


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(scenario())  # type: ignore[arg-type]


def group() -> str:
    # Redis is shared by every test run on the machine: a group of our own keeps it ours.
    return f"cluster.layer-{uuid.uuid4().hex[:12]}"


def event(n: int) -> dict[str, Any]:
    return {"type": "ledger.message", "message": {"id": f"m{n}", "content": {"n": n, "t": "é"}}}


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The commands the Redis client sends, by name: one per round trip (no pipelines here)."""
    sent: list[str] = []
    original: Callable[..., Awaitable[Any]] = Redis.execute_command

    async def counted(self: Redis, *args: Any, **options: Any) -> Any:
        sent.append(str(args[0]).upper())
        return await original(self, *args, **options)

    monkeypatch.setattr(Redis, "execute_command", counted)
    return sent


def test_the_layer_of_the_settings_sends_in_one_trip() -> None:
    layer = OneTripRedisChannelLayer(hosts=HOSTS)
    assert layer.one_trip
    # What it cannot write as channels_redis would, it leaves to channels_redis's group send.
    assert not OneTripRedisChannelLayer(hosts=HOSTS * 2).one_trip
    assert not OneTripRedisChannelLayer(hosts=HOSTS, channel_capacity={"x": 1}).one_trip
    assert not OneTripRedisChannelLayer(hosts=HOSTS, serializer_format="json").one_trip


def test_other_processes_receive_what_channels_redis_would_have_sent() -> None:
    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        sender = OneTripRedisChannelLayer(hosts=HOSTS)
        stock = RedisChannelLayer(hosts=HOSTS)
        # given two processes listening: one with two channels of its own, one with one
        first, second = RedisChannelLayer(hosts=HOSTS), RedisChannelLayer(hosts=HOSTS)
        channels = [await first.new_channel(), await first.new_channel()]
        channels.append(await second.new_channel())
        ours, theirs = group(), group()
        for name in (ours, theirs):
            for channel in channels:
                await stock.group_add(name, channel)
        # when our layer sends to one group, then channels_redis's own to the other
        await sender.group_send(ours, event(1))
        await stock.group_send(theirs, event(1))
        # then every channel receives the same message from either
        got = []
        for _ in (ours, theirs):
            first_two = [await first.receive(channels[0]), await first.receive(channels[1])]
            got.append([*first_two, await second.receive(channels[2])])
        for layer in (sender, stock, first, second):
            await layer.close_pools()
        return got[0], got[1]

    ours, theirs = run(scenario)
    assert ours == theirs == [event(1)] * 3


def test_the_queued_entries_are_channels_redis_own() -> None:
    async def scenario() -> list[tuple[Any, ...]]:
        sender = OneTripRedisChannelLayer(hosts=HOSTS)
        stock = RedisChannelLayer(hosts=HOSTS)
        listener = RedisChannelLayer(hosts=HOSTS)
        channels = [await listener.new_channel(), await listener.new_channel()]
        ours, theirs = group(), group()
        for name in (ours, theirs):
            for channel in channels:
                await stock.group_add(name, channel)
        queue = stock.prefix + listener.non_local_name(channels[0])
        redis = stock.connection(0)
        entries = []
        for layer, name in ((sender, ours), (stock, theirs)):
            await layer.group_send(name, event(2))
            [(entry, score)] = await redis.zrange(queue, 0, -1, withscores=True)
            ttl = await redis.ttl(queue)
            await redis.delete(queue)
            # the random prefix differs; what follows it and how it is kept do not
            entries.append((stock.deserialize(entry), ttl, abs(score - time.time()) < 5))
        for layer in (sender, stock, listener):
            await layer.close_pools()
        return entries

    ours, theirs = run(scenario)
    # the message with both channels of the process's queue, kept for the layer's expiry,
    # scored by the time of sending
    assert ours == theirs
    assert len(ours[0]["__asgi_channel__"]) == 2
    assert ours[1:] == (60, True)


def test_the_random_prefixes_leave_the_shared_generator_alone() -> None:
    async def scenario() -> list[bytes]:
        sender = OneTripRedisChannelLayer(hosts=HOSTS)
        listener = RedisChannelLayer(hosts=HOSTS)
        channel = await listener.new_channel()
        name = group()
        await sender.group_add(name, channel)
        queue = sender.prefix + listener.non_local_name(channel)
        redis = sender.connection(0)
        heads = []
        for n in range(2):
            # given the shared generator seeded the same way before each send
            random.seed(0)
            state = random.getstate()
            # when a group send takes its message's random prefix
            await sender.group_send(name, event(n))
            # then the shared generator did not move
            assert random.getstate() == state
            [entry] = await redis.zrange(queue, 0, -1)
            await redis.delete(queue)
            heads.append(entry[: sender._serializer.random_prefix_length])
        for layer in (sender, listener):
            await layer.close_pools()
        return heads

    first, second = run(scenario)
    # and the prefixes still differ: they do not follow the shared generator's seed
    assert first != second


def test_a_group_send_is_one_round_trip_with_members_or_without(
    round_trips: list[str],
) -> None:
    async def scenario() -> tuple[list[str], list[str], list[str]]:
        sender = OneTripRedisChannelLayer(hosts=HOSTS)
        listener = RedisChannelLayer(hosts=HOSTS)
        channel = await listener.new_channel()
        listened, empty = group(), group()
        await listener.group_add(listened, channel)
        await sender.group_send(empty, event(0))  # the script is loaded once per Redis
        round_trips.clear()
        await sender.group_send(empty, event(1))
        to_empty = list(round_trips)
        round_trips.clear()
        await sender.group_send(listened, event(2))
        to_listened = list(round_trips)
        round_trips.clear()
        await sender.group_send_many([(listened, event(3)), (empty, event(4))] * 3)
        to_many = list(round_trips)
        round_trips.clear()
        received = [await listener.receive(channel) for _ in range(4)]
        assert received == [event(2), event(3), event(3), event(3)]
        for layer in (sender, listener):
            await layer.close_pools()
        return to_empty, to_listened, to_many

    to_empty, to_listened, to_many = run(scenario)
    assert to_empty == to_listened == to_many == ["EVALSHA"]


def test_channels_redis_own_group_send_costs_more_round_trips(round_trips: list[str]) -> None:
    # What the one-trip send replaces: expiry clean-up and members, then for members a
    # pipelined clean-up and the send script.
    async def scenario() -> int:
        stock = RedisChannelLayer(hosts=HOSTS)
        await stock.group_send(group(), event(1))
        await stock.close_pools()
        return len(round_trips)

    assert run(scenario) == 2


def test_many_sends_arrive_in_their_order_on_every_queue() -> None:
    async def scenario() -> tuple[list[int], list[int]]:
        sender = OneTripRedisChannelLayer(hosts=HOSTS)
        first, second = RedisChannelLayer(hosts=HOSTS), RedisChannelLayer(hosts=HOSTS)
        a, b = await first.new_channel(), await second.new_channel()
        name = group()
        await first.group_add(name, a)
        await first.group_add(name, b)
        # identical messages too: each is a message of its own
        await sender.group_send_many([(name, event(n % 3)) for n in range(30)])
        for n in range(30, 40):
            await sender.group_send(name, event(n % 3))
        got_a = [(await first.receive(a))["message"]["content"]["n"] for _ in range(40)]
        got_b = [(await second.receive(b))["message"]["content"]["n"] for _ in range(40)]
        for layer in (sender, first, second):
            await layer.close_pools()
        return got_a, got_b

    got_a, got_b = run(scenario)
    assert got_a == got_b == [n % 3 for n in range(40)]


def test_a_full_queue_takes_no_more_and_the_refusal_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> tuple[int, int]:
        sender = OneTripRedisChannelLayer(hosts=HOSTS, capacity=3)
        listener = RedisChannelLayer(hosts=HOSTS)
        channel = await listener.new_channel()
        name = group()
        await listener.group_add(name, channel)
        await sender.group_send_many([(name, event(n)) for n in range(5)])
        queue = listener.prefix + listener.non_local_name(channel)
        queued = await listener.connection(0).zcard(queue)
        first = await listener.receive(channel)
        for layer in (sender, listener):
            await layer.close_pools()
        return queued, first["message"]["content"]["n"]

    with caplog.at_level(logging.INFO, logger="ledger.channel_layer"):
        queued, first = run(scenario)
    assert (queued, first) == (3, 0)
    assert "1 channels over capacity in group" in caplog.text


def test_expired_members_and_messages_are_cleaned_up_as_channels_redis_does() -> None:
    async def scenario() -> tuple[list[bytes], list[bytes]]:
        sender = OneTripRedisChannelLayer(hosts=HOSTS)
        listener = RedisChannelLayer(hosts=HOSTS)
        fresh, stale = await listener.new_channel(), await listener.new_channel("other")
        name = group()
        redis = listener.connection(0)
        key = listener._group_key(name)
        # given a member that joined longer ago than the group expiry, and a queued message
        # older than the message expiry
        await redis.zadd(key, {fresh: time.time(), stale: time.time() - 86_400 - 5})
        queue = listener.prefix + listener.non_local_name(fresh)
        await redis.zadd(queue, {b"expired": time.time() - 61})
        await sender.group_send(name, event(1))
        members = await redis.zrange(key, 0, -1)
        entries = await redis.zrange(queue, 0, -1)
        for layer in (sender, listener):
            await layer.close_pools()
        return members, entries

    members, entries = run(scenario)
    assert len(members) == 1
    assert members[0].decode().startswith("specific.")
    assert len(entries) == 1
    assert entries[0] != b"expired"
