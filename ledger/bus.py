"""The message bus (SPEC §1.4): in-process subscribers and live pushes, after commit.

Services write inside ``bus.ordered_commit(cluster_id)`` and hand their stored messages to
``bus.deliver_on_commit``; delivery then happens once the transaction has committed:

- in commit order: the commit and the hand-over to the delivery queue happen under one lock per
  cluster, so the queue holds messages in the order their transactions committed;
- subscribers that take every message run before topic subscribers;
- a subscriber that raises is logged and changes nothing for the publisher or the others;
- each batch is handed to the live push (``ledger/push.py``), which sends it to the cluster's
  channel group without the publisher waiting; a dead channel layer is logged there.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import transaction

from ledger.push import pusher
from ledger.records import MessageRecord

logger = logging.getLogger(__name__)

Subscriber = Callable[[MessageRecord], None]
BatchSubscriber = Callable[[tuple[MessageRecord, ...]], None]
_LOCK_STRIPES = 64


@dataclass(frozen=True, slots=True)
class Subscription:
    """A handle returned by ``subscribe``; pass it to ``unsubscribe``."""

    id: int
    callback: Subscriber
    topics: frozenset[str] | None
    # Imported messages (zeroshot ledgers, demo data) are history, not events to react to.
    include_imported: bool = True


class MessageBus:
    """Delivers committed messages to subscribers and live clients, in commit order."""

    def __init__(self) -> None:
        self._subscriptions: list[Subscription] = []
        self._batch_subscribers: list[BatchSubscriber] = []
        self._ids = itertools.count(1)
        self._queue: deque[tuple[tuple[MessageRecord, ...], bool]] = deque()
        self._queue_lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._commit_locks = [threading.RLock() for _ in range(_LOCK_STRIPES)]
        self.push_enabled = True

    def subscribe(
        self,
        callback: Subscriber,
        *,
        topics: str | Iterable[str] | None = None,
        include_imported: bool = True,
    ) -> Subscription:
        """Call ``callback`` for every committed message, or only for the given topic(s)."""
        wanted = frozenset([topics] if isinstance(topics, str) else topics) if topics else None
        subscription = Subscription(
            id=next(self._ids), callback=callback, topics=wanted, include_imported=include_imported
        )
        self._subscriptions = [*self._subscriptions, subscription]
        return subscription

    def subscribe_batches(self, callback: BatchSubscriber) -> None:
        """Call ``callback`` once per committed batch of published (not imported) messages,
        after the message subscribers have seen it."""
        if callback not in self._batch_subscribers:
            self._batch_subscribers = [*self._batch_subscribers, callback]

    def unsubscribe(self, subscription: Subscription) -> None:
        """Stop a subscription; unknown handles are ignored."""
        self._subscriptions = [s for s in self._subscriptions if s.id != subscription.id]

    @contextmanager
    def ordered_commit(self, cluster_id: str) -> Iterator[None]:
        """Hold the cluster's delivery lock across a write transaction and its commit."""
        stripe = int(hashlib.blake2s(cluster_id.encode(), digest_size=4).hexdigest(), 16)
        with self._commit_locks[stripe % _LOCK_STRIPES]:
            yield

    def deliver_on_commit(
        self, messages: Sequence[MessageRecord], *, imported: bool = False
    ) -> None:
        """Queue ``messages`` for delivery once the current transaction commits."""
        if not messages:
            return
        batch = tuple(messages)
        transaction.on_commit(lambda: self._enqueue(batch, imported))

    def deliver_committed(self, messages: Sequence[MessageRecord]) -> None:
        """Deliver ``messages`` of a transaction that has just committed, as
        ``deliver_on_commit``'s hook does; the caller holds the cluster's ``ordered_commit``."""
        if messages:
            self._enqueue(tuple(messages), False)

    def _enqueue(self, batch: tuple[MessageRecord, ...], imported: bool) -> None:
        with self._queue_lock:
            self._queue.append((batch, imported))
        self.drain()

    def drain(self) -> None:
        """Deliver everything queued; a thread already delivering picks up what others queue."""
        while True:
            if not self._drain_lock.acquire(blocking=False):
                return
            try:
                while True:
                    with self._queue_lock:
                        if not self._queue:
                            break
                        batch, imported = self._queue.popleft()
                    self._deliver(batch, imported=imported)
            finally:
                self._drain_lock.release()
            with self._queue_lock:
                if not self._queue:
                    return

    def _deliver(self, batch: tuple[MessageRecord, ...], *, imported: bool) -> None:
        subscriptions = [s for s in self._subscriptions if s.include_imported or not imported]
        everything = [s for s in subscriptions if s.topics is None]
        by_topic = [s for s in subscriptions if s.topics is not None]
        for message in batch:
            for subscription in everything:
                self._call(subscription, message)
            for subscription in by_topic:
                if subscription.topics is not None and message.topic in subscription.topics:
                    self._call(subscription, message)
        if not imported:
            for callback in self._batch_subscribers:
                try:
                    callback(batch)
                except Exception:
                    logger.exception("bus batch subscriber %r failed", callback)
        if self.push_enabled:
            pusher.push(batch)

    @staticmethod
    def _call(subscription: Subscription, message: MessageRecord) -> None:
        try:
            subscription.callback(message)
        except Exception:
            logger.exception(
                "bus subscriber %r failed on %s#%s",
                subscription.callback,
                message.cluster_id,
                message.sequence,
            )


bus = MessageBus()
