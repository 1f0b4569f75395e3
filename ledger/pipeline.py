"""The post-commit pipeline: everything that reacts to messages runs after their commit.

A publish commits and returns; the reactions — the state snapshot, trigger dispatch, the
completion rule — are *stages* that other apps register here, run by this pipeline one cluster
at a time, in sequence order, driven by a cursor (ORCHESTRATION.md):

- Each cluster's ``pipeline_sequence`` is the truth: every message up to it has been offered to
  every stage. A run reads the messages after it (a bounded batch), asks each stage, in its
  order, what to write — *reading only*: scripts and folds run outside any write transaction,
  so they never hold SQLite's write lock — then applies every stage's writes and moves the
  cursor in one durable ledger transaction, under the cluster's row lock, and only if the cursor
  is still where the run found it. A run that raced another (a second thread, a second server)
  commits nothing; a server that dies after a commit leaves the cursor behind, and whoever runs
  next catches up. Nothing is lost, nothing is done twice.
- A stage that fails (planning or writing) makes its step commit nothing; the step is retried
  with backoff on the failing message alone, and after ``PIPELINE_ATTEMPTS`` attempts a
  ``PIPELINE_ERROR`` names the message and the stages, and the cursor moves on with the other
  stages' writes: never past work silently (docs/decisions/0088).
- Imported messages (``Message.imported``) move the cursor but are never offered (SPEC §7.1).
- What the stages write (snapshots, lifecycle messages, ``CLUSTER_COMPLETE``) goes through the
  same ledger write path and is offered to the stages in its turn.

Who runs it: with ``PIPELINE_MODE = "thread"`` (servers), a fair scheduler: a bounded pool of
worker threads taking woken clusters in turn, a bounded batch per turn (docs/decisions/0089),
plus a sweep every ``PIPELINE_SWEEP_SECONDS`` for clusters whose cursor lags (another
process's commit, a crash); with ``"inline"`` (tests), the committing thread itself,
right after the bus has delivered its messages; with ``"off"``, never in this process (a one-off
command: a server's sweep catches up).
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections
from django.db.models import F

from ledger.bus import bus
from ledger.models import Cluster
from ledger.records import ClusterRecord, MessageRecord
from ledger.search import search_index_catch_up
from ledger.services.drafts import MessageDraft
from ledger.services.publish import now_ms
from ledger.services.writer import ClusterWriter, cluster_transaction
from ledger.statements import (
    cluster_progress,
    message_topics_after,
    messages_after,
    pipeline_cluster,
    pipeline_cursor_move,
    wal_checkpoint,
)
from ledger.topics import Topic

logger = logging.getLogger(__name__)

BATCH = 500
# Failed steps wait base * 2^(attempt - 1) seconds (PIPELINE_RETRY_SECONDS), at most this.
RETRY_CAP_SECONDS = 30.0
# How often a reader waiting for the pipeline re-reads the cursor (another server's progress).
READ_POLL_SECONDS = 0.02
# How long a woken cluster waits for more commits before its turn (docs/decisions/0178).
GATHER_SECONDS = 0.002
# The least time between the starts of two turns of a cluster that commits keep waking (a
# stream of commits): one turn per moment of it (docs/decisions/0315).
STREAM_GATHER_SECONDS = 0.01
# How long after a commit SQLite's search index catches up and its WAL is checkpointed
# (docs/decisions/0313, 0314).
UPKEEP_SECONDS = 0.05
# What a stage gave up on is reported under this topic (docs/decisions/0088).
PIPELINE_ERROR = Topic.PIPELINE_ERROR
PIPELINE_SENDER = "system"
ERROR_TEXT_MAX = 2000


@dataclass(frozen=True, slots=True)
class Batch:
    """One run's share of a cluster: the messages after the cursor, in sequence order."""

    cluster: ClusterRecord
    # The cursor the run started from, and the last sequence it read.
    after: int
    upto: int
    # Every message in (after, upto], imported ones included (history a stage may read) …
    messages: tuple[MessageRecord, ...]
    # … and those that were published, not imported: the ones stages react to.
    live: tuple[MessageRecord, ...]


