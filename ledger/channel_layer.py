"""channels_redis's Redis layer with its group sends in one round trip to Redis.

``RedisChannelLayer.group_send`` asks Redis four times for a group with members (the group's
expiry clean-up, its members, the members' queues' expiry clean-up, then a script that adds
the message) and twice for a group nobody listens to, and a push of the live messages is one
group send per cluster per moment: about one per single publish, 0.21 ms of the server's CPU
to an empty group (docs/decisions/0230-group-send-in-one-round-trip.md).

``group_send_many`` does all of that for several groups in one script, so one round trip for
whatever a push sends, and ``group_send`` is the same for one group. What lands in Redis is
what channels_redis's own group send writes: the same queue keys, scores in seconds, one
message per queue with the channels of that queue in ``__asgi_channel__``, msgpack behind the
serializer's random prefix, the same capacity and expiry. Its receivers, in this process or
another, read the messages unchanged. The layer is the same as channels_redis's for all else,
and falls back to its group send where the script could not write the same bytes (several
Redis hosts, per-channel capacities, encryption or another serializer).
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import time
from collections.abc import Sequence
from typing import Any

import msgpack  # type: ignore[import-untyped]
from channels_redis.core import RedisChannelLayer  # type: ignore[import-untyped]
from channels_redis.serializers import MsgPackSerializer  # type: ignore[import-untyped]
from redis.exceptions import NoScriptError

logger = logging.getLogger(__name__)

# The random prefixes come from a generator of this module's own, seeded from the system's
# entropy and again in a forked child (as the ``random`` module's shared one is): a program that
# seeds the shared generator (a test framework does, for each example it draws) neither repeats
# them nor sees its own sequence moved by a push on another thread.
_prefixes = random.Random()
os.register_at_fork(after_in_child=_prefixes.seed)

# KEYS: the groups' keys, in sending order. ARGV: the oldest score of a group member kept, of a
# queued message kept, a queue's expiry in seconds, its capacity, the queue keys' prefix, then
# per group the message's score, its random prefix with its msgpack map header (one entry more
# than the message has), and its entries. Per group: the expired members go, the members'
# channels are gathered per queue key ("specific.abc!" for the process-local
# "specific.abc!def"), and each queue whose expired messages are gone and that has room gets the
# message with its channels appended as ``__asgi_channel__``. Returns, per group, the queues
# that were full.
GROUP_SEND_LUA = """
local group_oldest = tonumber(ARGV[1])
local message_oldest = tonumber(ARGV[2])
local expiry = ARGV[3]
local capacity = tonumber(ARGV[4])
local queue_prefix = ARGV[5]
local channel_field = cmsgpack.pack('__asgi_channel__')
local full = {}
for g = 1, #KEYS do
    redis.call('ZREMRANGEBYSCORE', KEYS[g], 0, group_oldest)
    local queues, channels = {}, {}
    for _, channel in ipairs(redis.call('ZRANGE', KEYS[g], 0, -1)) do
        local bang = string.find(channel, '!', 1, true)
        local queue = queue_prefix .. (bang and string.sub(channel, 1, bang) or channel)
        if channels[queue] == nil then
            channels[queue] = {}
            queues[#queues + 1] = queue
        end
        table.insert(channels[queue], channel)
    end
    local score = ARGV[3 + 3 * g]
    local message = ARGV[4 + 3 * g] .. ARGV[5 + 3 * g] .. channel_field
    full[g] = 0
    for _, queue in ipairs(queues) do
        redis.call('ZREMRANGEBYSCORE', queue, 0, message_oldest)
        if redis.call('ZCOUNT', queue, '-inf', '+inf') < capacity then
            redis.call('ZADD', queue, score, message .. cmsgpack.pack(channels[queue]))
            redis.call('EXPIRE', queue, expiry)
        else
            full[g] = full[g] + 1
        end
    end
end
return full
"""
GROUP_SEND_SHA = hashlib.sha1(GROUP_SEND_LUA.encode()).hexdigest()


class OneTripRedisChannelLayer(RedisChannelLayer):  # type: ignore[misc]
    """channels_redis's layer whose group sends cost one round trip to Redis (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        serializer = self._serializer
        self.one_trip = (
            self.ring_size == 1
            and not self.channel_capacity
            and type(serializer) is MsgPackSerializer
            and serializer.crypter is None
        )
        self._last_score = 0.0

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        """Send ``message`` to every channel of ``group``."""
        await self.group_send_many([(group, message)])

    async def group_send_many(self, sends: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Send each message to every channel of its group, in order, in one round trip."""
        if not self.one_trip:
            for group, message in sends:
                await super().group_send(group, message)
            return
        if not sends:
            return
        now = time.time()
        prefix_length = self._serializer.random_prefix_length
        keys: list[bytes] = []
        args: list[Any] = [
            int(now) - self.group_expiry,
            int(now) - int(self.expiry),
            int(self.expiry),
            self.capacity,
            self.prefix,
        ]
        for group, message in sends:
            assert self.require_valid_group_name(group), "Group name not valid"
            assert "__asgi_channel__" not in message
            keys.append(self._group_key(group))
            # Receivers take the lowest score first: a later send of this process never scores
            # lower or the same as an earlier one (messages of one score come in random order).
            self._last_score = max(now, self._last_score + 1e-6)
            head = _prefixes.getrandbits(8 * prefix_length).to_bytes(prefix_length, "big")
            head += msgpack.Packer().pack_map_header(len(message) + 1)
            body = b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in message.items())
            args += [repr(self._last_score), head, body]
        connection = self.connection(0)
        try:
            full = await connection.evalsha(GROUP_SEND_SHA, len(keys), *keys, *args)
        except NoScriptError:
            full = await connection.eval(GROUP_SEND_LUA, len(keys), *keys, *args)
        for (group, _), count in zip(sends, full, strict=True):
            if count:
                logger.info("%s channels over capacity in group %s", count, group)
