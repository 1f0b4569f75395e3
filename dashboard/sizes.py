"""Each cluster's size on the cluster list: the rows that retention would delete with it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import CharField, Count, Value

from context.models import ContextBuild
from ledger.interfaces import ClusterRecord
from runs.models import Task


@dataclass(frozen=True, slots=True)
class ClusterSize:
    """A cluster's stored rows: its messages, context builds and tasks."""

    messages: int
    builds: int
    tasks: int

    @property
    def rows(self) -> int:
        return self.messages + self.builds + self.tasks


def cluster_sizes(*, clusters: Sequence[ClusterRecord]) -> dict[str, ClusterSize]:
    """The size of each cluster, in one query: the messages are the cluster's own count, builds
    and tasks are counted by cluster through their ``(cluster, …)`` indexes."""
    ids = [c.id for c in clusters]
    counts: dict[tuple[str, str], int] = {}
    if ids:
        kind: CharField[str, str] = CharField()
        builds = (
            ContextBuild.objects.filter(cluster_id__in=ids)
            .values("cluster_id")
            .annotate(kind=Value("builds", output_field=kind), n=Count("pk"))
            .values_list("cluster_id", "kind", "n")
            .order_by()
        )
        tasks = (
            Task.objects.filter(cluster_id__in=ids)
            .values("cluster_id")
            .annotate(kind=Value("tasks", output_field=kind), n=Count("pk"))
            .values_list("cluster_id", "kind", "n")
            .order_by()
        )
        counts = {(c, k): n for c, k, n in builds.union(tasks, all=True)}
    return {
        c.id: ClusterSize(
            messages=c.message_count,
            builds=counts.get((c.id, "builds"), 0),
            tasks=counts.get((c.id, "tasks"), 0),
        )
        for c in clusters
    }
