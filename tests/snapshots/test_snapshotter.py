"""The live state snapshot (SPEC §5) through the real publish path and the bus."""

from __future__ import annotations

import itertools
import logging
import random
import threading
from typing import Any

import pytest
from django.db import connection

from ledger.filters import MessageFilter
from ledger.interfaces import (
    ImportedMessage,
    MessageDraft,
    MessageRecord,
    message_import_batch,
    message_publish,
    message_publish_batch,
    message_query,
)
from ledger.pipeline import pipeline
from snapshots.snapshotter import snapshot_latest
from snapshots.state import SNAPSHOT_TRIGGER_TOPICS, snapshot_equal, snapshot_fold
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)


def publish(cluster: str, topic: str, *, text: str | None = None, data: Any = None) -> None:
    content: dict[str, Any] = {}
    if text is not None:
        content["text"] = text
    if data is not None:
        content["data"] = data
    message_publish(
        cluster_id=cluster, draft=MessageDraft(topic=topic, sender="agent", content=content)
    )


def snapshots(cluster: str) -> list[MessageRecord]:
    return message_query(
        cluster_id=cluster, limit=1000, where=MessageFilter(topic="STATE_SNAPSHOT")
    )


def latest_data(cluster: str) -> dict[str, Any]:
    snapshot = snapshot_latest(cluster_id=cluster)
    assert snapshot is not None
    data: dict[str, Any] = snapshot.data
    return data


def test_plan_ready_v2_replaces_v1(cluster: str) -> None:
    # given a first plan and its snapshot
    publish(
        cluster,
        "PLAN_READY",
        text="Plan v1",
        data={
            "summary": "first",
            "acceptanceCriteria": [{"id": "AC0", "priority": "SHOULD", "criterion": "Old"}],
            "filesAffected": ["old.js"],
        },
    )
    assert len(snapshots(cluster)) == 1
    # when a second plan is published
    publish(
        cluster,
        "PLAN_READY",
        text="Plan v2",
        data={
            "acceptanceCriteria": [{"id": "AC1", "priority": "MUST", "criterion": "New criteria"}],
            "filesAffected": ["new.js"],
        },
    )
    # then a new snapshot holds only the second plan
    published = snapshots(cluster)
    assert len(published) == 2
    newest = published[-1]
    assert (newest.topic, newest.sender) == ("STATE_SNAPSHOT", "state-snapshotter")
    plan = newest.data["plan"]
    assert plan["text"] == "Plan v2"
    assert plan["acceptanceCriteria"] == ["AC1 (MUST): New criteria"]
    assert plan["filesAffected"] == ["new.js"]
    assert "summary" not in plan
    plan_v2 = message_query(cluster_id=cluster, limit=10, where=MessageFilter(topic="PLAN_READY"))[
        -1
    ]
    assert newest.data["sourceMessageId"] == plan_v2.id
    assert newest.data["clusterId"] == cluster
    assert newest.data["version"] == 1


def test_worker_progress_sets_percent_and_next_steps(cluster: str) -> None:
    # when a worker reports its completion status
    publish(
        cluster,
        "WORKER_PROGRESS",
        text="Halfway there",
        data={
            "completionStatus": {
                "canValidate": False,
                "percentComplete": 45,
                "nextSteps": ["Write tests", "Run lint"],
            }
        },
    )
    # then the snapshot carries it, false included
    progress = latest_data(cluster)["progress"]
    assert progress["percentComplete"] == 45
    assert progress["nextSteps"] == ["Write tests", "Run lint"]
    assert progress["canValidate"] is False


def test_validation_result_errors_are_stored_as_is(cluster: str) -> None:
    # when a validator rejects
    publish(
        cluster,
        "VALIDATION_RESULT",
        data={"approved": False, "errors": ["Missing tests", "Type error"]},
    )
    # then the errors are kept verbatim
    validation = latest_data(cluster)["validation"]
    assert validation["approved"] is False
    assert validation["errors"] == ["Missing tests", "Type error"]


def test_investigation_complete_fills_debug(cluster: str) -> None:
    # when an investigator finishes
    publish(
        cluster,
        "INVESTIGATION_COMPLETE",
        text="1. Guard the null user\n2. Add a regression test",
        data={"rootCauses": ["user is null after logout"], "successCriteria": "tests pass"},
    )
    # then the fix plan comes from the text and the root causes from the data
    debug = latest_data(cluster)["debug"]
    assert debug["fixPlan"] == "1. Guard the null user\n2. Add a regression test"
    assert debug["rootCauses"] == ["user is null after logout"]
    assert debug["successCriteria"] == "tests pass"


