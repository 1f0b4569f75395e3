"""Tasks under leases through the work API (SPEC §7.3, §7.4)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from context.models import ContextBuild
from ledger.interfaces import (
    Conflict,
    MessageDraft,
    MessageFilter,
    cluster_create,
    cluster_get,
    message_publish,
    message_query,
    now_ms,
)
from ledger.keys import api_key_create
from ledger.models import Message
from runs import statements
from runs.models import BufferedTrigger, Runner, Task
from runs.services import task_claim, task_complete
from runs.services.tasks import lease_look, tasks_expire
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "summary": {"type": "string"}},
    "required": ["approved"],
}


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


def publish(cluster_id: str, topic: str = "GO", text: str = "go") -> None:
    message_publish(
        cluster_id=cluster_id,
        draft=MessageDraft(topic=topic, sender="system", content={"text": text}),
    )


def claim(api: ApiClient, **body: Any) -> dict[str, Any]:
    response = api.post("/api/v1/tasks/claim", {"wait": 0, **body})
    assert response.status_code == 200, response.content
    return dict(response.json())


def complete(api: ApiClient, task: dict[str, Any], result: Any = None, **extra: Any) -> Any:
    body = {"lease_id": task["lease_id"], "result": result or {"summary": "done"}, **extra}
    return api.post(f"/api/v1/tasks/{task['id']}/complete", body)


def test_a_claim_returns_the_task_its_prompt_and_the_agent(api: ApiClient) -> None:
    # given a queued task
    cid = running(agent("worker", jsonSchema=SCHEMA))
    publish(cid, text="Fix the login page")
    # when a worker claims it
    claimed = claim(api, worker="w1", lease=60)
    # then it holds a lease, the recorded build's prompt and the agent's own config
    task = claimed["task"]
    assert task["agent_id"] == "worker"
    assert task["state"] == "claimed"
    assert task["attempts"] == 1
    assert task["worker"] == "w1"
    assert task["lease_seconds"] == 60
    assert len(task["lease_id"]) == 32
    assert "Fix the login page" in claimed["prompt"]
    assert claimed["metrics"]["agentId"] == "worker"
    assert claimed["agent"]["jsonSchema"] == SCHEMA
    assert claimed["agent"]["outputFormat"] == "json"
    assert "triggers" not in claimed["agent"]
    build = ContextBuild.objects.get(pk=task["build_id"])
    assert build.iteration == 1
    started = message_query(cluster_id=cid, where=MessageFilter(topic="AGENT_LIFECYCLE"))
    assert [(m.data["event"], m.data["taskId"]) for m in started] == [("TASK_STARTED", task["id"])]
    # and nothing is left to claim
    assert api.post("/api/v1/tasks/claim", {"wait": 0}).status_code == 204


def test_claims_follow_the_filters(api: ApiClient) -> None:
    cid = running(agent("a"), agent("b", role="validator"))
    publish(cid)
    assert claim(api, agents=["b"])["task"]["agent_id"] == "b"
    assert claim(api, roles=["implementation"])["task"]["agent_id"] == "a"


def test_completing_twice_returns_the_same_messages_and_another_body_conflicts(
    api: ApiClient,
) -> None:
    cid = running(agent("worker"))
    publish(cid)
    task = claim(api)["task"]
    usage = {"inputTokens": 900, "outputTokens": 80, "model": "m", "costUsd": 0.01}

    first = complete(api, task, {"summary": "done", "result": "ok"}, usage=usage)
    again = complete(api, task, {"summary": "done", "result": "ok"}, usage=usage)
    other = complete(api, task, {"summary": "something else", "result": "ok"}, usage=usage)

    assert first.status_code == again.status_code == 200
    assert [m["id"] for m in again.json()["messages"]] == [
        m["id"] for m in first.json()["messages"]
    ]
    assert [m["topic"] for m in first.json()["messages"]] == ["TOKEN_USAGE", "AGENT_LIFECYCLE"]
    assert other.status_code == 409
    assert Message.objects.filter(topic="TOKEN_USAGE").count() == 1
    # the build keeps what the model billed next to its own estimate
    build = ContextBuild.objects.get(pk=task["build_id"])
    assert build.reported_usage["inputTokens"] == 900


def _after_the_first_read_of(task_id: str, then: Any) -> Any:
    """A database wrapper that runs ``then`` once, right after the first statement that reads
    ``task_id``'s row: what another server does while a completion's hook runs."""
    done: list[bool] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        out = execute(sql, params, many, context)
        if not done and sql.startswith("SELECT") and params and task_id in params:
            done.append(True)
            then()
        return out

    return wrapper


@pytest.mark.parametrize("same_body", [True, False])
def test_a_completion_that_lands_while_another_ones_hook_runs_wins_alone(
    same_body: bool,
) -> None:
    # given a claimed task
    cid = running(agent("worker"))
    publish(cid)
    claimed = task_claim(worker="w")
    assert claimed is not None
    task_id, lease_id = claimed.task.id, claimed.task.lease_id
    theirs: list[Any] = []
    counted: list[int] = []

    def complete_meanwhile() -> None:
        body = {"summary": "done"} if same_body else {"summary": "other"}
        theirs.append(task_complete(task_id=task_id, lease_id=lease_id, result=body))
        counted.append(Message.objects.count())

    # when another completion lands after this one read the task, before it writes
    with connection.execute_wrapper(_after_the_first_read_of(task_id, complete_meanwhile)):
        if same_body:
            ours = task_complete(task_id=task_id, lease_id=lease_id, result={"summary": "done"})
        else:
            with pytest.raises(Conflict):
                task_complete(task_id=task_id, lease_id=lease_id, result={"summary": "done"})
    # then the task was completed once: with the same body both got its messages, with
    # another this one was refused; nothing of the refused one was kept
    [first] = theirs
    if same_body:
        assert [m.id for m in ours.messages] == [m.id for m in first.messages]
    completed = Message.objects.filter(topic="AGENT_LIFECYCLE", event="TASK_COMPLETED")
    assert completed.count() == 1
    assert Task.objects.get(pk=task_id).state == "completed"
    assert Message.objects.count() == counted[0]


def test_a_lease_that_moves_while_the_hook_runs_refuses_the_completion() -> None:
    # given a claimed task
    cid = running(agent("worker"))
    publish(cid)
    claimed = task_claim(worker="w")
    assert claimed is not None
    task_id, lease_id = claimed.task.id, claimed.task.lease_id
    before = Message.objects.count()

    def lease_runs_out() -> None:
        Task.objects.filter(pk=task_id).update(lease_expires_at=1)
        assert tasks_expire(now=2) == 1

    # when its lease is ended after the completion read the task, before it writes
    with (
        connection.execute_wrapper(_after_the_first_read_of(task_id, lease_runs_out)),
        pytest.raises(Conflict),
    ):
        task_complete(task_id=task_id, lease_id=lease_id, result={"summary": "done"})
    # then it is refused and wrote nothing: the task is expired, as the expiry left it
    assert Task.objects.get(pk=task_id).state == "expired"
    assert not Message.objects.filter(event="TASK_COMPLETED").exists()
    assert Message.objects.count() == before
    assert Runner.objects.get(name="w").completed == 0


def test_a_claim_looks_for_lapsed_leases_only_when_one_may_have_run_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given two agents with a task each, this process's clock, and its looks at the leases
    cid = running(agent("a"), agent("b"))
    publish(cid)
    start = now_ms()
    clock = [start]
    monkeypatch.setattr("ledger.interfaces.now_ms", lambda: clock[0])
    looks: list[int] = []
    leases_first = statements.leases_first

    def looked(*, limit: int) -> list[Task]:
        looks.append(clock[0] - start)
        return leases_first(limit=limit)

    monkeypatch.setattr(statements, "leases_first", looked)
    # when a's task is claimed under the shortest lease (5 s), b's just before a second has
    # passed, then claims come for a, whose task is held, until its lease has run out
    first = task_claim(agents=["a"], lease_seconds=5)
    clock[0] = start + 999
    assert task_claim(agents=["b"], lease_seconds=5) is not None
    for at in (1000, 1500, 5000):
        clock[0] = start + at
        assert task_claim(agents=["a"]) is None
    clock[0] = start + 5001
    again = task_claim(agents=["a"])
    # then the leases were read by the first claim, a second after it (a's lease seen, due
    # at 5 s), when that lease was due, and once it had run out, when a's task was taken again
    assert looks == [0, 1000, 5000, 5001]
    assert first is not None
    assert again is not None
    assert again.task.id == first.task.id
    assert again.task.attempts == 2


def test_a_lost_lease_is_claimed_again_and_the_late_worker_gets_409(api: ApiClient) -> None:
    # given a task claimed by a worker that stopped heartbeating
    cid = running(agent("worker"))
    publish(cid)
    late = claim(api, worker="late")["task"]
    beat = api.post(f"/api/v1/tasks/{late['id']}/heartbeat", {"lease_id": late["lease_id"]})
    assert beat.status_code == 200
    Task.objects.filter(pk=late["id"]).update(lease_expires_at=1)  # its lease has run out
    lease_look.now()  # behind this process's back: its next claim looks
    # when another worker claims
    fresh = claim(api, worker="fresh")["task"]
    # then it gets the same task under a new lease, and the late worker is refused
    assert fresh["id"] == late["id"]
    assert fresh["lease_id"] != late["lease_id"]
    assert fresh["attempts"] == 2
    for path, body in [
        ("heartbeat", {}),
        ("output", {"lines": ["x"]}),
        ("complete", {"result": {}}),
        ("fail", {"error": "x"}),
    ]:
        response = api.post(
            f"/api/v1/tasks/{late['id']}/{path}", {"lease_id": late["lease_id"], **body}
        )
        assert response.status_code == 409, path
        assert response.json()["code"] == "conflict"
    assert complete(api, fresh).status_code == 200


def test_a_retryable_failure_retries_with_backoff_then_fails_for_good(api: ApiClient) -> None:
    cid = running(agent("worker", maxRetries=1))
    publish(cid)
    with override_settings(RUNS_RETRY_BASE_SECONDS=0):
        first = claim(api)["task"]
        retried = api.post(
            f"/api/v1/tasks/{first['id']}/fail", {"lease_id": first["lease_id"], "error": "crash"}
        )
        assert retried.json()["state"] == "queued"
        second = claim(api)["task"]
        failed = api.post(
            f"/api/v1/tasks/{second['id']}/fail",
            {"lease_id": second["lease_id"], "error": "crash again"},
        )
    assert failed.json()["state"] == "failed"
    events = message_query(
        cluster_id=cid, where=MessageFilter(topic=("AGENT_LIFECYCLE", "AGENT_ERROR")), limit=None
    )
    assert [(m.topic, m.data.get("event")) for m in events] == [
        ("AGENT_LIFECYCLE", "TASK_STARTED"),
        ("AGENT_LIFECYCLE", "RETRY_SCHEDULED"),
        ("AGENT_LIFECYCLE", "TASK_STARTED"),
        ("AGENT_ERROR", None),
    ]
    assert events[-1].data["error"] == "crash again"


def test_a_validators_result_off_its_schema_fails_the_task_as_retryable(api: ApiClient) -> None:
    # zeroshot: src/agent/agent-task-executor.js (a validator's schema mismatch throws)
    cid = running(agent("checker", role="validator", jsonSchema=SCHEMA, maxRetries=0))
    publish(cid)
    task = claim(api)["task"]

    refused = complete(api, task, {"summary": "no verdict"})

    assert refused.status_code == 422
    assert refused.json()["code"] == "result_refused"
    assert "approved" in refused.json()["message"]
    assert Task.objects.get(pk=task["id"]).state == "failed"


def test_a_result_off_its_schema_warns_and_is_still_used(api: ApiClient) -> None:
    hook = {
        "onComplete": {
            "action": "publish_message",
            "config": {"topic": "VERDICT", "content": {"data": "{{result.approved}}"}},
        }
    }
    cid = running(agent("worker", jsonSchema=SCHEMA, hooks=hook))
    publish(cid)
    task = claim(api)["task"]

    done = complete(api, task, {"approved": "yes"})

    assert done.status_code == 200
    topics = [m["topic"] for m in done.json()["messages"]]
    assert topics == ["AGENT_LIFECYCLE", "AGENT_SCHEMA_WARNING", "VERDICT"]
    assert done.json()["messages"][-1]["content"]["data"] == "yes"


def test_output_lines_become_raw_log_messages_once(api: ApiClient) -> None:
    cid = running(agent("worker"))
    publish(cid)
    task = claim(api)["task"]
    path = f"/api/v1/tasks/{task['id']}/output"

    api.post(path, {"lease_id": task["lease_id"], "lines": ["a", "b"], "offset": 0})
    api.post(path, {"lease_id": task["lease_id"], "lines": ["a", "b"], "offset": 0})  # again
    api.post(path, {"lease_id": task["lease_id"], "lines": ["c"], "offset": 2})

    outputs = message_query(cluster_id=cid, where=MessageFilter(topic="AGENT_OUTPUT"))
    assert [m.text for m in outputs] == ["a\nb", "c"]
    assert all(m.metadata == {"replayPolicy": "raw_log_only"} for m in outputs)


def test_a_cluster_scoped_key_only_claims_its_clusters_tasks(api: ApiClient) -> None:
    mine = running(agent("worker"), cluster_id="mine")
    other = running(agent("worker"), cluster_id="other")
    publish(other)
    publish(mine)
    _, key = api_key_create(name="scoped", cluster_id=mine)
    scoped = ApiClient(key)

    task = claim(scoped)["task"]

    assert task["cluster_id"] == mine
    assert scoped.post("/api/v1/tasks/claim", {"wait": 0}).status_code == 204
    refused = scoped.post("/api/v1/tasks/claim", {"wait": 0, "cluster": other})
    assert refused.status_code == 403
    other_task = claim(api)["task"]
    assert (
        scoped.post(
            f"/api/v1/tasks/{other_task['id']}/heartbeat", {"lease_id": other_task["lease_id"]}
        ).status_code
        == 403
    )


def test_start_and_stop(api: ApiClient) -> None:
    # given a cluster that has not started
    cid = cluster_create(cluster_id="s1", config={"agents": [agent("worker", "ISSUE_OPENED")]}).id
    # when it starts with an issue
    started = api.post(
        f"/api/v1/clusters/{cid}/start", {"issue": {"title": "Login", "text": "Add a button"}}
    )
    # then it runs, the issue is in the ledger and the worker has a task
    assert started.status_code == 200
    assert started.json()["state"] == "running"
    [issue] = message_query(cluster_id=cid, where=MessageFilter(topic="ISSUE_OPENED"))
    assert issue.sender == "system"
    assert issue.text == "# Login\n\nAdd a button\n"
    assert Task.objects.get().state == "queued"
    assert (
        api.post(f"/api/v1/clusters/{cid}/start", {"issue": {"text": "again"}}).status_code == 409
    )
    # when it stops
    stopped = api.post(f"/api/v1/clusters/{cid}/stop")
    # then its task is cancelled and nothing triggers any more
    assert stopped.json()["state"] == "stopped"
    assert Task.objects.get().state == "cancelled"
    publish(cid, "ISSUE_OPENED")
    assert Task.objects.count() == 1
    assert message_query(cluster_id=cid, where=MessageFilter(topic="CLUSTER_STOPPED"))
    assert api.post(f"/api/v1/clusters/{cid}/stop").status_code == 409


def test_tasks_are_listed_newest_first_and_filtered(api: ApiClient) -> None:
    cid = running(agent("a"), agent("b"), agent("c"), agent("d"))
    publish(cid)
    claim(api, agents=["a"])

    page = api.get(f"/api/v1/clusters/{cid}/tasks", limit=3).json()
    claimed = api.get(f"/api/v1/clusters/{cid}/tasks", state="claimed").json()
    only_b = api.get(f"/api/v1/clusters/{cid}/tasks", agent="b").json()

    assert len(page["items"]) == 3
    assert page["next_before"] == page["items"][-1]["id"]
    rest = api.get(f"/api/v1/clusters/{cid}/tasks", before=page["next_before"]).json()
    assert len(page["items"]) + len(rest["items"]) == 4
    assert [t["agent_id"] for t in claimed["items"]] == ["a"]
    assert {t["agent_id"] for t in only_b["items"]} == {"b"}


def test_every_work_api_operation_documents_its_errors(api: ApiClient) -> None:
    schema = api.get("/api/v1/openapi.json").json()
    work_paths = [
        p
        for p in schema["paths"]
        if p.startswith("/api/v1/tasks") or p.endswith(("/tasks", "/start", "/stop"))
    ]
    assert len(work_paths) == 9
    for path in work_paths:
        for operation in schema["paths"][path].values():
            assert {"401", "403", "404", "409", "422"} <= set(operation["responses"]), path


WORKERS = 8
CLUSTERS = 4
AGENTS = 10
TRIGGERS = 10


def test_concurrent_workers_complete_every_task_exactly_once(db: None) -> None:
    # given 400 triggers: 4 clusters, 10 agents each, 10 triggers per agent (one task each now,
    # nine waiting in its buffer: each becomes a task when the one before ends)
    for c in range(CLUSTERS):
        cid = running(*(agent(f"a{a}", f"T{a}") for a in range(AGENTS)), cluster_id=f"k{c}")
        for _ in range(TRIGGERS):
            for a in range(AGENTS):
                publish(cid, f"T{a}")
    total = CLUSTERS * AGENTS * TRIGGERS
    assert Task.objects.count() == CLUSTERS * AGENTS
    assert BufferedTrigger.objects.count() == total - CLUSTERS * AGENTS
    claims: list[tuple[str, str]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        try:
            idle = 0
            while idle < 3:
                claimed = task_claim(worker=f"w{n}", lease_seconds=600)
                if claimed is None:
                    idle += 1
                    continue
                idle = 0
                with lock:
                    claims.append((claimed.task.id, claimed.task.lease_id))
                task_complete(task_id=claimed.task.id, lease_id=claimed.task.lease_id, result={})
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    # when eight workers claim and complete in parallel
    threads = [threading.Thread(target=work, args=(n,)) for n in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # then every task was claimed once, under one lease, and completed once
    assert errors == []
    assert len(claims) == total
    assert max(Counter(task_id for task_id, _ in claims).values()) == 1
    assert set(Task.objects.values_list("state", flat=True)) == {"completed"}
    assert Task.objects.count() == total
    completed = Message.objects.filter(topic="AGENT_LIFECYCLE", event="TASK_COMPLETED").count()
    assert completed == total
    assert all(cluster_get(cluster_id=f"k{c}").state == "running" for c in range(CLUSTERS))


@pytest.mark.postgres_only
@pytest.mark.parametrize("hooked", [False, True])
def test_a_completion_gives_its_pooled_connection_back_only_for_a_hook(
    on_postgres: bool, hooked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not on_postgres:
        pytest.skip("PostgreSQL run only: counts the pool's connections")
    # given a claimed task of an agent with or without an onComplete hook
    hook = {"action": "publish_message", "config": {"topic": "DONE"}}
    extra: dict[str, Any] = {"hooks": {"onComplete": hook}} if hooked else {}
    running(agent("w", **extra))
    publish("c1")
    claimed = task_claim(cluster_id="c1", worker="w")
    assert claimed is not None
    # when it is completed, the pool's lendings counted
    pool = connection.pool  # type: ignore[attr-defined]  # PostgreSQL's, with OPTIONS["pool"]
    lend, lent = pool.getconn, []

    def counted(*args: Any, **kwargs: Any) -> Any:
        lent.append(1)
        return lend(*args, **kwargs)

    monkeypatch.setattr(pool, "getconn", counted)
    done = task_complete(
        task_id=claimed.task.id, lease_id=claimed.task.lease_id, result={}, output="{}"
    )
    # then the hook's scripts ran without the connection, which was borrowed again to write;
    # with no hook the connection the completion read with was the one it wrote with
    assert done.task.state == "completed"
    assert ("DONE" in [m.topic for m in done.messages]) == hooked
    assert len(lent) == (1 if hooked else 0)
