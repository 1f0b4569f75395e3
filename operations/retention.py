"""Retention: export ended clusters, then delete them with everything that refers to them.

A cluster goes in bounded batches, each its own short transaction, so that other publishers
keep answering while a large ledger is deleted (docs/decisions/0110-retention.md):

1. its export (the existing JSON export, ``ledger.exporting``) is written next to the others
   as ``<id>-<created_at>.json``, through a temporary file, and kept when it is already there
   (an interrupted prune exported it before deleting anything);
2. its tasks, then its context builds (a task refers to its build), then its messages by
   sequence range (the search index follows through the database's triggers or index), each
   ``batch`` rows per transaction;
3. the cluster row, through the ORM, which also takes whatever else refers to it (its keys).

The pruner is background work on a machine that serves: after each batch, and after each page
of the export, it rests as long as the step took (at least ``MIN_PAUSE``). On SQLite that hands
the write lock to the writers queued behind it; everywhere it leaves the CPU, the disk and the
database at least half of the time to the servers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from django.db import connection, models, transaction

from context.models import ContextBuild
from ledger.exporting import cluster_export
from ledger.models import Cluster, Message
from operations.policy import RetentionPolicy
from runs.models import Task

BATCH = 500
# The least rest after a step, in seconds; a longer step is followed by a rest as long as it.
MIN_PAUSE = 0.005


@dataclass(frozen=True, slots=True)
class PrunedCluster:
    """What pruning one cluster removed, and where its export is."""

    cluster_id: str
    messages: int
    builds: int
    tasks: int
    export: Path | None


def clusters_prunable(*, policy: RetentionPolicy, now_ms: int, limit: int = 1000) -> list[str]:
    """Ended clusters in the policy's states without activity since its cutoff, oldest first.

    Read through the ``cluster_state_created`` index: a cluster is never older than its last
    activity, so ``created_at`` below the cutoff bounds the scan.
    """
    cutoff = policy.cutoff(now_ms=now_ms)
    return list(
        Cluster.objects.filter(
            state__in=policy.states, created_at__lt=cutoff, last_timestamp__lt=cutoff
        )
        .order_by("created_at", "id")
        .values_list("id", flat=True)[:limit]
    )


def cluster_prune(
    *, cluster_id: str, export_dir: Path | None = None, batch: int = BATCH
) -> PrunedCluster:
    """Export one cluster (when asked) and delete it in bounded batches."""
    cluster = Cluster.objects.only("id", "created_at", "last_sequence").get(pk=cluster_id)
    export = None
    if export_dir is not None:
        export = _export(cluster_id=cluster.id, created_at=cluster.created_at, into=export_dir)
    tasks = _delete_in_batches(Task, cluster_id=cluster.id, batch=batch)
    builds = _delete_in_batches(ContextBuild, cluster_id=cluster.id, batch=batch)
    messages = _delete_messages(cluster_id=cluster.id, upto=cluster.last_sequence, batch=batch)
    with transaction.atomic():
        Cluster.objects.filter(pk=cluster.id).delete()
    return PrunedCluster(
        cluster_id=cluster.id, messages=messages, builds=builds, tasks=tasks, export=export
    )


def clusters_prune(
    *,
    policy: RetentionPolicy,
    now_ms: int,
    export_dir: Path | None = None,
    batch: int = BATCH,
    on_pruned: Callable[[PrunedCluster], None] | None = None,
) -> list[PrunedCluster]:
    """Prune every cluster the policy selects, one after the other."""
    pruned = []
    for cluster_id in clusters_prunable(policy=policy, now_ms=now_ms):
        result = cluster_prune(cluster_id=cluster_id, export_dir=export_dir, batch=batch)
        pruned.append(result)
        if on_pruned is not None:
            on_pruned(result)
    return pruned


def _export(*, cluster_id: str, created_at: int, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    target = into / f"{cluster_id}-{created_at}.json"
    if target.exists():
        return target
    partial = target.with_suffix(".json.partial")
    with partial.open("w", encoding="utf-8") as file:
        chunks = iter(cluster_export(cluster_id=cluster_id, format="json"))

        def pages() -> Iterator[int]:
            for chunk in chunks:
                file.write(chunk)
                yield 0

        _paced(pages())
        file.flush()
        os.fsync(file.fileno())
    partial.replace(target)
    return target


def _rest(started: float) -> None:
    time.sleep(max(MIN_PAUSE, time.monotonic() - started))


def _paced(batches: Iterator[int]) -> int:
    """Run each step, resting after it as long as it took; the sum of what the steps return."""
    total = 0
    while True:
        started = time.monotonic()
        try:
            total += next(batches)
        except StopIteration:
            return total
        _rest(started)


def _delete_in_batches(model: type[models.Model], *, cluster_id: str, batch: int) -> int:
    def batches() -> Iterator[int]:
        table = model._meta.db_table
        while True:
            with transaction.atomic():
                ids = list(
                    model._default_manager.filter(cluster_id=cluster_id).values_list(
                        "pk", flat=True
                    )[:batch]
                )
                if not ids:
                    return
                with connection.cursor() as cursor:
                    marks = ", ".join(["%s"] * len(ids))
                    cursor.execute(f"DELETE FROM {table} WHERE id IN ({marks})", ids)
            yield len(ids)

    return _paced(batches())


def _delete_messages(*, cluster_id: str, upto: int, batch: int) -> int:
    """Messages by sequence range: each batch is one seek on ``(cluster, sequence)``."""

    def batches() -> Iterator[int]:
        after = 0
        while after < upto:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    f"DELETE FROM {Message._meta.db_table} "
                    "WHERE cluster_id = %s AND sequence > %s AND sequence <= %s",
                    [cluster_id, after, after + batch],
                )
                deleted = cursor.rowcount
            after += batch
            yield max(deleted, 0)

    return _paced(batches())
