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
- Imported messages (``Message.imported``) move the cursor but are never offered (SPEC §7.1).
- What the stages write (snapshots, lifecycle messages, ``CLUSTER_COMPLETE``) goes through the
  same ledger write path and is offered to the stages in its turn.

Who runs it: with ``PIPELINE_MODE = "thread"`` (servers), a worker thread woken by the bus
after each commit, plus a sweep every ``PIPELINE_SWEEP_SECONDS`` for clusters whose cursor lags
(another process's commit, a crash); with ``"inline"`` (tests), the committing thread itself,
right after the bus has delivered its messages; with ``"off"``, never in this process (a one-off
command: a server's sweep catches up).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings
from django.db import close_old_connections
from django.db.models import F

from ledger.bus import bus
from ledger.models import Cluster, Message
from ledger.records import ClusterRecord, MessageRecord
from ledger.selectors import cluster_record, message_record
from ledger.services.writer import ClusterWriter, cluster_transaction

logger = logging.getLogger(__name__)

BATCH = 500


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


class Pipeline:
    """Runs the registered stages over each cluster's new messages, in sequence order."""

    def __init__(self) -> None:
        self._stages: list[tuple[int, Stage]] = []
        self._guard = threading.Lock()
        self._running: set[str] = set()
        self._dirty: set[str] = set()
        self._worker: _Worker | None = None

    # --- stages ---------------------------------------------------------------------------

    def register(self, stage: Stage, *, order: int) -> None:
        """Add a stage; lower ``order`` runs first (the snapshotter before triggers)."""
        with self._guard:
            others = [(o, s) for o, s in self._stages if s is not stage]
            self._stages = sorted([*others, (order, stage)], key=lambda item: item[0])

    def unregister(self, stage: Stage) -> None:
        with self._guard:
            self._stages = [(o, s) for o, s in self._stages if s is not stage]

    @property
    def stages(self) -> list[Stage]:
        return [stage for _, stage in self._stages]

    # --- running ----------------------------------------------------------------------------

    def run(self, cluster_id: str) -> int:
        """Offer the cluster's messages after its cursor to every stage until it is caught up.

        Returns how many messages this call moved the cursor over. When another thread of this
        process is already running the cluster, it is asked to go round once more instead.
        """
        with self._guard:
            if cluster_id in self._running:
                self._dirty.add(cluster_id)
                return 0
            self._running.add(cluster_id)
        moved = 0
        try:
            while True:
                with self._guard:
                    self._dirty.discard(cluster_id)
                step = self._step(cluster_id)
                moved += step
                if step == 0:
                    with self._guard:
                        if cluster_id not in self._dirty:
                            return moved
        finally:
            with self._guard:
                self._running.discard(cluster_id)

    def _step(self, cluster_id: str) -> int:
        batch = _read_batch(cluster_id)
        if batch is None:
            return 0
        writes: list[Writes] = []
        for stage in self.stages:
            try:
                planned = stage.plan(batch) if batch.live else None
            except Exception:
                # A broken stage must not wedge the cluster: its reaction to this batch is lost
                # (and logged), the others' still commit.
                logger.exception("pipeline stage %s failed on %s", stage.name, cluster_id)
                continue
            if planned is not None:
                writes.append(planned)
        with cluster_transaction(cluster_id) as writer:
            if writer.pipeline_sequence != batch.after:
                return 0  # someone else ran these messages meanwhile
            for planned in writes:
                try:
                    # A savepoint each: writes that fail (a message over a limit) are dropped
                    # and logged; the others and the cursor still commit.
                    with writer.savepoint():
                        planned.apply(writer)
                except Exception:
                    logger.exception("pipeline writes %r failed on %s", planned, cluster_id)
            writer.pipeline_advance(batch.upto)
        return batch.upto - batch.after

    def wake(self, cluster_id: str) -> None:
        """A commit happened in ``cluster_id``: run the pipeline now, or tell the worker."""
        mode = settings.PIPELINE_MODE
        if mode == "inline":
            self.run(cluster_id)
        elif mode == "thread":
            self.start().wake(cluster_id)

    def on_commit(self, batch: tuple[MessageRecord, ...]) -> None:
        """The bus subscription: a committed batch of published messages wakes its cluster."""
        self.wake(batch[0].cluster_id)

    def start(self) -> _Worker:
        """Start the background worker and its sweep (once per process)."""
        with self._guard:
            if self._worker is None or not self._worker.is_alive():
                self._worker = _Worker(self)
                self._worker.start()
            return self._worker

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the background worker (tests; a server simply exits)."""
        with self._guard:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()
            worker.join(timeout)


def clusters_lagging(limit: int = 100) -> list[str]:
    """Clusters whose cursor is behind their newest message (a missed wake-up, a crash)."""
    lagging = Cluster.objects.filter(pipeline_sequence__lt=F("last_sequence"))
    return list(lagging.values_list("id", flat=True)[:limit])


def _read_batch(cluster_id: str) -> Batch | None:
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None or cluster.pipeline_sequence >= cluster.last_sequence:
        return None
    after = cluster.pipeline_sequence
    rows = list(
        Message.objects.filter(
            cluster_id=cluster_id, sequence__gt=after, sequence__lte=cluster.last_sequence
        ).order_by("sequence")[:BATCH]
    )
    if not rows:
        return None
    messages = tuple(message_record(row, cluster_id=cluster_id) for row in rows)
    live = tuple(m for m, row in zip(messages, rows, strict=True) if not row.imported)
    return Batch(
        cluster=cluster_record(cluster),
        after=after,
        upto=rows[-1].sequence,
        messages=messages,
        live=live,
    )


class _Worker(threading.Thread):
    """The pipeline's thread in a server: runs woken clusters, and sweeps for lagging ones."""

    def __init__(self, pipeline: Pipeline) -> None:
        super().__init__(name="ledger-pipeline", daemon=True)
        self._pipeline = pipeline
        self._wanted: dict[str, None] = {}
        self._wakeup = threading.Condition()
        self._stopping = False

    def wake(self, cluster_id: str) -> None:
        with self._wakeup:
            self._wanted[cluster_id] = None
            self._wakeup.notify()

    def stop(self) -> None:
        with self._wakeup:
            self._stopping = True
            self._wakeup.notify()

    def run(self) -> None:
        sweep_every = float(settings.PIPELINE_SWEEP_SECONDS)
        next_sweep = 0.0
        while True:
            if time.monotonic() >= next_sweep:
                self._sweep()
                next_sweep = time.monotonic() + sweep_every
            with self._wakeup:
                if not self._wanted and not self._stopping:
                    self._wakeup.wait(max(0.0, next_sweep - time.monotonic()))
                if self._stopping:
                    return
                wanted, self._wanted = list(self._wanted), {}
            for cluster_id in wanted:
                self._run_one(cluster_id)

    def _sweep(self) -> None:
        try:
            lagging = clusters_lagging()
        except Exception:
            logger.exception("pipeline sweep failed")
            lagging = []
        finally:
            close_old_connections()
        for cluster_id in lagging:
            self._run_one(cluster_id)

    def _run_one(self, cluster_id: str) -> None:
        try:
            self._pipeline.run(cluster_id)
        except Exception:
            # The cursor did not move: the next wake-up or sweep tries again.
            logger.exception("pipeline run failed for cluster %s", cluster_id)
        finally:
            close_old_connections()


pipeline = Pipeline()


def pipeline_connect() -> None:
    """Wake the pipeline after every commit of published (not imported) messages."""
    bus.subscribe_batches(pipeline.on_commit)


def batch_messages(batch: Batch, topics: Sequence[str]) -> list[MessageRecord]:
    """The batch's live messages of some topics, in sequence order."""
    wanted = set(topics)
    return [m for m in batch.live if m.topic in wanted]
