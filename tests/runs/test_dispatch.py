"""Trigger dispatch (SPEC §7.1): which messages queue which tasks, and what ends a cluster."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from context.agents import Trigger
from context.completion import running_agents
from ledger.interfaces import (
    ImportedMessage,
    MessageDraft,
    MessageFilter,
    cluster_create,
    cluster_get,
    message_import_batch,
    message_publish,
    message_publish_batch,
    message_query,
)
from ledger.models import Message
from ledger.pipeline import pipeline
from runs.dispatch import dispatcher, trigger_index
from runs.models import BufferedTrigger, Task
from runs.selectors import agent_activity
from runs.services import queue, task_claim, task_complete

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


def buffered(cluster_id: str) -> list[tuple[str, str, bool]]:
    return list(
        BufferedTrigger.objects.filter(cluster_id=cluster_id)
        .order_by("agent_id", "message_sequence")
        .values_list("agent_id", "topic", "dropped")
    )


def work_one(api: Any, *, output: str = "{}", **claim: Any) -> dict[str, Any] | None:
    """Claim a task and complete it; the task, or None when nothing was claimable."""
    response = api.post("/api/v1/tasks/claim", {"wait": 0, **claim})
    if response.status_code == 204:
        return None
    task: dict[str, Any] = response.json()["task"]
    done = api.post(
        f"/api/v1/tasks/{task['id']}/complete",
        {"lease_id": task["lease_id"], "result": {}, "output": output},
    )
    assert done.status_code == 200, done.content
    return task


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
    # then the wildcard matched both (the second waits in its buffer, for it is busy), the
    # prefix one only its own
    assert tasks(cid) == [
        ("watcher", "PLAN_READY", 1),
        ("checker", "VALIDATION_RESULT", 1),
    ]
    assert buffered(cid) == [("watcher", "VALIDATION_RESULT", False)]


def test_the_first_trigger_whose_topic_matches_decides(db: None) -> None:
    # zeroshot src/agent/agent-trigger-evaluator.ts:56 (`triggers.find` on the topic alone) and
    # src/agent/agent-lifecycle.js:281-330: the found trigger's logic is the only one run.
    # given an agent whose first GO trigger's logic refuses n = 1, and a second GO trigger
    cid = running(
        agent(
            "worker",
            {
                "topic": "GO",
                "logic": {"engine": "javascript", "script": "return message.content.data.n > 1;"},
            },
            {"topic": "GO", "action": "stop_cluster"},
            {"topic": "*"},
        )
    )
    # when a message its first trigger's logic refuses comes
    publish(cid, "GO", data={"n": 1})
    # then the agent does not act: later triggers are not tried
    assert tasks(cid) == []
    assert cluster_get(cluster_id=cid).state == "running"
    # and a message the logic accepts queues its task
    publish(cid, "GO", data={"n": 2})
    assert tasks(cid) == [("worker", "GO", 1)]
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


def test_past_max_iterations_the_cluster_fails(api: Any, db: None) -> None:
    # given an agent allowed two iterations
    cid = running(agent("worker", {"topic": "GO"}, maxIterations=2))
    # when it is triggered three times, each after its task before ended
    for _ in range(3):
        publish(cid, "GO")
        work_one(api)
    # then the third trigger fails the cluster instead of queuing a task
    assert len(tasks(cid)) == 2
    lifecycle = message_query(
        cluster_id=cid, where=MessageFilter(topic="AGENT_LIFECYCLE"), limit=None
    )
    assert [m.data["event"] for m in lifecycle][-1] == "MAX_ITERATIONS_REACHED"
    # zeroshot: src/agent/agent-lifecycle.js:394-405 (handleMaxIterations: the iterations run,
    # and CLUSTER_FAILED published by the agent itself, to system)
    assert lifecycle[-1].data["iteration"] == 2
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


def test_a_busy_agents_trigger_is_judged_when_it_is_idle_against_the_ledger_then(
    api: Any, db: None
) -> None:
    # zeroshot src/agent/agent-lifecycle.js:294-306 buffers a trigger-matching message before
    # its logic while the agent is busy; src/message-buffer.ts:78-100 drains it once idle, and
    # the logic (src/logic-engine.js) then reads the ledger as it is at that moment.
    # given a worker whose GO logic passes for the first GO, or once an ALLOW was published
    logic = "return message.content.data.first === true || ledger.count({ topic: 'ALLOW' }) > 0;"
    cid = running(
        agent("worker", {"topic": "GO", "logic": {"engine": "javascript", "script": logic}})
    )
    publish(cid, "GO", data={"first": True})
    lease = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
    # when a GO its logic would refuse now arrives while the worker is busy, and ALLOW after it
    publish(cid, "GO", data={"first": False})
    publish(cid, "ALLOW")
    # then it waits, unjudged
    assert buffered(cid) == [("worker", "GO", False)]
    assert tasks(cid) == [("worker", "GO", 1)]
    # and when the running task ends, it is judged with ALLOW in sight, and queues a task
    done = api.post(
        f"/api/v1/tasks/{lease['id']}/complete",
        {"lease_id": lease["lease_id"], "result": {}, "output": "{}"},
    )
    assert done.status_code == 200
    assert tasks(cid) == [("worker", "GO", 1), ("worker", "GO", 2)]
    assert buffered(cid) == []
    second = Task.objects.get(iteration=2)
    go = message_query(cluster_id=cid, where=MessageFilter(topic="GO"))
    assert second.trigger_message_id == go[1].id


def test_a_buffered_trigger_the_logic_refuses_then_is_let_go(api: Any, db: None) -> None:
    # given a busy worker whose GO logic refuses once a STOP was published
    logic = "return ledger.count({ topic: 'STOP' }) === 0;"
    cid = running(
        agent("worker", {"topic": "GO", "logic": {"engine": "javascript", "script": logic}})
    )
    publish(cid, "GO")
    lease = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
    # when GO comes while it works (its logic would pass now), then STOP
    publish(cid, "GO")
    publish(cid, "STOP")
    # and its task fails for good (AGENT_ERROR ends it as TASK_COMPLETED would)
    failed = api.post(
        f"/api/v1/tasks/{lease['id']}/fail",
        {"lease_id": lease["lease_id"], "error": "broken", "retryable": False},
    )
    assert failed.status_code == 200
    # then the buffered GO was judged as of then: refused, and gone from the buffer
    assert tasks(cid) == [("worker", "GO", 1)]
    assert buffered(cid) == []


def test_agent_iteration_is_the_number_of_tasks_the_agent_has_run(api: Any, db: None) -> None:
    # zeroshot src/agent/agent-lifecycle.js:314-318 passes agent.iteration to the logic, and
    # :647 counts it up as each task starts.
    logic = "return message.content.data.n === agent.iteration;"
    cid = running(
        agent("worker", {"topic": "GO", "logic": {"engine": "javascript", "script": logic}})
    )
    # given two tasks run, each triggered when n equalled the iterations so far
    for n in (0, 1):
        publish(cid, "GO", data={"n": n})
        assert work_one(api) is not None
    # when n lags behind the agent's iterations
    publish(cid, "GO", data={"n": 1})
    # then the logic refuses it; n = 2 is accepted
    assert len(tasks(cid)) == 2
    publish(cid, "GO", data={"n": 2})
    assert tasks(cid)[-1] == ("worker", "GO", 3)


def test_a_full_buffer_drops_its_oldest_trigger_and_counts_it(
    api: Any, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # zeroshot src/message-buffer.ts:23-37: at most 200 waiting, the oldest shifted out.
    monkeypatch.setattr(queue, "BUFFER_LIMIT", 2)
    cid = running(agent("worker", {"topic": "GO"}))
    publish(cid, "GO", data={"n": 0})
    lease = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
    # when three GOs arrive while it works
    for n in (1, 2, 3):
        publish(cid, "GO", data={"n": n})
    # then the oldest waiting one is dropped and counted, two wait
    assert buffered(cid) == [
        ("worker", "GO", True),
        ("worker", "GO", False),
        ("worker", "GO", False),
    ]
    activity = agent_activity(cluster_id=cid, agent_ids=["worker"])["worker"]
    assert (activity.state, activity.buffered, activity.dropped) == ("running", 2, 1)
    # and the two left run in turn, in the order they came
    api.post(
        f"/api/v1/tasks/{lease['id']}/complete",
        {"lease_id": lease["lease_id"], "result": {}, "output": "{}"},
    )
    ran = [work_one(api), work_one(api), work_one(api)]
    assert ran[2] is None
    go = {m.id: m.data["n"] for m in message_query(cluster_id=cid, where=MessageFilter(topic="GO"))}
    assert [go[t["triggering_message"]["id"]] for t in ran[:2] if t] == [2, 3]


def test_a_batch_reads_the_buffers_it_touches_and_keeps_each_agents_order(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given five busy agents, each with a full buffer of two (one older trigger dropped)
    monkeypatch.setattr(queue, "BUFFER_LIMIT", 2)
    names = [f"w{n}" for n in range(5)]
    cid = running(*(agent(name, {"topic": f"GO_{name.upper()}"}) for name in names))
    for round_ in range(4):
        message_publish_batch(
            cluster_id=cid,
            drafts=[
                MessageDraft(topic=f"GO_{name.upper()}", sender=f"r{round_}") for name in names
            ],
        )
    # when one batch brings each of them one more (more agents than are read one by one)
    message_publish_batch(
        cluster_id=cid,
        drafts=[MessageDraft(topic=f"GO_{name.upper()}", sender="r4") for name in names],
    )
    # then each buffer holds its two newest, the older ones dropped, as one agent's would
    senders = dict(Message.objects.filter(cluster_id=cid).values_list("message_id", "sender"))
    for name in names:
        rows = BufferedTrigger.objects.filter(cluster_id=cid, agent_id=name)
        kept = [
            senders[r.message_id] for r in rows.filter(dropped=False).order_by("message_sequence")
        ]
        assert kept == ["r3", "r4"]
        assert sorted(senders[r.message_id] for r in rows.filter(dropped=True)) == ["r1", "r2"]
    # and when one agent's task ends, its pipeline turn reads that agent's buffer alone
    claim = task_claim(cluster_id=cid, agents=["w2"])
    assert claim is not None
    with CaptureQueriesContext(connection) as completing:
        task_complete(task_id=claim.task.id, lease_id=claim.task.lease_id, result={})
    reads = [
        q["sql"]
        for q in completing.captured_queries
        if q["sql"].startswith("SELECT") and BufferedTrigger._meta.db_table in q["sql"]
    ]
    assert len(reads) == 1, reads
    assert "'w2'" in reads[0], reads
    next_task = Task.objects.filter(agent_id="w2", state="queued").get()
    assert senders[next_task.trigger_message_id] == "r3"


def test_the_buffer_outlives_the_process_that_kept_it(api: Any, db: None) -> None:
    # given a busy worker with a buffered GO, and then a server that starts afresh (nothing of
    # the trigger stage kept in memory)
    cid = running(agent("worker", {"topic": "GO"}))
    publish(cid, "GO")
    lease = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
    publish(cid, "GO")
    dispatcher._views.clear()
    # when its task ends
    api.post(
        f"/api/v1/tasks/{lease['id']}/complete",
        {"lease_id": lease["lease_id"], "result": {}, "output": "{}"},
    )
    # then the buffered GO became its next task, once
    assert tasks(cid) == [("worker", "GO", 1), ("worker", "GO", 2)]
    assert Task.objects.get(iteration=1).settled_sequence is not None
    assert buffered(cid) == []


def test_a_cluster_that_ends_lets_its_buffers_go(api: Any, db: None) -> None:
    cid = running(
        agent("worker", {"topic": "GO"}),
        agent("judge", {"topic": "DONE", "action": "stop_cluster"}),
    )
    publish(cid, "GO")
    publish(cid, "GO")
    assert buffered(cid) == [("worker", "GO", False)]
    publish(cid, "DONE")
    assert buffered(cid) == []
    assert list(Task.objects.values_list("state", flat=True)) == ["cancelled"]


def test_trigger_logic_reads_agent_output(api: Any, db: None) -> None:
    # zeroshot's ledger holds AGENT_OUTPUT (src/agent/agent-task-executor.js:1526, broadcastLine);
    # its logic engine queries it like any other topic (src/logic-engine.js).
    logic = "return ledger.count({ topic: 'AGENT_OUTPUT' }) > 0;"
    cid = running(
        agent("worker", {"topic": "GO"}),
        agent("watcher", {"topic": "LOOK", "logic": {"engine": "javascript", "script": logic}}),
    )
    publish(cid, "LOOK")
    assert tasks(cid) == []
    publish(cid, "GO")
    lease = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
    sent = api.post(
        f"/api/v1/tasks/{lease['id']}/output", {"lease_id": lease["lease_id"], "lines": ["hi"]}
    )
    assert sent.status_code == 200, sent.content
    dispatcher._views.clear()  # read from the database too, not only kept in memory
    publish(cid, "LOOK")
    assert tasks(cid) == [("worker", "GO", 1), ("watcher", "LOOK", 1)]


def test_hook_scripts_read_agent_output_too(api: Any, db: None) -> None:
    # the same view for hooks (zeroshot src/agent/agent-hook-executor.js runs them on the ledger
    # its logic engine queries)
    script = (
        "return { topic: 'DONE', content: { text: 'done',"
        " data: { outputs: ledger.count({ topic: 'AGENT_OUTPUT' }) } } };"
    )
    hook = {
        "action": "publish_message",
        "config": {"topic": "DONE"},
        "transform": {"engine": "javascript", "script": script},
    }
    cid = running(agent("worker", {"topic": "GO"}, hooks={"onComplete": hook}))
    publish(cid, "GO")
    lease = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
    for line in ("one", "two"):
        sent = api.post(
            f"/api/v1/tasks/{lease['id']}/output",
            {"lease_id": lease["lease_id"], "lines": [line]},
        )
        assert sent.status_code == 200, sent.content
    done = api.post(
        f"/api/v1/tasks/{lease['id']}/complete",
        {"lease_id": lease["lease_id"], "result": {}, "output": "{}"},
    )
    assert done.status_code == 200, done.content
    [message] = message_query(cluster_id=cid, where=MessageFilter(topic="DONE"))
    assert message.data == {"outputs": 2}


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


@pytest.mark.timed
@pytest.mark.parametrize(
    ("script", "kind"),
    [
        ("throw new Error('boom');", "boom"),
        ("while (true) {}", "time"),
        # (large blocks: the cap is reached in a tenth of a second of CPU, well inside the
        # time limit even on a loaded machine)
        ("const a = []; while (true) { a.push(new ArrayBuffer(64 * 1024 * 1024)); }", "memory"),
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


def test_a_batch_that_overflows_a_buffer_stores_the_drop_and_never_the_judged(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given an empty buffer of room 2, and one batch that keeps three messages, then judges one
    monkeypatch.setattr(queue, "BUFFER_LIMIT", 2)
    cid = running(agent("worker", {"topic": "GO"}))
    turns = queue.agent_turns(cluster_id=cid)
    writes = queue.BufferWrites()
    entries = [
        queue.Buffered(agent_id="worker", id=f"m{n}", topic="GO", sequence=n) for n in (1, 2, 3)
    ]
    for entry in entries:
        queue.buffer_push(turns, writes, entry)
    judged = queue.buffer_pop(turns, writes, "worker")
    # when the batch is written
    writes.apply(cluster_id=cid, running=True)
    # then the first is stored as dropped, the second was judged (never stored), the third waits
    assert judged == entries[1]
    rows = BufferedTrigger.objects.order_by("message_sequence")
    assert list(rows.values_list("message_id", "dropped")) == [("m1", True), ("m3", False)]


def test_a_batch_whose_writes_fail_is_written_once_when_retried(
    api: Any, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given the buffer's writes failing once after they were made, in each batch that has some
    real_apply = queue.BufferWrites.apply
    failures: list[int] = []

    def apply_then_fail(self: queue.BufferWrites, *, cluster_id: str, running: bool) -> None:
        real_apply(self, cluster_id=cluster_id, running=running)
        if len(failures) % 2 == 0:
            failures.append(1)
            raise RuntimeError("the database went away after the buffer was written")
        failures.append(0)

    monkeypatch.setattr(queue.BufferWrites, "apply", apply_then_fail)
    cid = running(agent("worker", {"topic": "GO"}))
    with override_settings(PIPELINE_ATTEMPTS=3):
        publish(cid, "GO")
        lease = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
        # when a GO is buffered, and the task's end judges it, each batch failing once
        publish(cid, "GO")
        assert buffered(cid) == [("worker", "GO", False)]
        done = api.post(
            f"/api/v1/tasks/{lease['id']}/complete",
            {"lease_id": lease["lease_id"], "result": {}, "output": "{}"},
        )
        assert done.status_code == 200
    # then every write is there once: one buffered row, then one task for it and no row left
    assert 1 in failures
    assert tasks(cid) == [("worker", "GO", 1), ("worker", "GO", 2)]
    assert buffered(cid) == []
    assert Task.objects.filter(settled_sequence__isnull=False).count() == 1


def test_the_trigger_index_is_each_agents_first_matching_trigger_kept_per_config() -> None:
    config = {
        "agents": [
            agent("a", {"topic": "PLAN_*"}, {"topic": "PLAN_READY", "action": "stop_cluster"}),
            agent("b", {"topic": "*"}),
            agent("c", {"topic": "OTHER"}),
        ]
    }
    agents = running_agents(config)
    index = trigger_index(agents)
    # the same config text gives the same parsed tuple, hence the same index
    assert trigger_index(running_agents(dict(config))) is index
    for topic in ("PLAN_READY", "PLAN", "OTHER", "CLUSTER_OPERATIONS", "NONE"):
        naive = [
            (a.id, next(t for t in a.triggers if t.matches(topic)))
            for a in agents
            if any(t.matches(topic) for t in a.triggers)
        ]
        assert [(a.id, t) for a, t in index.matching(topic)] == naive
    assert index.matching("PLAN_READY")[0][1].topic == "PLAN_*"  # the first one decides
    assert index.info("c9") is index.info("c9")
    assert index.info("c9").agents == tuple(a.raw for a in agents)
    # a changed config is indexed anew
    changed = running_agents({"agents": config["agents"][:1]})
    assert trigger_index(changed) is not index
    assert [a.id for a, _ in trigger_index(changed).matching("OTHER")] == []
