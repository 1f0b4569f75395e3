"""Long-polling claims that cost no thread and no database connection while they wait.

A claim with ``wait`` registers with its event loop's ``ClaimWatch`` and awaits a future. One
task per loop looks at what is claimable (one short query on an executor thread) when it is
woken — a task queued or freed in this process (``runs.signals.tasks_changed``), a new waiter —
and at least every ``RECHECK_SECONDS`` otherwise, which also sees tasks queued by other server
processes. Each claimable task wakes at most one waiter whose filters it passes; only that
waiter runs a claim transaction. A thousand waiting claims thus cost a thousand futures and
one query a second, not a thousand threads or a thundering herd of claim transactions.
docs/decisions/0085-claims-wait-on-the-event-loop.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from ledger import interfaces as ledger
from runs.models import Task, TaskState
from runs.services import Claim, task_claim
from runs.services.tasks import claimable, runner_seen
from runs.signals import tasks_changed

logger = logging.getLogger(__name__)

# A waiting claim looks again at least this often, for tasks queued by another server.
RECHECK_SECONDS = 1.0
# At most one look this often: a thousand claims arriving in a second cost twenty looks.
LOOK_GAP_SECONDS = 0.05
# Claimable tasks looked at per look: each agent has at most one, so this bounds agents.
HEADS_MAX = 5000

# cluster, agent, role, provider of a claimable task, and its cluster's labels
Head = tuple[str, str, str, str, object]
Run = Callable[..., Awaitable[object]]


@dataclass(frozen=True, slots=True)
class ClaimFilter:
    """What a worker asks for (SPEC §7.4): a cluster, agents, roles; empty means any. Labels
    the task's cluster must all carry, and providers one of which the task's agent names (an
    agent naming none is served by any runner)."""

    cluster_id: str | None = None
    agents: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    providers: tuple[str, ...] = ()

    def passes(self, head: Head) -> bool:
        cluster_id, agent_id, role, provider, labels = head
        return (
            (self.cluster_id is None or cluster_id == self.cluster_id)
            and (not self.agents or agent_id in self.agents)
            and (not self.roles or role in self.roles)
            and (not self.providers or not provider or provider in self.providers)
            and (
                not self.labels
                or (
                    isinstance(labels, dict)
                    and all(labels.get(key) == value for key, value in self.labels)
                )
            )
        )


def claimable_heads(*, now: int) -> list[Head]:
    """Who has a task to hand out now, one row per agent: queue heads, expired tasks, and
    leases that ran out (the claim ends those first)."""
    columns = ("cluster_id", "agent_id", "role", "provider", "cluster__labels")
    heads = list(claimable(now=now).values_list(*columns)[:HEADS_MAX])
    lapsed = Task.objects.filter(state=TaskState.CLAIMED, lease_expires_at__lt=now)
    return heads + list(lapsed.values_list(*columns)[:HEADS_MAX])


@dataclass(eq=False)
class _Waiter:
    wanted: ClaimFilter
    future: asyncio.Future[bool]
    order: int = field(default=0)


class ClaimWatch:
    """The waiting claims of one event loop and the one look at what is claimable they share."""

    def __init__(self, loop: asyncio.AbstractEventLoop, run: Run) -> None:
        self._loop = loop
        self._run = run
        self._waiters: dict[int, _Waiter] = {}
        self._order = itertools.count()
        self._kick = asyncio.Event()
        self._looking: asyncio.Task[None] | None = None
        # The server is stopping: no claim waits any more (``stop``).
        self.stopped = False

    async def wait(self, wanted: ClaimFilter, timeout: float) -> bool:
        """Wait until a task that passes ``wanted`` may be claimable (True), or ``timeout``, or
        the server is stopping (False)."""
        if timeout <= 0 or self.stopped:
            return False
        waiter = _Waiter(wanted=wanted, future=self._loop.create_future())
        waiter.order = next(self._order)
        self._waiters[waiter.order] = waiter
        self._kick.set()
        if self._looking is None or self._looking.done():
            self._looking = self._loop.create_task(self._look_while_waited_for())
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
        except TimeoutError:
            return False
        finally:
            self._waiters.pop(waiter.order, None)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def stop(self) -> None:
        """End every wait now, and every later one at once: the server is stopping, and a claim
        still waiting when its grace period ends would be cut off instead of answered (no
        task: its runner asks the next server). Called on the watch's loop."""
        self.stopped = True
        for waiter in self._waiters.values():
            if not waiter.future.done():
                waiter.future.set_result(False)

    async def _look_while_waited_for(self) -> None:
        tasks_changed.listen(self._loop, self._kick)
        try:
            while self._waiters:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), RECHECK_SECONDS)
                # A burst of arrivals shares a look rather than running them back to back.
                await asyncio.sleep(LOOK_GAP_SECONDS)
                self._kick.clear()
                if not self._waiters:
                    break
                try:
                    heads = await self._run(_heads_now)
                except Exception:
                    logger.exception("looking for claimable tasks failed")
                    await asyncio.sleep(RECHECK_SECONDS)
                    continue
                self._wake(heads)  # type: ignore[arg-type]
        finally:
            tasks_changed.unlisten(self._loop, self._kick)

    def _wake(self, heads: Sequence[Head]) -> None:
        """Wake, for each claimable task, the longest-waiting claim it passes."""
        waiting = [w for w in self._waiters.values() if not w.future.done()]
        for head in heads:
            for waiter in waiting:
                if not waiter.future.done() and waiter.wanted.passes(head):
                    waiter.future.set_result(True)
                    break


