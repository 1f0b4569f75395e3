"""Trigger dispatch (SPEC §7.1): which messages queue which tasks, and what ends a cluster."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from context.agents import Trigger
from ledger.interfaces import (
    ImportedMessage,
    MessageDraft,
    MessageFilter,
    cluster_create,
    cluster_get,
    message_import_batch,
    message_publish,
    message_query,
)
from ledger.pipeline import pipeline
from runs.models import Task

pytestmark = pytest.mark.django_db(transaction=True)


def agent(agent_id: str, *triggers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": extra.pop("role", "implementation"),
        "prompt": "Work.",
        "triggers": list(triggers),
        **extra,
    }


def running(*agents: dict[str, Any], cluster_id: str = "c1") -> str:
    return cluster_create(
        cluster_id=cluster_id, config={"agents": list(agents)}, state="running"
    ).id


def publish(cluster_id: str, topic: str, *, sender: str = "someone", data: Any = None) -> None:
    content = {"data": data} if data is not None else {}
    message_publish(
        cluster_id=cluster_id, draft=MessageDraft(topic=topic, sender=sender, content=content)
    )


def tasks(cluster_id: str) -> list[tuple[str, str, int]]:
    return list(
        Task.objects.filter(cluster_id=cluster_id)
        .order_by("created_at", "id")
        .values_list("agent_id", "trigger_topic", "iteration")
    )


def topics(cluster_id: str, topic: str | None = None) -> list[str]:
    where = MessageFilter(topic=topic)
    return [m.topic for m in message_query(cluster_id=cluster_id, where=where, limit=None)]


@pytest.mark.parametrize(
    ("pattern", "topic", "matches"),
    [
        ("PLAN_READY", "PLAN_READY", True),
        ("PLAN_READY", "PLAN_READY_V2", False),
        ("*", "ANYTHING", True),
        ("VALIDATION_*", "VALIDATION_RESULT", True),
        ("VALIDATION_*", "VALIDATION", False),
        ("VALIDATION_*", "IMPLEMENTATION_READY", False),
    ],
)
def test_topic_patterns(pattern: str, topic: str, matches: bool) -> None:
    assert Trigger(topic=pattern).matches(topic) is matches


def test_wildcard_and_prefix_triggers_queue_tasks(db: None) -> None:
    # given an agent on everything and one on a prefix
    cid = running(
        agent("watcher", {"topic": "*"}),
        agent("checker", {"topic": "VALIDATION_*"}),
    )
    # when messages of several topics arrive
    publish(cid, "PLAN_READY")
    publish(cid, "VALIDATION_RESULT")
    # then the wildcard saw both, the prefix one only its own
    assert tasks(cid) == [
        ("watcher", "PLAN_READY", 1),
        ("watcher", "VALIDATION_RESULT", 2),
        ("checker", "VALIDATION_RESULT", 1),
    ]


def test_the_first_trigger_whose_logic_passes_decides(db: None) -> None:
    # given an agent whose first trigger's logic is false for this message
    cid = running(
        agent(
            "worker",
            {
                "topic": "GO",
                "logic": {"engine": "javascript", "script": "return false;"},
                "action": "stop_cluster",
            },
            {
                "topic": "GO",
                "logic": {"engine": "javascript", "script": "return message.content.data.n > 1;"},
            },
        )
    )
    # when two messages come, one its logic refuses
    publish(cid, "GO", data={"n": 1})
    publish(cid, "GO", data={"n": 2})
    # then only the second queued a task, and nothing stopped the cluster
    assert [t[1] for t in tasks(cid)] == ["GO"]
    assert cluster_get(cluster_id=cid).state == "running"


def test_a_stop_cluster_trigger_completes_the_cluster_and_nothing_triggers_after(
    db: None,
) -> None:
    # given a worker with a queued task and a judge that stops the cluster on DONE
    cid = running(
        agent("worker", {"topic": "WORK"}),
        agent("judge", {"topic": "DONE", "action": "stop_cluster"}),
    )
    publish(cid, "WORK")
    # when DONE arrives
    publish(cid, "DONE")
    publish(cid, "WORK")
    # then CLUSTER_COMPLETE says why, the open task is cancelled, and later work queues nothing
    complete = message_query(
        cluster_id=cid, where=MessageFilter(topic="CLUSTER_COMPLETE"), limit=None
    )
    assert [(m.sender, m.data["reason"]) for m in complete] == [
        ("judge", "all_validators_approved")
    ]
    assert cluster_get(cluster_id=cid).state == "completed"
    assert list(Task.objects.values_list("state", flat=True)) == ["cancelled"]


def test_stop_cluster_publishes_zeroshots_fixed_reason_to_system(db: None) -> None:
    # zeroshot: src/agent/agent-lifecycle.js:362-366 (executeTriggerAction: stop_cluster
    # publishes CLUSTER_COMPLETE with receiver 'system' and reason 'all_validators_approved')
    cid = running(
        agent(
            "judge",
            {
                "topic": "DONE",
                "action": "stop_cluster",
                "logic": {"engine": "javascript", "script": "return {reason: 'budget_spent'};"},
            },
        )
    )
    publish(cid, "DONE")
    [complete] = message_query(
        cluster_id=cid, where=MessageFilter(topic="CLUSTER_COMPLETE"), limit=None
    )
    assert complete.data["reason"] == "all_validators_approved"
    assert (complete.sender, complete.receiver) == ("judge", "system")


def test_past_max_iterations_the_cluster_fails(db: None) -> None:
    # given an agent allowed two iterations
    cid = running(agent("worker", {"topic": "GO"}, maxIterations=2))
    # when it is triggered three times
    for _ in range(3):
        publish(cid, "GO")
    # then the third trigger fails the cluster instead of queuing a task
    assert len(tasks(cid)) == 2
    lifecycle = message_query(
        cluster_id=cid, where=MessageFilter(topic="AGENT_LIFECYCLE"), limit=None
    )
    assert [m.data["event"] for m in lifecycle] == ["MAX_ITERATIONS_REACHED"]
    # zeroshot: src/agent/agent-lifecycle.js:394-405 (handleMaxIterations: the iterations run,
    # and CLUSTER_FAILED published by the agent itself, to system)
    assert lifecycle[0].data["iteration"] == 2
    [failed] = message_query(cluster_id=cid, where=MessageFilter(topic="CLUSTER_FAILED"))
    assert failed.data["reason"] == "max_iterations"
    assert (failed.sender, failed.receiver) == ("worker", "system")
    assert cluster_get(cluster_id=cid).state == "failed"


def test_triggers_while_busy_are_buffered_in_order(api: Any, db: None) -> None:
    # given a worker busy with a claimed task
    cid = running(agent("worker", {"topic": "GO"}))
    publish(cid, "GO")
    lease = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
    # when three more triggers arrive
    for _ in range(3):
        publish(cid, "GO")
    # then none of them is claimable while the first task runs
    assert api.post("/api/v1/tasks/claim", {"wait": 0}).status_code == 204
    # and each becomes the next task, in the order they came, once the one before ends
    claimed = [lease]
    for _ in range(3):
        done = api.post(
            f"/api/v1/tasks/{lease['id']}/complete",
            {"lease_id": lease["lease_id"], "result": {}, "output": "{}"},
        )
        assert done.status_code == 200
        lease = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
        claimed.append(lease)
    go = [m.id for m in message_query(cluster_id=cid, where=MessageFilter(topic="GO"))]
    assert [t["triggering_message"]["id"] for t in claimed] == go
    assert [t["iteration"] for t in claimed] == [1, 2, 3, 4]


def test_imported_messages_and_clusters_not_running_trigger_nothing(db: None) -> None:
    # given a running cluster and one not started
    live = running(agent("worker", {"topic": "GO"}))
    idle = cluster_create(
        cluster_id="idle", config={"agents": [agent("worker", {"topic": "GO"})]}
    ).id
    # when history is imported into the first and a message published to the second
    message_import_batch(
        cluster_id=live,
        messages=[
            ImportedMessage(
                id="old",
                timestamp=1,
                topic="GO",
                sender="s",
                receiver="broadcast",
                content={},
                metadata=None,
            )
        ],
    )
    publish(idle, "GO")
    # then no task was queued
    assert tasks(live) == []
    assert tasks(idle) == []


@pytest.mark.parametrize(
    ("script", "kind"),
    [
        ("throw new Error('boom');", "boom"),
        ("while (true) {}", "time"),
        ("const a = []; while (true) { a.push(new Array(1e6).fill(1)); }", "memory"),
    ],
)
def test_a_failing_script_reports_agent_error_while_publishing_goes_on(
    script: str, kind: str
) -> None:
    # given a running cluster whose trigger script fails, with the pipeline in its thread
    cid = running(
        agent("worker", {"topic": "GO", "logic": {"engine": "javascript", "script": script}})
    )
    with override_settings(PIPELINE_MODE="thread"):
        try:
            # when the trigger is published, and other messages right after it
            started = time.monotonic()
            publisher = threading.Thread(target=_publish_then_close, args=(cid,))
            publisher.start()
            publisher.join()
            published_in = time.monotonic() - started
            errors: list[Any] = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not errors:
                errors = message_query(cluster_id=cid, where=MessageFilter(topic="AGENT_ERROR"))
                time.sleep(0.05)
        finally:
            pipeline.stop()
    # then the publishes never waited for the script, and AGENT_ERROR says what happened
    assert published_in < 1.0
    [error] = errors
    assert error.sender == "worker"
    assert error.data["phase"] == "trigger_logic"
    assert kind in error.data["error"].lower()
    assert tasks(cid) == []
    assert topics(cid, "NEXT") == ["NEXT"] * 5


def _publish_then_close(cluster_id: str) -> None:
    try:
        publish(cluster_id, "GO")
        for _ in range(5):
            publish(cluster_id, "NEXT")
    finally:
        connection.close()


def test_a_stored_config_that_cannot_run_fails_its_cluster_and_says_why(db: None) -> None:
    # given a running cluster whose config was stored before configs were parsed at creation
    cid = running(agent("worker", {"topic": "GO", "action": "explode"}))
    # when a message arrives
    publish(cid, "GO")
    # then the cluster fails, naming the field, instead of idling with nothing queued
    [failed] = message_query(
        cluster_id=cid, where=MessageFilter(topic="CLUSTER_FAILED"), limit=None
    )
    assert failed.data["reason"] == "invalid_config"
    assert "agents[0].triggers[0].action" in failed.data["error"]
    assert cluster_get(cluster_id=cid).state == "failed"
    assert tasks(cid) == []