class Writes(Protocol):
    """What a stage decided to write for a batch; applied inside the run's transaction."""

    def apply(self, writer: ClusterWriter) -> None: ...


class Stage(Protocol):
    """A reaction to committed messages (the snapshotter, trigger dispatch, …)."""

    name: str

    def plan(self, batch: Batch) -> Writes | None:
        """Decide what to write for a batch, reading only; None when there is nothing."""
        ...


@runtime_checkable
class Selective(Stage, Protocol):
    """A stage that can tell from its cluster alone which topics it may react to.

    When every stage is selective and no published message after the cursor has one of their
    topics, the pipeline moves the cursor over those messages having read their topics only:
    no message is read whole for stages that would plan nothing (docs/decisions/0285).
    """

    def reacts_to(self, cluster: ClusterRecord) -> frozenset[str] | None:
        """The topics of published messages for which ``plan`` may write anything in
        ``cluster``; None when it may react to any message (it reads every batch whole)."""
        ...


@dataclass(frozen=True, slots=True)
class Turn:
    """What one step over a cluster did: how far it moved the cursor, or when to try again."""

    moved: int = 0
    # The cluster held messages past this step when it committed (a cut batch, the stages' own
    # messages): go round again. Commits after that wake the cluster themselves.
    more: bool = False
    # Set when a stage failed and the step committed nothing: seconds until the next attempt.
    retry_in: float | None = None
    # Another thread of this process asked for the cluster meanwhile: go round once more.
    again: bool = False


@dataclass(frozen=True, slots=True)
class _Failure:
    """A cluster whose step failed: from which cursor, and how many attempts so far."""

    at: int
    attempts: int


@dataclass(frozen=True, slots=True)
class _StageError:
    stage: str
    phase: str  # "plan" or "apply"
    error: str


class _Retry(Exception):
    """Raised inside a step's transaction to roll back an attempt that will be retried."""


