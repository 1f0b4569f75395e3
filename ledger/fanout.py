"""One channel-layer subscription per cluster per process, its pushes handed to the local sockets.

A socket that takes a channel of its own in its cluster's group costs, per push, one copy of
the event on the channel layer, one receive and one frame built per socket. Instead the sockets
of one cluster on one process share a subscription (``GroupFanout``): the first to join
subscribes a channel of the process to the group and starts one task that receives from it;
the last to leave unsubscribes it. Each event is received once, and the subclass's ``deliver``
builds its frames once and writes them to every member, in the order the events came
(docs/decisions/0160-push-fanout.md, 0181-agent-push-fanout.md).

Subscriptions are keyed by event loop: one per server process, a test's own per test.

A pushed frame is written through the ASGI server's own ``send``, which ``ServerSend`` keeps in
the scope (``frame_send``), not through the send wrappers of every middleware and of Channels'
consumer on the way: none of them does anything for a frame (docs/decisions/0210).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

from channels.layers import get_channel_layer

from ledger.push import MANY_EVENT_TYPE, ONE_EVENT_TYPE
from ledger.records import JSON

logger = logging.getLogger(__name__)

Member = TypeVar("Member")

# The event that ends a subscription's reader (``GroupFanout.leave``), and how long the last
# member to leave waits for it to end before it cancels it.
STOP_EVENT_TYPE = "fanout.stop"
READER_STOP_SECONDS = 5.0

# At most this many received events wait for a delivery. Beyond it the reader stops receiving
# until the writer takes some, so a socket slow to drain holds pushes back in the channel layer
# (bounded by its capacity and expiry) rather than in this process's memory.
RECEIVED_LIMIT = 256
# At most this many events go in one delivery: a page's frame holds at most this many pushes'
# fragments however long a burst lasts.
DELIVERY_EVENTS = 64


class _Subscription(Generic[Member]):
    """One group on one event loop: its channel, its reader, its writer and its local members."""

    def __init__(self) -> None:
        self.members: list[Member] = []
        self.channel = ""
        self.started: asyncio.Task[None] | None = None
        self.reader: asyncio.Task[None] | None = None
        # Events received and not yet delivered, the task delivering them, and when (loop time)
        # its last delivery began.
        self.received: list[dict[str, Any]] = []
        self.writer: asyncio.Task[None] | None = None
        self.delivered_at = float("-inf")
        # Set whenever the writer takes events: the reader waits on it while too many wait.
        self.taken = asyncio.Event()


def pushed_messages(event: dict[str, Any]) -> list[dict[str, JSON]]:
    """The wire shapes of the messages a push event carries, in order (none for other events)."""
    if event.get("type") == ONE_EVENT_TYPE:
        return [event["message"]]
    if event.get("type") == MANY_EVENT_TYPE:
        return list(event["messages"])
    return []


class GroupFanout(Generic[Member]):
    """One channel-layer subscription per group per event loop, its events delivered to its
    members by ``deliver`` (a subclass builds its frames there, once for all of them).

    Receiving and delivering are apart: a reader task receives the group's events and a writer
    task delivers them, all that has been received since its last delivery at once. Deliveries
    begin ``gather_seconds_for`` the group's members apart at least (``gather_seconds``, unless
    a subclass makes it depend on how many they are): an event after a quiet moment is
    delivered at once, and what arrives within that moment of a delivery, or while it is
    written, goes in the next one. A hub whose frames may hold several messages (the cluster
    pages') so writes at most one frame per moment under a burst of publishes, and no later
    than before when pushes are rare.
    """

    # The least time between the beginnings of two deliveries to a group's members.
    gather_seconds = 0.0

    def __init__(self) -> None:
        self.subscribes = 0  # group subscriptions made, for the tests and a debugger
        self._subscriptions: dict[tuple[asyncio.AbstractEventLoop, str], _Subscription[Member]]
        self._subscriptions = {}

    async def join(self, group: str, member: Member) -> None:
        """Add ``member`` to ``group``'s, subscribing the process first if it is the first.

        Returns once the subscription is made: what the group receives from then on reaches
        ``member``, which keeps what comes before it can send (a socket not accepted yet).
        """
        loop = asyncio.get_running_loop()
        key = (loop, group)
        subscription = self._subscriptions.get(key)
        if subscription is None:
            # Subscriptions of loops that are gone (a test's) have no member to write to any more.
            self._subscriptions = {
                k: s for k, s in self._subscriptions.items() if not k[0].is_closed()
            }
            subscription = self._subscriptions[key] = _Subscription()
            subscription.started = loop.create_task(self._subscribe(group, subscription))
        subscription.members.append(member)
        assert subscription.started is not None
        try:
            # Shielded: a member that closes meanwhile must not cancel the others' subscription.
            await asyncio.shield(subscription.started)
        except BaseException:
            await self.leave(group, member)
            raise

    async def leave(self, group: str, member: Member) -> None:
        """Take ``member`` out; the last member of a group unsubscribes the process from it."""
        key = (asyncio.get_running_loop(), group)
        subscription = self._subscriptions.get(key)
        if subscription is None or member not in subscription.members:
            return
        subscription.members.remove(member)
        if subscription.members:
            return
        del self._subscriptions[key]
        if subscription.writer is not None:
            subscription.writer.cancel()  # nobody is left to write to
        subscription.received.clear()
        subscription.taken.set()  # a reader waiting for the writer goes on to its stop event
        reader, started = subscription.reader, subscription.started
        layer = get_channel_layer()
        if (
            reader is None
            or layer is None
            or started is None
            or not started.done()
            or started.cancelled()
            or started.exception() is not None
        ):
            if reader is not None:
                reader.cancel()
            return
        await layer.group_discard(group, subscription.channel)
        # The reader is told to end by an event of its own rather than cancelled: a receive
        # cancelled in the middle of its Redis read does not always end (channels-redis with
        # redis-py), and a task that never ends blocks its event loop's shutdown.
        await layer.send(subscription.channel, {"type": STOP_EVENT_TYPE})
        _, pending = await asyncio.wait({reader}, timeout=READER_STOP_SECONDS)
        if pending:
            reader.cancel()

    def members(self, group: str) -> list[Member]:
        """The members of ``group`` on the running event loop (for the tests and a debugger)."""
        subscription = self._subscriptions.get((asyncio.get_running_loop(), group))
        return list(subscription.members) if subscription is not None else []

    def gather_seconds_for(self, members: int) -> float:
        """The least time between the beginnings of two deliveries to ``members`` members
        (``gather_seconds``, whatever their number, unless a subclass says otherwise)."""
        return self.gather_seconds

    async def deliver(self, members: list[Member], events: list[dict[str, Any]]) -> None:
        """Write what ``events`` (received in this order) mean to each of ``members``."""
        raise NotImplementedError

    async def _subscribe(self, group: str, subscription: _Subscription[Member]) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        self.subscribes += 1
        subscription.channel = await layer.new_channel()
        await layer.group_add(group, subscription.channel)
        subscription.reader = asyncio.get_running_loop().create_task(
            self._read(layer, subscription)
        )

    async def _read(self, layer: Any, subscription: _Subscription[Member]) -> None:
        while True:
            event = await layer.receive(subscription.channel)
            if event.get("type") == STOP_EVENT_TYPE:
                return
            if not subscription.members:
                continue  # the last member left: nothing to deliver until the stop arrives
            subscription.received.append(event)
            if subscription.writer is None:
                subscription.writer = asyncio.get_running_loop().create_task(
                    self._write(subscription)
                )
            if len(subscription.received) >= RECEIVED_LIMIT:
                subscription.taken.clear()
                await subscription.taken.wait()

    async def _write(self, subscription: _Subscription[Member]) -> None:
        """Deliver what has been received, in order, until nothing is left; then end (the next
        event starts another writer)."""
        loop = asyncio.get_running_loop()
        while subscription.received:
            gather = self.gather_seconds_for(len(subscription.members))
            wait = subscription.delivered_at + gather - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            subscription.delivered_at = loop.time()
            events = subscription.received[:DELIVERY_EVENTS]
            del subscription.received[:DELIVERY_EVENTS]
            subscription.taken.set()
            try:
                await self.deliver(list(subscription.members), events)
            except Exception:
                # Live pushes are hints (SPEC §1.4): a socket catches up when it reconnects.
                logger.exception("live push to the sockets of a cluster failed")
        subscription.writer = None


# The scope key under which ``ServerSend`` keeps the ASGI server's own ``send``.
SERVER_SEND = "zeroshot.server_send"

Send = Callable[[dict[str, Any]], Awaitable[None]]


class ServerSend:
    """ASGI middleware, the outermost of the websockets': keeps the server's own ``send`` in the
    scope, for the pushed frames (``frame_send``).

    The middleware beneath it wrap ``send`` for what happens once per socket (the metrics count
    the accept, Channels' sessions act on an HTTP response start); a pushed frame, written once
    per socket per message, gains nothing from passing through each of them. What must see every
    frame does not belong beneath this middleware.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app({**scope, SERVER_SEND: send}, receive, send)


def frame_send(scope: dict[str, Any], fallback: Send) -> Send:
    """The send a socket's pushed frames go through: the server's own when ``ServerSend`` kept
    it in ``scope``, else ``fallback`` (the consumer's, under an app without ``ServerSend``)."""
    send: Send | None = scope.get(SERVER_SEND)
    return send if send is not None else fallback


class FrameSink(Protocol):
    """A socket that the agents' fan-out writes to (``ledger.consumers``): ``sent`` is the ASGI
    ``websocket.send`` of one message's frame, the same object for every socket."""

    async def write(self, sequence: int, sent: dict[str, Any]) -> None: ...


def message_frame(wire: dict[str, JSON]) -> str:
    """The agents' websocket frame of one message (SPEC §6.3), as ``send_json`` wrote it."""
    return json.dumps({"type": "message", "data": wire})


class MessageFanout(GroupFanout[FrameSink]):
    """The agents' streams: each pushed message's frame built once, written to every socket."""

    def __init__(self) -> None:
        super().__init__()
        self.frames = 0  # frames built, for the tests and a debugger

    async def deliver(self, members: list[FrameSink], events: list[dict[str, Any]]) -> None:
        # One frame per message (SPEC §6.3), however many messages a delivery brings.
        for event in events:
            for wire in pushed_messages(event):
                self.frames += 1
                # One ``websocket.send`` for all the sockets: the server reads it, changes nothing.
                sent = {"type": "websocket.send", "text": message_frame(wire)}
                sequence = int(str(wire.get("sequence", 0)))
                for member in members:
                    await member.write(sequence, sent)


message_fanout = MessageFanout()
