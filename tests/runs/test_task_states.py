"""The task state machine (runs/states.py): one table, every write through it, real states."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.db import connection

from ledger.interfaces import Conflict, MessageDraft, cluster_create, cluster_get, message_publish
from ledger.models import Message
from runs import states
from runs.models import OPEN_STATES, Task, TaskState
from runs.selectors import agent_activity
from runs.services import task_claim, task_complete
from runs.services.tasks import lease_look
from runs.states import TRANSITIONS, IllegalTransition, TaskEvent, next_state, task_move
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = Path(__file__).resolve().parents[2] / "runs"


def agent(agent_id: str, topic: str = "GO", **extra: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": extra.pop("role", "implementation"),
        "prompt": f"You are {agent_id}.",
        "triggers": [{"topic": topic}],
        "contextStrategy": {"sources": [{"topic": topic, "amount": 1}], "maxTokens": 4000},
        **extra,
    }


def running(*agents: dict[str, Any], cluster_id: str = "c1") -> str:
    return cluster_create(
        cluster_id=cluster_id, config={"agents": list(agents)}, state="running"
    ).id


def publish(cluster_id: str, topic: str = "GO") -> None:
    message_publish(
        cluster_id=cluster_id, draft=MessageDraft(topic=topic, sender="system", content={})
    )


def claim(api: ApiClient, **body: Any) -> Any:
    return api.post("/api/v1/tasks/claim", {"wait": 0, **body})


def lease_runs_out(task_id: str) -> None:
    Task.objects.filter(pk=task_id).update(lease_expires_at=1)
    lease_look.now()  # ended behind this process's back: its next claim looks


# --- the table -----------------------------------------------------------------------------------


@pytest.mark.parametrize("state", list(TaskState))
@pytest.mark.parametrize("event", list(TaskEvent))
def test_a_move_the_table_lacks_raises(state: TaskState, event: TaskEvent) -> None:
    if (state, event) in TRANSITIONS:
        assert next_state(state, event) == TRANSITIONS[(state, event)]
    else:
        with pytest.raises(IllegalTransition):
            next_state(state, event)


def test_final_states_are_left_by_nothing_and_open_states_agree() -> None:
    assert {
        TaskState.COMPLETED,
        TaskState.FAILED,
        TaskState.CANCELLED,
        TaskState.DROPPED,
    } == states.FINAL_STATES
    assert set(OPEN_STATES) == states.OPEN_STATES


def test_an_illegal_move_of_a_row_raises_and_leaves_it_as_it_was(api: ApiClient) -> None:
    cid = running(agent("worker"))
    publish(cid)
    task = Task.objects.get()
    with pytest.raises(IllegalTransition):
        task_move(task, TaskEvent.COMPLETE, now=1)
    assert Task.objects.get().state == TaskState.QUEUED


def test_no_module_but_the_state_machine_writes_a_task_state() -> None:
    # an assignment to a row's state, or an UPDATE that sets one (across lines)
    writes = re.compile(r"\btask\w*\.state\s*=(?!=)|\.update\((?:[^()]|\([^()]*\))*\bstate=")
    offenders = [
        f"{path.relative_to(RUNS)}: {found.group(0)[:60]}"
        for path in RUNS.rglob("*.py")
        if path.name != "states.py" and "migrations" not in path.parts
        for found in writes.finditer(path.read_text())
    ]
    assert offenders == []


# --- dropped -------------------------------------------------------------------------------------


def test_a_dropped_task_reads_cancelled_on_the_wire(api: ApiClient) -> None:
    # given a task dropped before triggers were buffered ahead of their logic (the trigger
    # buffer now drops a waiting message, never a task: docs/decisions/0130)
    cid = running(agent("worker"))
    publish(cid)
    task_move(Task.objects.get(), TaskEvent.DROP, now=1, error="dropped: 200 newer waiting")
    # then it keeps a state of its own, cancelled on the wire, and counts as dropped
    [dropped] = api.get(f"/api/v1/clusters/{cid}/tasks", state="dropped").json()["items"]
    assert (dropped["state"], dropped["state_detail"]) == ("cancelled", "dropped")
    cancelled = api.get(f"/api/v1/clusters/{cid}/tasks", state="cancelled").json()["items"]
    assert [t["id"] for t in cancelled] == [dropped["id"]]
    assert agent_activity(cluster_id=cid, agent_ids=["worker"])["worker"].dropped == 1


def test_the_migration_turns_dropped_error_prefixes_into_the_dropped_state(
    api: ApiClient,
) -> None:
    from importlib import import_module

    migration = import_module("runs.migrations.0002_task_states_expired_and_dropped")
    running(agent("worker"), agent("other"))
    publish("c1")
    first, second = Task.objects.order_by("created_at", "id")
    Task.objects.filter(pk=first.pk).update(state="cancelled", error="dropped: 200 waiting")
    Task.objects.filter(pk=second.pk).update(state="cancelled", error="the cluster stopped")
    migration.dropped_forward(django_apps, None)
    assert Task.objects.get(pk=first.pk).state == "dropped"
    assert Task.objects.get(pk=second.pk).state == "cancelled"


# --- expired -------------------------------------------------------------------------------------


def test_a_lease_that_runs_out_is_expired_claimable_again_and_reads_queued(
    api: ApiClient,
) -> None:
    # given a task whose worker vanished
    cid = running(agent("worker"), agent("other", "ELSE"))
    publish(cid)
    lost = claim(api).json()["task"]
    lease_runs_out(lost["id"])
    # when a worker of another agent claims
    assert claim(api, agents=["other"]).status_code == 204
    # then the lost task is expired: a state of its own, queued on the wire, no lease honoured
    listed = api.get(f"/api/v1/clusters/{cid}/tasks", state="expired").json()["items"]
    assert [(t["id"], t["state"], t["state_detail"]) for t in listed] == [
        (lost["id"], "queued", "expired")
    ]
    queued = api.get(f"/api/v1/clusters/{cid}/tasks", state="queued").json()["items"]
    assert [t["id"] for t in queued] == [lost["id"]]
    beat = api.post(f"/api/v1/tasks/{lost['id']}/heartbeat", {"lease_id": lost["lease_id"]})
    assert beat.status_code == 409
    # and the next claim takes it again, as a second attempt
    again = claim(api).json()["task"]
    assert (again["id"], again["attempts"], again["state"]) == (lost["id"], 2, "claimed")


def test_an_expiring_lease_counts_as_an_attempt_and_past_max_retries_fails_for_good(
    api: ApiClient,
) -> None:
    # given an agent that kills its runner every time, with one retry
    cid = running(agent("worker", maxRetries=1))
    publish(cid)
    for _ in range(2):
        lost = claim(api).json()["task"]
        lease_runs_out(lost["id"])
    # when the lease of its second attempt runs out
    assert claim(api).status_code == 204
    # then the task has failed for good, and says so
    task = Task.objects.get()
    assert (task.state, task.attempts) == ("failed", 2)
    error = Message.objects.get(topic="AGENT_ERROR")
    assert error.content["data"]["phase"] == "lease"
    assert error.content["data"]["retryBudgetExhausted"] is True
    assert error.content["data"]["taskId"] == task.id
    assert "lease expired" in error.content["data"]["error"]


# --- claims that cannot build (issue 17, item 8) ------------------------------------------------


def test_a_claim_that_cannot_build_fails_that_task_and_later_claims_move_on(
    api: ApiClient, on_postgres: bool
) -> None:
    # given an agent whose budget its build cannot store (PostgreSQL integer; SQLite 64 bits)
    huge = 3_000_000_000 if on_postgres else 2**63
    broken = agent("broken")
    broken["contextStrategy"]["maxTokens"] = huge
    cid = running(broken)
    other = running(agent("fine"), cluster_id="c2")
    publish(cid)
    publish(other)
    # when workers claim
    first = claim(api, agents=["broken"])
    second = claim(api)
    # then the broken task failed visibly, nothing answered 500, and the queue moved on
    assert first.status_code == 204, first.content
    assert second.status_code == 200, second.content
    assert second.json()["task"]["agent_id"] == "fine"
    broken_task = Task.objects.get(agent_id="broken")
    assert broken_task.state == "failed"
    error = Message.objects.get(topic="AGENT_ERROR")
    assert (error.content["data"]["phase"], error.content["data"]["taskId"]) == (
        "build",
        broken_task.id,
    )
    assert claim(api).status_code == 204
    # and an agent that can never be built is critical: its cluster fails (SPEC §7.3)
    assert cluster_get(cluster_id=cid).state == "failed"
    assert cluster_get(cluster_id=other).state == "running"


# --- idempotent completion (issue 17, item 12) --------------------------------------------------

COMPLETERS = 8


def test_concurrent_completions_with_one_body_all_get_the_same_messages(db: None) -> None:
    # given a claimed task
    cid = running(agent("worker"))
    publish(cid)
    claimed = task_claim(worker="w")
    assert claimed is not None
    start = threading.Barrier(COMPLETERS)
    answers: list[Any] = []
    lock = threading.Lock()

    def complete(result: dict[str, Any]) -> None:
        try:
            start.wait()
            done = task_complete(
                task_id=claimed.task.id, lease_id=claimed.task.lease_id, result=result
            )
            outcome: Any = [m.id for m in done.messages]
        except Exception as error:
            outcome = error
        finally:
            connection.close()
        with lock:
            answers.append(outcome)

    # when eight workers complete it at once with the same body
    threads = [
        threading.Thread(target=complete, args=({"summary": "done"},)) for _ in range(COMPLETERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # then all eight get the same messages, published once
    assert all(isinstance(a, list) for a in answers), answers
    assert len({tuple(a) for a in answers}) == 1
    assert Message.objects.filter(topic="AGENT_LIFECYCLE", event="TASK_COMPLETED").count() == 1
    # and another body is still refused
    with pytest.raises(Conflict):
        task_complete(task_id=claimed.task.id, lease_id=claimed.task.lease_id, result={"x": 1})


# --- each agent's activity -----------------------------------------------------------------------


def ended(first: Task, *states_at: tuple[TaskState, int]) -> None:
    """Finished tasks of ``first``'s agent, one per (state, created_at): copies of its row."""
    for n, (state, created_at) in enumerate(states_at):
        first.pk = f"task_{first.agent_id}_{n}"
        first.trigger_message_id = f"m-{first.agent_id}-{n}"
        first.state, first.created_at = state, created_at
        first.save(force_insert=True)