def test_identical_state_publishes_no_new_snapshot(cluster: str) -> None:
    # given a plan and its snapshot
    plan = {"summary": "s", "filesAffected": ["a.py"]}
    publish(cluster, "PLAN_READY", text="Plan", data=plan)
    assert len(snapshots(cluster)) == 1
    # when the same plan is published again, and progress without progress fields
    publish(cluster, "PLAN_READY", text="Plan", data=plan)
    publish(cluster, "WORKER_PROGRESS", text="still working")
    # then no new snapshot is stored
    assert len(snapshots(cluster)) == 1
    # and a real change still is
    publish(cluster, "PLAN_READY", text="Plan 2", data=plan)
    assert len(snapshots(cluster)) == 2


def test_trigger_without_any_state_publishes_nothing(cluster: str) -> None:
    # when progress without progress fields is the only trigger
    publish(cluster, "WORKER_PROGRESS", text="started")
    # then there is no state to snapshot
    assert snapshots(cluster) == []


def test_summary_text_has_one_line_per_section(cluster: str) -> None:
    # when every kind of trigger has been published
    publish(cluster, "ISSUE_OPENED", text="# Add login\nA button on the home page")
    publish(cluster, "PLAN_READY", text="Add a login button\nthen wire it")
    publish(
        cluster,
        "WORKER_PROGRESS",
        data={"canValidate": True, "percentComplete": 80, "nextSteps": ["Run lint"]},
    )
    publish(cluster, "VALIDATION_RESULT", data={"approved": False, "errors": ["No test"]})
    publish(cluster, "INVESTIGATION_COMPLETE", text="Fix the handler")
    # then the newest snapshot's text is the five-line summary
    snapshot = snapshot_latest(cluster_id=cluster)
    assert snapshot is not None
    assert snapshot.text == "\n".join(
        [
            "Task: Add login",
            "Plan: Add a login button",
            "Progress: 80% | canValidate=true | next: Run lint",
            "Validation: rejected (1 errors)",
            "Debug: Fix the handler",
        ]
    )


def test_other_topics_and_batches(cluster: str) -> None:
    # when a batch holds two triggers and a message of another topic
    message_publish_batch(
        cluster_id=cluster,
        drafts=[
            MessageDraft(topic="ISSUE_OPENED", sender="system", content={"text": "Task one"}),
            MessageDraft(topic="AGENT_OUTPUT", sender="worker", content={"text": "chatter"}),
            MessageDraft(topic="PLAN_READY", sender="planner", content={"text": "Plan one"}),
        ],
    )
    # then the snapshot covers the whole batch
    data = latest_data(cluster)
    assert data["task"]["title"] == "Task one"
    assert data["plan"]["text"] == "Plan one"
    assert snapshots(cluster)[-1].sequence > 3


def test_imported_messages_produce_no_snapshot(cluster: str) -> None:
    # when a zeroshot ledger's trigger messages are imported
    message_import_batch(
        cluster_id=cluster,
        messages=[
            ImportedMessage(
                "msg-1", 1_000, "ISSUE_OPENED", "system", "broadcast", {"text": "T"}, None
            ),
            ImportedMessage(
                "msg-2", 2_000, "PLAN_READY", "planner", "broadcast", {"text": "Plan"}, None
            ),
        ],
    )
    # then no snapshot is made for them
    assert snapshots(cluster) == []


def test_imported_snapshot_is_kept_and_extended(cluster: str) -> None:
    # given an imported ledger with its own snapshot
    task = {"raw": "Imported task", "title": "Imported task", "source": "text"}
    message_import_batch(
        cluster_id=cluster,
        messages=[
            ImportedMessage(
                "msg-1",
                1_000,
                "ISSUE_OPENED",
                "system",
                "broadcast",
                {"text": "Imported task"},
                None,
            ),
            ImportedMessage(
                "msg-2",
                1_001,
                "STATE_SNAPSHOT",
                "state-snapshotter",
                "broadcast",
                {
                    "text": "Task: Imported task",
                    "data": {"version": 1, "sourceMessageId": "msg-1", "task": task},
                },
                None,
            ),
        ],
    )
    # when the cluster resumes live with a plan
    publish(cluster, "PLAN_READY", text="Resumed plan")
    # then the imported snapshot is untouched and the new one builds on it
    published = snapshots(cluster)
    assert published[0].id == "msg-2"
    assert published[0].data["task"] == task
    assert published[-1].data["task"] == task
    assert published[-1].data["plan"]["text"] == "Resumed plan"