class Pipeline:
    """Runs the registered stages over each cluster's new messages, in sequence order."""

    def __init__(self) -> None:
        self._stages: list[tuple[int, Stage]] = []
        # The stages again when every one of them is ``Selective``, else None.
        self._selective: tuple[Selective, ...] | None = ()
        self._guard = threading.Lock()
        self._running: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, _Failure] = {}
        self._scheduler: _Scheduler | None = None
        # Notified after every step that moved a cursor: readers waiting for the pipeline.
        self._progress = threading.Condition()

    # --- stages ---------------------------------------------------------------------------

    def register(self, stage: Stage, *, order: int) -> None:
        """Add a stage; lower ``order`` runs first (the snapshotter before triggers)."""
        with self._guard:
            others = [(o, s) for o, s in self._stages if s is not stage]
            self._stages = sorted([*others, (order, stage)], key=lambda item: item[0])
            self._selective = _all_selective(self.stages)

    def unregister(self, stage: Stage) -> None:
        with self._guard:
            self._stages = [(o, s) for o, s in self._stages if s is not stage]
            self._selective = _all_selective(self.stages)

    @property
    def stages(self) -> list[Stage]:
        return [stage for _, stage in self._stages]

    # --- running ----------------------------------------------------------------------------

    def run(self, cluster_id: str) -> int:
        """Offer the cluster's messages after its cursor to every stage until it is caught up.

        Returns how many messages this call moved the cursor over. A failing step is retried
        here after its backoff (the inline mode's publisher waits for it). When another thread
        of this process is already running the cluster, it is asked to go round once more.
        """
        if not self._enter(cluster_id):
            return 0
        moved = 0
        try:
            while True:
                with self._guard:
                    self._dirty.discard(cluster_id)
                turn = self._step(cluster_id, BATCH)
                moved += turn.moved
                if turn.retry_in is not None:
                    time.sleep(turn.retry_in)
                    continue
                if not turn.more:
                    with self._guard:
                        if cluster_id not in self._dirty:
                            return moved
        finally:
            self._leave(cluster_id)

    def turn(self, cluster_id: str, *, limit: int) -> Turn | None:
        """One bounded step over a cluster (the scheduler's unit of work); ``None`` when
        another thread of this process is running it (that one goes round again)."""
        if not self._enter(cluster_id):
            return None
        try:
            with self._guard:
                self._dirty.discard(cluster_id)
            turn = self._step(cluster_id, limit)
            with self._guard:
                again = cluster_id in self._dirty
            return Turn(moved=turn.moved, more=turn.more, retry_in=turn.retry_in, again=again)
        finally:
            self._leave(cluster_id)

    def _enter(self, cluster_id: str) -> bool:
        with self._guard:
            if cluster_id in self._running:
                self._dirty.add(cluster_id)
                return False
            self._running.add(cluster_id)
            return True

    def _leave(self, cluster_id: str) -> None:
        with self._guard:
            self._running.discard(cluster_id)

    def _step(self, cluster_id: str, limit: int) -> Turn:
        """Plan and commit one batch. A stage that fails (planning or writing) makes the whole
        step commit nothing and be retried, on the failing message alone, after a backoff;
        after ``PIPELINE_ATTEMPTS`` attempts a ``PIPELINE_ERROR`` names the message, the
        stages that failed and why, and the cursor moves on with the other stages' writes."""
        with self._guard:
            failure = self._failures.get(cluster_id)
        # Prebuilt statements: compiling these queries through the ORM cost more than running them.
        found = pipeline_cluster(cluster_id=cluster_id)
        if found is None:
            self._forget_failure(cluster_id)
            return Turn()
        cluster, after = found
        if failure is None:
            passed = self._pass_over(cluster, after)
            if passed is not None:
                return passed
        batch = _read_batch(
            cluster, after, limit=limit, narrow=failure is not None and failure.at == after
        )
        if batch is None:
            self._forget_failure(cluster_id)
            return Turn()
        if failure is not None and failure.at != batch.after:
            failure = None  # the cursor moved on (another server): a fresh start
        attempt = (failure.attempts if failure is not None else 0) + 1
        final = attempt >= max(1, int(settings.PIPELINE_ATTEMPTS))
        errors: list[_StageError] = []
        writes: list[tuple[str, Writes]] = []
        for stage in self.stages if batch.live else []:
            try:
                planned = stage.plan(batch)
            except Exception as exc:
                logger.exception(
                    "pipeline stage %s failed to plan on %s after #%s (attempt %s)",
                    stage.name,
                    cluster_id,
                    batch.after,
                    attempt,
                )
                errors.append(_StageError(stage.name, "plan", _storable(repr_error(exc))))
                continue
            if planned is not None:
                writes.append((stage.name, planned))
        if errors and not final:
            return self._retry(cluster_id, batch, attempt)
        if not writes and not errors:
            # Nothing to write (messages no stage reacts to): the cursor alone moves, in one
            # statement that moves it only from where this run found it.
            if not _cursor_move(cluster_id=cluster_id, after=batch.after, to=batch.upto):
                return Turn()  # someone else ran these messages meanwhile
            return self._moved(cluster_id, batch.after, batch.upto, last=cluster.last_sequence)
        try:
            with cluster_transaction(cluster_id) as writer:
                if writer.pipeline_sequence != batch.after:
                    return Turn()  # someone else ran these messages meanwhile
                for name, planned in writes:
                    try:
                        with _isolated(writer, final=final):
                            planned.apply(writer)
                    except Exception as exc:
                        logger.exception(
                            "pipeline writes of %s failed on %s after #%s (attempt %s)",
                            name,
                            cluster_id,
                            batch.after,
                            attempt,
                        )
                        if not final:
                            raise _Retry from exc
                        errors.append(_StageError(name, "apply", _storable(repr_error(exc))))
                if errors:
                    _report(writer, batch, errors, attempt)
                writer.pipeline_advance(batch.upto)
                last = writer.last_sequence
        except _Retry:
            return self._retry(cluster_id, batch, attempt)
        return self._moved(cluster_id, batch.after, batch.upto, last=last)

    def _pass_over(self, cluster: ClusterRecord, after: int) -> Turn | None:
        """The step for messages that no stage reacts to: the cursor moves over up to
        ``BATCH`` of them, read by their topics alone (no content, no records, no stage asked).
        None when a stage may react to one of them, or reads every message: the whole batch is
        read then, as ever. The turn's ``limit`` bounds the stages' work, of which there is none
        here, so the cursor takes the whole read in one move (docs/decisions/0285)."""
        selective = self._selective
        if selective is None:
            return None
        topics: set[str] = set()
        for stage in selective:
            wanted = stage.reacts_to(cluster)
            if wanted is None:
                return None
            topics |= wanted
        rows = message_topics_after(
            cluster_id=cluster.id, after=after, upto=cluster.last_sequence, limit=BATCH
        )
        if not rows:
            return Turn()
        if any(topic in topics and not imported for _, topic, imported in rows):
            return None
        upto = rows[-1][0]
        if not _cursor_move(cluster_id=cluster.id, after=after, to=upto):
            return Turn()  # someone else ran these messages meanwhile
        return self._moved(cluster.id, after, upto, last=cluster.last_sequence)

    def _moved(self, cluster_id: str, after: int, upto: int, *, last: int) -> Turn:
        """The step committed the cursor from ``after`` to ``upto`` while the cluster's newest
        message was ``last``: another step follows only when that is further (no read to find
        nothing)."""
        self._forget_failure(cluster_id)
        with self._progress:
            self._progress.notify_all()
        return Turn(moved=upto - after, more=last > upto)

    def _retry(self, cluster_id: str, batch: Batch, attempt: int) -> Turn:
        with self._guard:
            self._failures[cluster_id] = _Failure(at=batch.after, attempts=attempt)
        base = float(settings.PIPELINE_RETRY_SECONDS)
        return Turn(retry_in=min(RETRY_CAP_SECONDS, base * 2 ** (attempt - 1)))

    def _forget_failure(self, cluster_id: str) -> None:
        with self._guard:
            self._failures.pop(cluster_id, None)

    def wake(self, cluster_id: str, *, reader: bool = False) -> None:
        """A commit happened in ``cluster_id`` (or, with ``reader``, a read waits for its
        pipeline): run the pipeline now, or tell the scheduler."""
        mode = settings.PIPELINE_MODE
        if mode == "inline":
            self.run(cluster_id)
        elif mode == "thread":
            retiring = getattr(_current, "scheduler", None)
            if retiring is not None and retiring.stopping:
                # A turn that a stopped scheduler lets finish: its commits must not start a new
                # one (a test's teardown, a server's exit); the next sweep catches up.
                return
            scheduler = self.start()
            if reader:
                scheduler.hurry(cluster_id)
            else:
                scheduler.wake(cluster_id)

    def on_commit(self, batch: tuple[MessageRecord, ...]) -> None:
        """The bus subscription: a committed batch of published messages wakes its cluster."""
        self.wake(batch[0].cluster_id)

    # --- read-your-writes --------------------------------------------------------------------

    def caught_up(self, cluster_id: str, *, timeout: float | None = None) -> bool:
        """Wait until the pipeline has passed every message the cluster held when called.

        Reads that depend on the pipeline (the snapshot, a context build "now", the agents'
        states) call this first, so that they reflect every publish that has returned
        (docs/decisions/0090). One query when the pipeline is caught up; otherwise it wakes the
        pipeline and waits, at most ``timeout`` (``PIPELINE_READ_WAIT_SECONDS``), re-reading
        the cursor — which another server may be moving. False when the wait ran out (logged).
        """
        first = cluster_progress(cluster_id=cluster_id)
        if first is None or first[1] >= first[0]:
            return True
        target = first[0]
        wait = float(settings.PIPELINE_READ_WAIT_SECONDS if timeout is None else timeout)
        deadline = time.monotonic() + wait
        self.wake(cluster_id, reader=True)
        while True:
            at = Cluster.objects.filter(pk=cluster_id).values_list("pipeline_sequence", flat=True)
            cursor = at.first()
            if cursor is None or cursor >= target:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                logger.warning(
                    "pipeline of %s still at #%s, not #%s, after %g s: a read goes ahead stale",
                    cluster_id,
                    cursor,
                    target,
                    wait,
                )
                return False
            with self._progress:
                self._progress.wait(min(remaining, READ_POLL_SECONDS))

    # --- the scheduler ------------------------------------------------------------------------

    def start(self) -> _Scheduler:
        """Start the scheduler's workers and its sweep (once per process)."""
        running = self._scheduler
        if running is not None and running.alive():
            return running  # every commit asks: no lock when it runs already
        with self._guard:
            if self._scheduler is None or not self._scheduler.alive():
                self._scheduler = _Scheduler(
                    self,
                    workers=max(1, int(settings.PIPELINE_WORKERS)),
                    turn_messages=max(1, int(settings.PIPELINE_TURN_MESSAGES)),
                    sweep_seconds=float(settings.PIPELINE_SWEEP_SECONDS),
                )
                self._scheduler.start()
            return self._scheduler

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the scheduler (tests; a server simply exits). Waits up to ``timeout`` for the
        turns under way: a script is never interrupted."""
        with self._guard:
            scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.stop(timeout)

    def backlog(self) -> SchedulerBacklog:
        """What this process's scheduler holds: clusters ready, running, waiting to retry."""
        scheduler = self._scheduler
        return scheduler.backlog() if scheduler is not None else SchedulerBacklog(0, 0, 0, 0)


