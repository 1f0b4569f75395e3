"""Retention: export ended clusters, then delete them with everything that refers to them.

A cluster goes in bounded batches, each its own short transaction, so that other publishers
keep answering while a large ledger is deleted (docs/decisions/0110-retention.md):

1. its export (the existing JSON export, ``ledger.exporting``) is written next to the others
   as ``<id>-<created_at>.json``, through a temporary file, and kept when it is already there
   (an interrupted prune exported it before deleting anything);
2. its tasks, then its context builds (a task refers to its build), then its messages by
   sequence range (the search index follows through the database's triggers or index), each
   ``batch`` rows per transaction; on SQLite the pruner then waits as long as the batch held
   the write lock, so that queued writers get it in between;
3. the cluster row, through the ORM, which also takes whatever else refers to it (its keys).
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
# The least pause between two batches on SQLite, in seconds; a batch that held the write lock
# longer is followed by a pause as long as it held it.
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
        for chunk in cluster_export(cluster_id=cluster_id, format="json"):
            file.write(chunk)
        file.flush()
        os.fsync(file.fileno())
    partial.replace(target)
    return target


def _paced(batches: Iterator[int]) -> int:
    """Run each batch's deletion, pausing between them on SQLite; the rows deleted in all."""
    total = 0
    while True:
        started = time.monotonic()
        try:
            total += next(batches)
        except StopIteration:
            return total
        if connection.vendor == "sqlite":
            time.sleep(max(MIN_PAUSE, time.monotonic() - started))


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
