"""The conductor watchdog's look (runs.watchdog): what it reads, and that every running cluster
is looked at, however many there are.

The end-to-end case (a conductor that completes without ``CLUSTER_OPERATIONS`` fails its
cluster with zeroshot's message) is in ``test_cluster_operations.py``.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.interfaces import (
    ImportedMessage,
    cluster_create,
    cluster_get,
    clusters_holding_topic,
    message_import_batch,
)
from runs.models import Task, TaskState
from runs.watchdog import CONDUCTOR_ROLE, conductor_watchdogs_fire
from tests.plans import query_plan

pytestmark = pytest.mark.django_db(transaction=True)

NOW = 10_000_000
TIMEOUT_MS = 30_000  # settings.CONDUCTOR_WATCHDOG_SECONDS
LAPSED = NOW - TIMEOUT_MS - 1


def cluster_with_tasks(
    cluster_id: str, *, state: str = "running", tasks: int = 0, finished_at: int = LAPSED
) -> None:
    """A cluster whose conductor completed at ``finished_at``, and ``tasks`` finished tasks of
    another agent before it."""
    cluster_create(cluster_id=cluster_id, config={"agents": []}, state=state)
    rows = [
        Task(
            id=f"{cluster_id}-work-{n}",
            cluster_id=cluster_id,
            agent_id="worker",
            role="implementation",
            iteration=n + 1,
            state=TaskState.COMPLETED,
            trigger_message_id=f"{cluster_id}-m{n}",
            trigger_topic="GO",
            trigger_sequence=n + 1,
            created_at=n,
            available_at=n,
            finished_at=n,
        )
        for n in range(tasks)
    ]
    rows.append(
        Task(
            id=f"{cluster_id}-conductor",
            cluster_id=cluster_id,
            agent_id="junior",
            role=CONDUCTOR_ROLE,
            iteration=1,
            state=TaskState.COMPLETED,
            trigger_message_id=f"{cluster_id}-issue",
            trigger_topic="ISSUE_OPENED",
            trigger_sequence=1,
            created_at=finished_at - 10,
            available_at=finished_at - 10,
            finished_at=finished_at,
        )
    )
    Task.objects.bulk_create(rows)


def operations_published(cluster_id: str) -> None:
    """The conductor did its job (imported: no stage acts on it)."""
    message_import_batch(
        cluster_id=cluster_id,
        messages=[
            ImportedMessage(
                id=f"{cluster_id}-ops",
                timestamp=LAPSED,
                topic="CLUSTER_OPERATIONS",
                sender="junior",
                receiver="broadcast",
                content={"data": {"operations": []}},
                metadata=None,
            )
        ],
    )


def test_a_look_seeks_the_conductors_of_running_clusters_not_the_task_history() -> None:
    # given a running and a finished cluster with a history of finished tasks
    cluster_with_tasks("live", tasks=30)
    cluster_with_tasks("gone", state="completed", tasks=30)
    operations_published("live")
    # when the watchdog looks
    with CaptureQueriesContext(connection) as looked:
        assert conductor_watchdogs_fire(now=NOW, force=True) == []
    # then it reads the running clusters' conductor completions on their partial index, and
    # which of them published operations in one more read
    [tasks_read, operations_read] = [q["sql"] for q in looked.captured_queries]
    plan = query_plan(tasks_read, [])
    assert "task_conductor_done" in plan, plan
    assert "SCAN runs_task" not in plan, plan
    assert "Seq Scan on runs_task" not in plan, plan
    assert "CLUSTER_OPERATIONS" in operations_read


def test_every_running_cluster_is_looked_at_and_one_read_tells_which_did_their_job() -> None:
    # given 120 running clusters whose conductors did their job, and one whose conductor
    # completed after all of theirs without publishing any operations
    for n in range(120):
        cluster_with_tasks(f"ok-{n:03d}", finished_at=LAPSED - 1000 + n)
        operations_published(f"ok-{n:03d}")
    cluster_with_tasks("silent")
    # when the watchdog looks
    with CaptureQueriesContext(connection) as looked:
        fired = conductor_watchdogs_fire(now=NOW, force=True)
    # then the silent one failed, and the 120 others cost one read between them
    assert fired == ["silent"]
    assert cluster_get(cluster_id="silent").state == "failed"
    assert cluster_get(cluster_id="ok-000").state == "running"
    reads = [
        q["sql"]
        for q in looked.captured_queries
        if q["sql"].startswith("SELECT") and "CLUSTER_OPERATIONS" in q["sql"]
    ]
    assert len(reads) == 2, reads  # the 121 clusters at once, then the silent one's, locked


def test_clusters_holding_topic_names_the_clusters_with_such_a_message() -> None:
    for cluster_id in ("a", "b", "c"):
        cluster_create(cluster_id=cluster_id, config={"agents": []}, state="running")
    operations_published("a")
    operations_published("c")
    assert clusters_holding_topic(
        cluster_ids=["a", "b", "c", "nope"], topic="CLUSTER_OPERATIONS"
    ) == {
        "a",
        "c",
    }
    assert clusters_holding_topic(cluster_ids=[], topic="CLUSTER_OPERATIONS") == set()
