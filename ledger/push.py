"""Live pushes (SPEC §1.4): committed messages sent to their cluster's channel group.

The bus hands each delivered batch to ``pusher.push`` and returns at once: a publisher never
waits for a channel layer. The messages are sent by one task per event loop, in the order they
were handed over, and whatever queued up while a send was in flight goes out coalesced: one
``ledger.messages`` event per cluster for up to ``CHUNK`` messages, so a batch of a hundred
costs one group send, not a hundred.

Which event loop sends (docs/decisions/0070-push-loop.md): the loop of the async code that
called into the publisher (the server's, for a request; a test's, for a communicator), else the
loop the server registered (``serve_on``, for the pipeline's thread), else a loop of our own
in a daemon thread (a command, a benchmark: no socket of this process listens there, and a
Redis layer carries the messages to the servers'). Channel layers are bound to the loop their
consumers run on, so a push never crosses to another loop than theirs.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from asgiref.sync import SyncToAsync
from channels.layers import get_channel_layer

from ledger.records import MessageRecord

logger = logging.getLogger(__name__)

ONE_EVENT_TYPE = "ledger.message"
MANY_EVENT_TYPE = "ledger.messages"
# Messages per coalesced event: bounds one event's size on the channel layer.
CHUNK = 100
# How long a sender waits, after a wake-up and after each send, before it sends what has queued.
GATHER_SECONDS = 0.005


def cluster_group(cluster_id: str) -> str:
    """The channel-layer group of a cluster; long ids are hashed to fit the layer's name limit."""
    if len(cluster_id) <= 80:
        return f"cluster.{cluster_id}"
    return "cluster.h" + hashlib.sha256(cluster_id.encode()).hexdigest()[:40]


def group_events(batches: Sequence[tuple[MessageRecord, ...]]) -> list[tuple[str, dict[str, Any]]]:
    """The channel-layer events for queued batches: per cluster, in order, in chunks."""
    events: list[tuple[str, dict[str, Any]]] = []
    run: list[MessageRecord] = []

    def close_run() -> None:
        for start in range(0, len(run), CHUNK):
            chunk = run[start : start + CHUNK]
            group = cluster_group(chunk[0].cluster_id)
            if len(chunk) == 1:
                events.append((group, {"type": ONE_EVENT_TYPE, "message": chunk[0].to_wire()}))
            else:
                wires = [m.to_wire() for m in chunk]
                events.append((group, {"type": MANY_EVENT_TYPE, "messages": wires}))
        run.clear()

    for batch in batches:
        for message in batch:
            if run and run[-1].cluster_id != message.cluster_id:
                close_run()
            run.append(message)
    close_run()
    return events


class _LoopSender:
    """Sends what is handed over, in order, from one task at a time on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: deque[tuple[MessageRecord, ...]] = deque()
        self._lock = threading.Lock()
        self._sending = False
        self._idle = threading.Event()
        self._idle.set()

    def hand_over(self, batch: tuple[MessageRecord, ...]) -> None:
        with self._lock:
            self._queue.append(batch)
            if self._sending:
                return
            self._sending = True
            self._idle.clear()
        try:
            self.loop.call_soon_threadsafe(self._start)
        except RuntimeError:  # the loop closed meanwhile: nobody listens there any more
            with self._lock:
                self._queue.clear()
                self._sending = False
                self._idle.set()

    def _start(self) -> None:
        self.loop.create_task(self._send_all())

    async def _send_all(self) -> None:
        while True:
            # A moment for more to queue up, after a wake-up and after each send: one wake-up
            # of this loop then sends what several commits handed over (a wake-up costs the
            # publishing thread more than a send), and under a steady stream of publishes a
            # send carries what came in a moment, not the one or two messages committed while
            # the last send was in flight (each send is a group send, and a receive on every
            # process with sockets of the cluster: docs/decisions/0306).
            await asyncio.sleep(GATHER_SECONDS)
            with self._lock:
                batches = list(self._queue)
                self._queue.clear()
                if not batches:
                    self._sending = False
                    self._idle.set()
                    return
            await _send(batches)

    def wait_idle(self, timeout: float) -> bool:
        return self._idle.wait(timeout)


async def _send(batches: Sequence[tuple[MessageRecord, ...]]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    events = group_events(batches)
    send_many = getattr(layer, "group_send_many", None)
    if send_many is not None:
        # The Redis layer's: all of it in one round trip (docs/decisions/0230).
        try:
            await send_many(events)
        except Exception:
            # Live pushes are hints (SPEC §1.4): clients resync with ``after``.
            logger.exception("live push failed for groups %s", sorted({g for g, _ in events}))
        return
    for group, event in events:
        try:
            await layer.group_send(group, event)
        except Exception:
            logger.exception("live push failed for group %s", group)


class Pusher:
    """Hands committed batches to the right event loop's sender (see the module's docstring)."""

    def __init__(self) -> None:
        self._senders: dict[int, _LoopSender] = {}
        self._lock = threading.Lock()
        self._served: asyncio.AbstractEventLoop | None = None
        self._own: asyncio.AbstractEventLoop | None = None

    def serve_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """The server's event loop: pushes from threads without a loop of their own go there."""
        self._served = loop

    def push(self, batch: tuple[MessageRecord, ...]) -> None:
        """Send ``batch`` to its cluster's group soon, without waiting for it."""
        self._sender(self._target()).hand_over(batch)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything handed over has been sent (tests, a command before it exits).

        Not from inside a sending loop itself, whose sends could never finish meanwhile.
        """
        with self._lock:
            # A loop that has stopped (a test's) sends nothing any more: nothing to wait for.
            self._senders = {k: s for k, s in self._senders.items() if _alive(s.loop)}
            senders = list(self._senders.values())
        return all(s.wait_idle(timeout) for s in senders)

    def _target(self) -> asyncio.AbstractEventLoop:
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            pass
        caller = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
        if (
            isinstance(caller, asyncio.AbstractEventLoop)
            and getattr(SyncToAsync.threadlocal, "main_event_loop_pid", None) == os.getpid()
            and _alive(caller)
        ):
            return caller
        if self._served is not None and _alive(self._served):
            return self._served
        return self._own_loop()

    def _sender(self, loop: asyncio.AbstractEventLoop) -> _LoopSender:
        with self._lock:
            sender = self._senders.get(id(loop))
            if sender is None or sender.loop is not loop:
                # Forget senders of loops that are gone (a test's loop per test).
                self._senders = {k: s for k, s in self._senders.items() if _alive(s.loop)}
                sender = self._senders[id(loop)] = _LoopSender(loop)
            return sender

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._own is None or not _alive(self._own):
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="ledger-push", daemon=True)
                thread.start()
                self._own = loop
            return self._own


def _alive(loop: asyncio.AbstractEventLoop) -> bool:
    return loop.is_running() and not loop.is_closed()


pusher = Pusher()