def test_agent_activity_counts_finished_tasks_and_reads_the_newest(
    django_assert_num_queries: Any,
) -> None:
    # given three agents, each triggered once, whose tasks are replaced by finished ones
    cid = running(agent("worker"), agent("checker"), agent("tied"), agent("idle", topic="NEVER"))
    publish(cid)
    firsts = {t.agent_id: t for t in Task.objects.filter(cluster_id=cid)}
    Task.objects.filter(cluster_id=cid).delete()
    completed, failed = TaskState.COMPLETED, TaskState.FAILED
    # worker: two completed, one dropped, then its newest failed
    ended(firsts["worker"], (completed, 10), (TaskState.DROPPED, 11), (completed, 12), (failed, 13))
    # checker: failed, then a newer one completed
    ended(firsts["checker"], (failed, 10), (completed, 20), (TaskState.CANCELLED, 5))
    # tied: a completed and a failed task of the same millisecond
    ended(firsts["tied"], (completed, 30), (failed, 30))

    # when the activity is read (open tasks, finished ones grouped, the buffers)
    with django_assert_num_queries(3):
        activity = agent_activity(
            cluster_id=cid, agent_ids=["worker", "checker", "tied", "idle", "ghost"]
        )

    # then each agent's counts and its state from its newest finished task
    seen = {
        a: (x.state, x.completed, x.dropped, x.buffered, x.current) for a, x in activity.items()
    }
    assert seen == {
        "worker": ("failed", 2, 1, 0, None),
        "checker": ("idle", 1, 0, 0, None),
        "tied": ("failed", 1, 0, 0, None),
        "idle": ("idle", 0, 0, 0, None),
        "ghost": ("idle", 0, 0, 0, None),
    }


def test_agent_activity_of_no_agents_reads_nothing(django_assert_num_queries: Any) -> None:
    cid = running(agent("worker"))
    publish(cid)
    with django_assert_num_queries(0):
        assert agent_activity(cluster_id=cid, agent_ids=[]) == {}
