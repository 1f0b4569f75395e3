"""Clusters full of rows to prune: messages stored the fast way (the import path), builds,
tasks, config versions and a scoped key."""

from __future__ import annotations

from django.db import models

from context.models import ContextBuild
from ledger.keys import api_key_create
from ledger.models import Cluster, ClusterConfigVersion
from ledger.search import FTS_TABLE
from ledger.services import ImportedMessage, cluster_create, message_import_batch
from runs.models import Task

DAY_MS = 86_400_000
BASE = 1_700_000_000_000


def cluster_filled(
    cluster_id: str, *, messages: int, state: str = "completed", at: int = BASE, builds: int = 3
) -> None:
    """A cluster created and last active at ``at``, with messages, builds, tasks and a key."""
    cluster_create(cluster_id=cluster_id, state=state, created_at=at, config={"agents": []})
    step = 5000
    for start in range(0, messages, step):
        batch = [
            ImportedMessage(
                id=f"{cluster_id}-m{i}",
                timestamp=at + i // 100,
                topic="AGENT_OUTPUT" if i % 3 else "ISSUE_OPENED",
                sender=f"agent{i % 4}",
                receiver="broadcast",
                content={"text": f"zebrafish {cluster_id} note {i}", "data": {"i": i}},
                metadata=None,
            )
            for i in range(start, min(messages, start + step))
        ]
        message_import_batch(cluster_id=cluster_id, messages=batch, assume_absent=True)
    for b in range(builds):
        build = ContextBuild.objects.create(
            cluster_id=cluster_id,
            agent_id="worker",
            iteration=b + 1,
            started_at=at + b,
            max_tokens=100,
            final_tokens=10,
            metrics={},
        )
        Task.objects.create(
            id=f"task_{cluster_id}_{b}".replace("-", "")[:40],
            cluster_id=cluster_id,
            agent_id="worker",
            iteration=b + 1,
            state="completed",
            trigger_message_id=f"{cluster_id}-m{b}",
            trigger_topic="ISSUE_OPENED",
            trigger_sequence=b + 1,
            build=build,
            created_at=at + b,
            available_at=at + b,
        )
    api_key_create(name=f"key-{cluster_id}", cluster_id=cluster_id)
    # Two config versions, as a CLUSTER_OPERATIONS chain leaves them (SPEC §7.7).
    for version in (1, 2):
        ClusterConfigVersion.objects.create(
            cluster_id=cluster_id, version=version, config={"agents": []}, created_at=at
        )
    # The cluster's clock stays where its history ended.
    Cluster.objects.filter(pk=cluster_id).update(last_timestamp=at + messages // 100)


def rows_referring_to(cluster_id: str) -> dict[str, int]:
    """Every table with a foreign key to clusters, and its rows that name this one."""
    counts = {}
    for relation in Cluster._meta.related_objects:
        model: type[models.Model] = relation.related_model  # type: ignore[assignment]
        field = relation.field.name
        counts[model._meta.db_table] = model._default_manager.filter(**{field: cluster_id}).count()
    counts["ledger_cluster"] = Cluster.objects.filter(pk=cluster_id).count()
    return counts


def search_index_rows(word: str) -> int:
    """Rows of the full-text index that match a word, once caught up with the messages, stale
    ones included: SQLite's FTS table keeps what it was told until told to forget it;
    PostgreSQL's GIN index is read through the expression it indexes."""
    from django.db import connection

    from ledger.search import search_index_catch_up

    search_index_catch_up()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"SELECT count(*) FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s", [word])
        else:
            cursor.execute(
                "SELECT count(*) FROM ledger_message WHERE to_tsvector('english', "
                "COALESCE(content ->> 'text', '')) @@ plainto_tsquery('english', %s)",
                [word],
            )
        row = cursor.fetchone()
        return int(row[0]) if row else 0
