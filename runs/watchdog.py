"""zeroshot's conductor watchdog (SPEC §7.7; ``orchestrator.js`` ``_registerConductorWatchdog``).

In zeroshot a conductor-role agent that completes starts a timer; when it runs out and the
cluster still holds no ``CLUSTER_OPERATIONS``, the orchestrator publishes ``CLUSTER_FAILED``:
the conductor's hook failed silently. Here the timer is the completed task's ``finished_at``:
every claim (the runners' poll, as for lapsed leases) looks, at most once a second per process,
for running clusters whose conductor task finished more than ``CONDUCTOR_WATCHDOG_SECONDS``
ago, and fails those that hold no ``CLUSTER_OPERATIONS``.
"""

from __future__ import annotations

import threading
import time
from typing import Final

from django.conf import settings
from django.db.models import Model, OuterRef, QuerySet, Subquery

from ledger import interfaces as ledger
from ledger.interfaces import ClusterState, MessageDraft, MessageFilter, Topic
from runs.models import Task, TaskState
from runs.services.queue import tasks_cancel

CONDUCTOR_ROLE: Final = "conductor"
CLUSTER_OPERATIONS: Final = "CLUSTER_OPERATIONS"
# How often one process looks at most (s): a claim must stay cheap.
_EVERY: Final = 1.0
_FIRED_PER_LOOK: Final = 20
_lock = threading.Lock()
_last_look = 0.0


def conductor_watchdogs_fire(*, now: int, force: bool = False) -> list[str]:
    """Fail the running clusters whose conductor completed ``CONDUCTOR_WATCHDOG_SECONDS`` ago
    without any ``CLUSTER_OPERATIONS``; the ids of those failed."""
    global _last_look
    with _lock:
        if not force and time.monotonic() - _last_look < _EVERY:
            return []
        _last_look = time.monotonic()
    timeout_ms = round(float(settings.CONDUCTOR_WATCHDOG_SECONDS) * 1000)
    # Per running cluster, its first conductor completion past the timeout: the running
    # clusters, and a seek of each into the index ``task_conductor_done``, whatever the history
    # of finished tasks (a join from the tasks' side read every completed task there is).
    first = (
        Task.objects.filter(
            cluster=OuterRef("pk"),
            role=CONDUCTOR_ROLE,
            state=TaskState.COMPLETED,
            finished_at__lt=now - timeout_ms,
        )
        .order_by("finished_at")
        .values("finished_at")[:1]
    )
    lapsed: list[tuple[str, int]] = list(
        _clusters()
        .filter(state=ClusterState.RUNNING)
        .annotate(first=Subquery(first))
        .filter(first__isnull=False)
        .order_by("first", "pk")
        .values_list("pk", "first")
    )
    if not lapsed:
        return []
    # A conductor that did its job is the usual case: every running cluster's is seen in one
    # read, never under its cluster's write lock, which is taken only to fail the cluster.
    done = ledger.clusters_holding_topic(
        cluster_ids=[cluster_id for cluster_id, _ in lapsed], topic=CLUSTER_OPERATIONS
    )
    fired: list[str] = []
    for cluster_id, finished_at in lapsed:
        if cluster_id in done:
            continue
        if _fire(cluster_id, completed_at=finished_at, timeout_ms=timeout_ms):
            fired.append(cluster_id)
            if len(fired) >= _FIRED_PER_LOOK:
                break
    return fired


def _clusters() -> QuerySet[Model]:
    """The clusters' table, reached through the tasks' foreign key (the ledger's models are
    its own: other apps read them through ``ledger.interfaces``, which has no such read)."""
    cluster_model = Task._meta.get_field("cluster").related_model
    assert isinstance(cluster_model, type)
    assert issubclass(cluster_model, Model)
    return cluster_model._default_manager.all()


def _fire(cluster_id: str, *, completed_at: int, timeout_ms: int) -> bool:
    with ledger.cluster_transaction(cluster_id) as writer:
        if writer.state != ClusterState.RUNNING or _has_operations(cluster_id):
            return False
        writer.append(
            [
                MessageDraft(
                    topic=Topic.CLUSTER_FAILED,
                    sender="orchestrator",
                    content={
                        "text": (
                            "Conductor completed but CLUSTER_OPERATIONS never published - "
                            "hook failure"
                        ),
                        "data": {
                            "reason": "CONDUCTOR_WATCHDOG_TIMEOUT",
                            "conductorCompletedAt": completed_at,
                            "timeoutMs": timeout_ms,
                        },
                    },
                )
            ],
            now=ledger.now_ms(),
        )
        tasks_cancel(cluster_id=cluster_id, reason="the conductor watchdog failed the cluster")
    return True


def _has_operations(cluster_id: str) -> bool:
    where = MessageFilter(topic=CLUSTER_OPERATIONS)
    return bool(ledger.message_query(cluster_id=cluster_id, where=where, limit=1))