def _heads_now() -> list[Head]:
    return claimable_heads(now=ledger.now_ms())


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ClaimWatch] = (
    weakref.WeakKeyDictionary()
)


def claims_stop_waiting(loop: asyncio.AbstractEventLoop) -> None:
    """The server on ``loop`` is stopping: its waiting claims answer now with no task, and later
    ones do not wait (``ClaimWatch.stop``). Safe from any thread, a signal handler included."""
    if loop.is_closed():
        return

    def stop() -> None:
        watch = _watches.get(loop)
        if watch is None:
            watch = _watches[loop] = ClaimWatch(loop, _no_run)
        watch.stop()

    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        loop.call_soon_threadsafe(stop)


async def _no_run(*args: object) -> object:
    raise RuntimeError("a stopped watch looks at nothing")


def claim_watch(run: Run) -> ClaimWatch:
    """The watch of the running event loop."""
    loop = asyncio.get_running_loop()
    watch = _watches.get(loop)
    if watch is None:
        watch = _watches[loop] = ClaimWatch(loop, run)
    return watch


async def claim_waiting(
    *,
    wanted: ClaimFilter,
    wait: float,
    lease_seconds: int | None,
    worker: str,
    run: Run,
    since: float | None = None,
) -> Claim | None:
    """Claim a task, waiting up to ``wait`` seconds for one (SPEC §7.4); None after that.

    ``run`` runs a blocking function off the event loop (an executor thread with its own
    database connection): the claim transactions and the watch's looks, never the waiting.
    ``since`` is when the request arrived (``time.monotonic()``): the wait counts from then.
    """
    deadline = (time.monotonic() if since is None else since) + wait

    def claim_once() -> Claim | None:
        return task_claim(
            cluster_id=wanted.cluster_id,
            agents=wanted.agents,
            roles=wanted.roles,
            labels=wanted.labels,
            providers=wanted.providers,
            lease_seconds=lease_seconds,
            worker=worker,
        )

    watch = claim_watch(run)
    # A claim that may wait while others wait looks through the watch first: a thousand
    # arriving at once share one look instead of taking the write lock a thousand times, and
    # none passes a claim that waited longer. With none waiting, it claims at once, as a claim
    # that does not wait: one thread hop, and the claim records its runner, claimed or seen.
    if wait > 0 and watch.waiting > 0:
        if worker:
            # Seen when it asks, not only when it gets a task: an idle runner is still there.
            await run(
                lambda: runner_seen(
                    name=worker, labels=dict(wanted.labels), providers=wanted.providers
                )
            )
        if not await watch.wait(wanted, deadline - time.monotonic()):
            return None
    while True:
        claim = await run(claim_once)
        if claim is not None:
            return claim  # type: ignore[return-value]
        left = deadline - time.monotonic()
        if left <= 0 or not await watch.wait(wanted, left):
            return None