def repr_error(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _storable(text: str, limit: int = ERROR_TEXT_MAX) -> str:
    """Text that can always be stored: no lone surrogate, no NUL, at most ``limit`` chars."""
    cut = text if len(text) <= limit else text[: limit - 1] + "…"
    return "".join("\ufffd" if ch == "\x00" or "\ud800" <= ch <= "\udfff" else ch for ch in cut)


def _report(
    writer: ClusterWriter, batch: Batch, errors: Sequence[_StageError], attempts: int
) -> None:
    """Publish the ``PIPELINE_ERROR`` for a message the stages gave up on, with the cursor move.

    A failure on a pipeline error itself is only logged: reporting it would feed the failing
    stage its own reports forever.
    """
    if batch.live and all(m.topic == PIPELINE_ERROR for m in batch.live):
        logger.error(
            "pipeline of %s gave up on its own error report #%s: %s",
            batch.cluster.id,
            batch.upto,
            errors,
        )
        return
    first = batch.live[0] if batch.live else batch.messages[0]
    failed = "; ".join(f"{e.stage} ({e.phase}): {e.error}" for e in errors)
    draft = MessageDraft(
        topic=PIPELINE_ERROR,
        sender=PIPELINE_SENDER,
        content={
            "text": _storable(
                f"The pipeline gave up on message #{first.sequence} ({first.topic}) after "
                f"{attempts} attempt(s): {failed}"
            ),
            "data": {
                "messageId": first.id,
                "sequence": first.sequence,
                "topic": first.topic,
                "upto": batch.upto,
                "attempts": attempts,
                "failures": [
                    {"stage": e.stage, "phase": e.phase, "error": e.error} for e in errors
                ],
            },
        },
    )
    try:
        with writer.savepoint():
            writer.append([draft], now=now_ms())
    except Exception:
        logger.exception(
            "pipeline of %s could not report its failure on #%s; moving on",
            batch.cluster.id,
            first.sequence,
        )


def clusters_lagging(limit: int = 100) -> list[str]:
    """Clusters whose cursor is behind their newest message (a missed wake-up, a crash)."""
    lagging = Cluster.objects.filter(pipeline_sequence__lt=F("last_sequence"))
    return list(lagging.values_list("id", flat=True)[:limit])


def _isolated(writer: ClusterWriter, *, final: bool) -> AbstractContextManager[None]:
    """A stage's writes in a savepoint of their own on a step's final attempt, whose failing
    stage is reported while the others' writes commit. Before it, a failing stage rolls the
    whole step back to be retried: a savepoint (two statements) would guard nothing."""
    return writer.savepoint() if final else nullcontext()


def _all_selective(stages: Sequence[Stage]) -> tuple[Selective, ...] | None:
    """The stages as ``Selective`` ones, or None when one of them is not."""
    selective = tuple(stage for stage in stages if isinstance(stage, Selective))
    return selective if len(selective) == len(stages) else None


def _read_batch(
    cluster: ClusterRecord, after: int, *, limit: int, narrow: bool = False
) -> Batch | None:
    """The messages after the cursor ``after``, at most ``limit``; only the first one when the
    last step from this same cursor failed (``narrow``), so that retries name one message."""
    if narrow:
        limit = 1
    rows = messages_after(
        cluster_id=cluster.id, after=after, upto=cluster.last_sequence, limit=limit
    )
    if not rows:
        return None
    messages = tuple(message for message, _ in rows)
    live = tuple(message for message, imported in rows if not imported)
    return Batch(
        cluster=cluster,
        after=after,
        upto=messages[-1].sequence,
        messages=messages,
        live=live,
    )


# The scheduler whose worker the current thread is, if any.
_current = threading.local()


@dataclass(frozen=True, slots=True)
class SchedulerBacklog:
    """The scheduler's queue in this process, for the metrics."""

    ready: int
    running: int
    waiting: int
    workers: int


class _Scheduler:
    """Fair turns across clusters on a bounded pool of worker threads (a server's pipeline).

    Woken clusters wait in one round-robin queue; a worker takes the first, runs one step of at
    most ``turn_messages`` messages, and puts it back at the end of the queue while it has more.
    A cluster is on one worker at a time, so a cluster whose scripts run to their time limit
    holds one worker, never the queue: the others' turns come on the other workers. A failed
    step waits for its backoff off the queue. A sweep every ``sweep_seconds`` queues the
    clusters whose cursor lags (another process's commit, a crash, a missed wake-up).
    """

    def __init__(
        self, pipeline: Pipeline, *, workers: int, turn_messages: int, sweep_seconds: float
    ) -> None:
        self._pipeline = pipeline
        self._turn_messages = turn_messages
        self._sweep_seconds = sweep_seconds
        self._cond = threading.Condition()
        self._ready: deque[str] = deque()
        self._queued: set[str] = set()
        self._busy: set[str] = set()
        self._again: set[str] = set()
        # When each cluster's last turn started, until it is gathered again (a stream's turns
        # are spaced from it).
        self._turned_at: dict[str, float] = {}
        # Clusters on a worker that a reader waits for: their next turn is not spaced.
        self._hurried: set[str] = set()
        self._waiting: dict[str, float] = {}
        # Clusters woken by a commit, queued once ``GATHER_SECONDS`` have passed.
        self._gathering: dict[str, float] = {}
        self._delayed: list[tuple[float, str]] = []
        self._stopping = False
        self._stopped = threading.Event()
        # Threads whose loop has ended, and the process that started them: ``alive`` without a
        # look at each thread on every commit (a fork leaves the child without them).
        self._ended = 0
        self._pid = os.getpid()
        self._threads = [self._thread(self._turns, f"ledger-pipeline-{n}") for n in range(workers)]
        self._threads.append(self._thread(self._sweeps, "ledger-pipeline-sweep"))
        # SQLite's upkeep shortly after commits: its search index follows them, in batches
        # (docs/decisions/0313), and its WAL is checkpointed (0314). Set by a commit, cleared
        # when the upkeep takes it.
        self._upkeep_due = threading.Event()
        if connections[DEFAULT_DB_ALIAS].vendor == "sqlite":
            self._threads.append(self._thread(self._upkeeps, "ledger-sqlite-upkeep"))

    def _thread(self, loop: Callable[[], None], name: str) -> threading.Thread:
        """A daemon thread running ``loop``, counted in ``_ended`` once the loop ends."""

        def run() -> None:
            try:
                loop()
            finally:
                with self._cond:
                    self._ended += 1

        return threading.Thread(target=run, name=name, daemon=True)

    def start(self) -> None:
        self._pid = os.getpid()
        for thread in self._threads:
            thread.start()

    def alive(self) -> bool:
        return not self._stopping and self._ended == 0 and self._pid == os.getpid()

    def stop(self, timeout: float) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._stopped.set()
        self._upkeep_due.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def wake(self, cluster_id: str) -> None:
        """A commit in ``cluster_id``: its turn comes after ``GATHER_SECONDS``, so that the
        commits of that moment share one turn (one read, one cursor move) instead of a turn
        each; a cluster on a worker goes round again the same way after its turn. A cluster
        whose last turn started less than ``STREAM_GATHER_SECONDS`` ago (a stream of commits)
        waits until then: one turn per moment of the stream (docs/decisions/0315)."""
        if not self._upkeep_due.is_set():
            self._upkeep_due.set()
        with self._cond:
            if cluster_id in self._busy:
                self._again.add(cluster_id)
            else:
                self._gather(cluster_id)

    def hurry(self, cluster_id: str) -> None:
        """A reader waits for ``cluster_id``'s pipeline (``Pipeline.caught_up``): its turn
        comes after ``GATHER_SECONDS``, as a woken cluster's, even in a stream of commits."""
        with self._cond:
            if cluster_id in self._busy:
                self._again.add(cluster_id)
                self._hurried.add(cluster_id)
                return
            due = self._gathering.get(cluster_id)
            if due is not None and due > time.monotonic() + GATHER_SECONDS:
                del self._gathering[cluster_id]  # its entry in ``_delayed`` is then ignored
            self._gather(cluster_id, spaced=False)

    def _gather(self, cluster_id: str, *, spaced: bool = True) -> None:
        """Queue a cluster after ``GATHER_SECONDS`` (under the condition), unless it is queued,
        waiting or gathering already; when ``spaced``, not before ``STREAM_GATHER_SECONDS``
        after its last turn started."""
        if self._held(cluster_id) or cluster_id in self._gathering:
            return
        due = time.monotonic() + GATHER_SECONDS
        turned_at = self._turned_at.pop(cluster_id, None)
        if spaced and turned_at is not None:
            due = max(due, turned_at + STREAM_GATHER_SECONDS)
        self._gathering[cluster_id] = due
        heapq.heappush(self._delayed, (due, cluster_id))
        self._cond.notify()

    def _held(self, cluster_id: str) -> bool:
        return cluster_id in self._queued or cluster_id in self._waiting

    def backlog(self) -> SchedulerBacklog:
        with self._cond:
            return SchedulerBacklog(
                ready=len(self._ready),
                running=len(self._busy),
                waiting=len(self._waiting),
                workers=len(self._threads) - 1,
            )

    def _enqueue(self, cluster_id: str) -> None:
        """Queue a cluster once (under the condition); one on a worker goes round again."""
        if cluster_id in self._busy:
            self._again.add(cluster_id)
        elif not self._held(cluster_id):
            self._gathering.pop(cluster_id, None)
            self._ready.append(cluster_id)
            self._queued.add(cluster_id)
            self._cond.notify()

    def _release_due(self, now: float) -> None:
        """Queue the clusters whose gathering or backoff has ended (under the condition), in
        the order they became due."""
        while self._delayed and self._delayed[0][0] <= now:
            due, cluster_id = heapq.heappop(self._delayed)
            if self._waiting.get(cluster_id) == due:
                del self._waiting[cluster_id]
                self._enqueue(cluster_id)
            elif self._gathering.get(cluster_id) == due:
                del self._gathering[cluster_id]
                self._enqueue(cluster_id)

    def _next(self) -> str | None:
        """The next cluster to run (under the condition), or None when stopping."""
        while not self._stopping:
            now = time.monotonic()
            self._release_due(now)
            if self._ready:
                cluster_id = self._ready.popleft()
                self._queued.discard(cluster_id)
                self._busy.add(cluster_id)
                self._turned_at[cluster_id] = now
                return cluster_id
            self._cond.wait(self._delayed[0][0] - now if self._delayed else None)
        return None

    @property
    def stopping(self) -> bool:
        return self._stopping

    def _turns(self) -> None:
        _current.scheduler = self
        while True:
            with self._cond:
                cluster_id = self._next()
            if cluster_id is None:
                return
            turn: Turn | None
            try:
                turn = self._pipeline.turn(cluster_id, limit=self._turn_messages)
            except Exception:
                # Nothing committed (the database, a vanished cluster): try again later.
                logger.exception("pipeline turn failed for cluster %s", cluster_id)
                turn = Turn(retry_in=float(settings.PIPELINE_RETRY_SECONDS))
            finally:
                close_old_connections()
            with self._cond:
                self._busy.discard(cluster_id)
                again = cluster_id in self._again
                self._again.discard(cluster_id)
                if turn is None:
                    continue  # another thread of this process runs it and goes round again
                if turn.retry_in is not None:
                    due = time.monotonic() + turn.retry_in
                    self._waiting[cluster_id] = due
                    heapq.heappush(self._delayed, (due, cluster_id))
                    self._cond.notify_all()
                elif turn.again or again or turn.more:
                    # Round again (more to do, or woken during its turn): it gathers like a
                    # woken cluster, so the queue keeps the order in which clusters became
                    # ready (one back from its turn never passes one woken meanwhile), and
                    # what commits meanwhile shares its next turn. Woken during its turn, it
                    # is a stream: its next turn is spaced from this one's start, unless a
                    # reader waits for it; a backlog's turns are not.
                    spaced = not turn.more and cluster_id not in self._hurried
                    self._gather(cluster_id, spaced=spaced)
                self._hurried.discard(cluster_id)

    def _sweeps(self) -> None:
        while not self._stopping:
            try:
                lagging = clusters_lagging()
            except Exception:
                logger.exception("pipeline sweep failed")
                lagging = []
            finally:
                close_old_connections()
            with self._cond:
                # A turn further back than a stream's spacing spaces nothing: forgotten.
                since = time.monotonic() - STREAM_GATHER_SECONDS
                self._turned_at = {c: at for c, at in self._turned_at.items() if at > since}
                for cluster_id in lagging:
                    # A cluster on a worker lags by its own turn, and goes round after it
                    # while it has more: marking it again would only delay it.
                    if cluster_id not in self._busy:
                        self._gather(cluster_id)
            # Messages no commit of this process woke the upkeep for (an import, another
            # process): indexed within a sweep.
            self._upkeep_due.set()
            self._stopped.wait(self._sweep_seconds)

    def _upkeeps(self) -> None:
        """``UPKEEP_SECONDS`` after a commit woke it: catch the search index up, the commits
        of that moment in one transaction (a search catches up itself meanwhile, so it never
        misses one); then checkpoint the WAL, which the committing threads leave to this one
        (a commit that crosses ``wal_autocheckpoint`` stalled for milliseconds)."""
        while True:
            self._upkeep_due.wait()
            if self._stopping or self._stopped.wait(UPKEEP_SECONDS):
                return
            self._upkeep_due.clear()
            try:
                search_index_catch_up()
                wal_checkpoint()
            except Exception:
                logger.exception("SQLite upkeep failed")
            finally:
                close_old_connections()


pipeline = Pipeline()


def pipeline_connect() -> None:
    """Wake the pipeline after every commit of published (not imported) messages."""
    bus.subscribe_batches(pipeline.on_commit)


def _cursor_move(*, cluster_id: str, after: int, to: int) -> bool:
    """``pipeline_cursor_move`` under the cluster's delivery lock, which this process's
    publishers to the cluster hold across their write transactions: on SQLite the two take
    turns on that lock instead of meeting on the database's, where the one that waits sleeps a
    millisecond or more (docs/decisions/0314)."""
    with bus.ordered_commit(cluster_id):
        return pipeline_cursor_move(cluster_id=cluster_id, after=after, to=to)


def batch_messages(batch: Batch, topics: Sequence[str]) -> list[MessageRecord]:
    """The batch's live messages of some topics, in sequence order."""
    wanted = set(topics)
    return [m for m in batch.live if m.topic in wanted]