def test_a_failing_snapshotter_never_breaks_a_publish(
    cluster: str, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # given a JSON limit that the trigger fits in but the snapshot it leads to does not
    settings.LEDGER_MAX_JSON_BYTES = 120
    caplog.set_level(logging.ERROR, logger="ledger.pipeline")
    # when the trigger is published
    message_publish(
        cluster_id=cluster,
        draft=MessageDraft(
            topic="PLAN_READY",
            sender="planner",
            content={"text": "A plan long enough " * 5, "data": {"filesAffected": ["a.py"]}},
        ),
    )
    # then the trigger is stored, the failure logged and no snapshot made
    assert [m.topic for m in message_query(cluster_id=cluster)] == ["PLAN_READY"]
    assert any("pipeline stage snapshot failed" in r.getMessage() for r in caplog.records)
    assert snapshots(cluster) == []


def test_snapshot_endpoint(api: ApiClient, cluster: str) -> None:
    # given a cluster without a snapshot
    missing = api.get(f"/api/v1/clusters/{cluster}/snapshot")
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"
    # when a trigger is published through the API
    created = api.post(
        f"/api/v1/clusters/{cluster}/messages",
        {"topic": "ISSUE_OPENED", "sender": "system", "content": {"text": "Fix login"}},
    )
    assert created.status_code == 201
    # then the endpoint returns the snapshot message in the wire shape
    response = api.get(f"/api/v1/clusters/{cluster}/snapshot")
    assert response.status_code == 200
    body = response.json()
    assert body["topic"] == "STATE_SNAPSHOT"
    assert body["sender"] == "state-snapshotter"
    assert body["sequence"] == "2"
    assert body["content"]["text"] == "Task: Fix login"
    assert body["content"]["data"]["sourceMessageId"] == created.json()["id"]
    assert api.get("/api/v1/clusters/nope/snapshot").status_code == 404


THREADS = 8
PER_THREAD = 25


def trigger_draft(rng: random.Random, thread: int, index: int) -> MessageDraft:
    topic = rng.choice(SNAPSHOT_TRIGGER_TOPICS)
    label = f"t{thread}-{index}"
    data: dict[str, Any] = {
        "ISSUE_OPENED": {"title": label},
        "PLAN_READY": {"summary": label, "filesAffected": [f"{label}.py"]},
        "WORKER_PROGRESS": {"percentComplete": rng.randint(0, 100), "nextSteps": [label]},
        "IMPLEMENTATION_READY": {"canValidate": rng.random() < 0.5},
        "VALIDATION_RESULT": {"approved": rng.random() < 0.5, "errors": [label]},
        "INVESTIGATION_COMPLETE": {"rootCauses": [label]},
    }[topic]
    return MessageDraft(topic=topic, sender=f"w{thread}", content={"text": label, "data": data})


def test_concurrent_publishers_end_on_the_fold_in_sequence_order(cluster: str) -> None:
    # given eight threads publishing trigger messages at the same time
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def publisher(thread: int) -> None:
        rng = random.Random(thread)
        try:
            start.wait()
            for index in range(PER_THREAD):
                message_publish(cluster_id=cluster, draft=trigger_draft(rng, thread, index))
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=publisher, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # then the newest snapshot equals folding every trigger message in sequence order
    assert errors == []
    triggers = [
        m
        for m in message_query(cluster_id=cluster, limit=1000)
        if m.topic in SNAPSHOT_TRIGGER_TOPICS
    ]
    assert len(triggers) == THREADS * PER_THREAD
    expected = snapshot_fold(sorted(triggers, key=lambda m: m.sequence), cluster_id=cluster)
    final = latest_data(cluster)
    assert snapshot_equal(final, expected)
    assert final["sourceMessageId"] == max(triggers, key=lambda m: m.sequence).id
    # and no snapshot repeats the state of the one before it
    published = snapshots(cluster)
    assert all(not snapshot_equal(a.data, b.data) for a, b in itertools.pairwise(published))


def test_refresh_without_new_triggers_publishes_nothing(cluster: str) -> None:
    # given a cluster whose snapshot is up to date
    publish(cluster, "ISSUE_OPENED", text="Task")
    before = snapshots(cluster)
    # when the pipeline runs again (another process, say)
    moved = pipeline.run(cluster)
    # then nothing is published
    assert moved == 0
    assert snapshots(cluster) == before
