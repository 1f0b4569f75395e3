"""zeroshot's failure policy, result schemas and hooks, through the work API (SPEC §7.3, §7.5).

Each test names the zeroshot source it follows (the-open-engine/zeroshot, ``src/``).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from context.services.templates import template_check
from ledger.interfaces import (
    MessageDraft,
    MessageFilter,
    MessageRecord,
    cluster_create,
    cluster_get,
    message_publish,
    message_query,
)
from runs.models import Task
from runs.services.tasks import tasks_expire
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "summary": {"type": "string"}},
    "required": ["approved", "summary"],
}
VERDICT_HOOK = {
    "onComplete": {
        "action": "publish_message",
        "config": {
            "topic": "VALIDATION_RESULT",
            "content": {"text": "{{result.summary}}", "data": {"approved": "{{result.approved}}"}},
        },
    }
}
# The worker acts on each rejection, as zeroshot's worker templates do.
REJECTED = "return message.content?.data?.approved === false;"


def agent(agent_id: str, *triggers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": extra.pop("role", "implementation"),
        "prompt": f"You are {agent_id}.",
        "triggers": list(triggers) or [{"topic": "GO"}],
        "contextStrategy": {"sources": [{"topic": "GO", "amount": 1}], "maxTokens": 4000},
        **extra,
    }


def worker_and_validator(**validator: Any) -> str:
    """A worker (on GO, and on each rejection) and a validator (on the worker's handoff)."""
    worker = agent(
        "worker",
        {"topic": "GO"},
        {"topic": "VALIDATION_RESULT", "logic": {"engine": "javascript", "script": REJECTED}},
        hooks={"onComplete": {"action": "publish_message", "config": {"topic": "READY"}}},
    )
    checker = agent(
        "checker",
        {"topic": "READY"},
        role="validator",
        jsonSchema=VERDICT_SCHEMA,
        hooks=VERDICT_HOOK,
        **validator,
    )
    return running(worker, checker)


def running(*agents: dict[str, Any], cluster_id: str = "c1") -> str:
    return cluster_create(
        cluster_id=cluster_id, config={"agents": list(agents)}, state="running"
    ).id


def publish(cluster_id: str, topic: str = "GO", sender: str = "system") -> None:
    message_publish(
        cluster_id=cluster_id,
        draft=MessageDraft(topic=topic, sender=sender, content={"text": "go"}),
    )


def claim(api: ApiClient, **body: Any) -> dict[str, Any]:
    response = api.post("/api/v1/tasks/claim", {"wait": 0, **body})
    assert response.status_code == 200, response.content
    return dict(response.json())


def complete(api: ApiClient, task: dict[str, Any], result: dict[str, Any]) -> Any:
    body = {"lease_id": task["lease_id"], "result": result}
    return api.post(f"/api/v1/tasks/{task['id']}/complete", body)


def fail(api: ApiClient, task: dict[str, Any], error: str = "crash") -> Any:
    body = {"lease_id": task["lease_id"], "error": error}
    return api.post(f"/api/v1/tasks/{task['id']}/fail", body)


def topics(cluster_id: str, *wanted: str) -> list[MessageRecord]:
    where = MessageFilter(topic=wanted) if wanted else MessageFilter()
    return message_query(cluster_id=cluster_id, where=where, limit=None)


# --- failure policy (SPEC §7.3) ------------------------------------------------------------------


@override_settings(RUNS_RETRY_BASE_SECONDS=0)
def test_a_worker_out_of_retries_fails_the_cluster(api: ApiClient) -> None:
    # zeroshot: src/agent/agent-lifecycle.js:923 (handleFinalFailure: AGENT_ERROR with
    # retryBudgetExhausted) and src/agent/critical-agent-policy.ts:9 (every role but validator)
    cid = running(agent("worker", maxRetries=1))
    publish(cid)
    # when its task fails twice (one retry)
    fail(api, claim(api)["task"])
    assert fail(api, claim(api)["task"], "crash again").json()["state"] == "failed"
    # then AGENT_ERROR says the budget is spent, and the worker fails the cluster
    error, failed = topics(cid, "AGENT_ERROR", "CLUSTER_FAILED")
    assert error.topic == "AGENT_ERROR"
    assert error.data["retryBudgetExhausted"] is True
    assert error.data["attempts"] == 2
    assert (failed.topic, failed.sender) == ("CLUSTER_FAILED", "worker")
    assert failed.data["reason"] == "critical_agent_failed"
    assert failed.data["role"] == "implementation"
    assert cluster_get(cluster_id=cid).state == "failed"


@override_settings(RUNS_RETRY_BASE_SECONDS=0)
def test_a_crashed_validator_rejects_and_its_worker_runs_again(api: ApiClient) -> None:
    # zeroshot: src/agent/agent-lifecycle.js:795 (handleFinalFailure: "Validator crash =
    # REJECTION", approved: false, crashedAfterRetries: true)
    cid = worker_and_validator(maxRetries=0)
    publish(cid)
    assert complete(api, claim(api)["task"], {"summary": "s", "result": "r"}).status_code == 200
    # when the validator crashes with no retries left
    checker = claim(api)["task"]
    assert checker["agent_id"] == "checker"
    assert fail(api, checker).json()["state"] == "failed"
    # then it rejects on its hook's topic, the cluster runs on, and the worker is queued again
    [verdict] = topics(cid, "VALIDATION_RESULT")
    assert verdict.sender == "checker"
    assert verdict.data["approved"] is False
    assert verdict.data["crashedAfterRetries"] is True
    assert "VALIDATOR CRASHED 1x" in verdict.data["errors"]
    [error] = topics(cid, "AGENT_ERROR")
    assert error.data["retryBudgetExhausted"] is True
    assert error.sequence > verdict.sequence
    assert topics(cid, "CLUSTER_FAILED") == []
    assert cluster_get(cluster_id=cid).state == "running"
    again = claim(api)["task"]
    assert (again["agent_id"], again["iteration"]) == ("worker", 2)
    assert again["triggering_message"]["topic"] == "VALIDATION_RESULT"


@override_settings(RUNS_RETRY_BASE_SECONDS=0)
def test_a_crashed_validator_that_cannot_reject_is_critical(api: ApiClient) -> None:
    # a validator with no topic to reject on would leave its worker waiting forever
    hooks = {"onComplete": {"action": "publish_message", "config": {"topic": "not a topic"}}}
    cid = running(agent("checker", role="validator", hooks=hooks, maxRetries=0))
    publish(cid)
    assert fail(api, claim(api)["task"]).json()["state"] == "failed"
    [failed] = topics(cid, "CLUSTER_FAILED")
    assert (failed.sender, failed.data["reason"]) == ("checker", "critical_agent_failed")


@override_settings(RUNS_RETRY_BASE_SECONDS=0)
def test_a_validator_answer_without_approved_never_reaches_its_worker(api: ApiClient) -> None:
    # zeroshot: src/agent/agent-task-executor.js:3462 (a validator's schema mismatch throws)
    # and src/agent/agent-lifecycle.js:795 (its last failure is a rejection)
    cid = worker_and_validator(maxRetries=1)
    publish(cid)
    complete(api, claim(api)["task"], {"summary": "s", "result": "r"})
    # when the validator answers twice without its verdict
    for _ in range(2):
        refused = complete(api, claim(api)["task"], {"summary": "looks fine"})
        assert refused.status_code == 422
        assert refused.json()["code"] == "result_refused"
        assert "approved" in refused.json()["message"]
    # then no verdict of null was published: the only verdict is the crash's rejection
    verdicts = topics(cid, "VALIDATION_RESULT")
    assert [(m.data["approved"], m.data.get("crashedAfterRetries")) for m in verdicts] == [
        (False, True)
    ]
    assert claim(api)["task"]["agent_id"] == "worker"


@override_settings(RUNS_RETRY_BASE_SECONDS=0)
def test_a_lease_expiring_past_max_retries_fails_for_good(api: ApiClient) -> None:
    # SPEC §7.3: an expired lease counts as an attempt; its final failure is zeroshot's
    # (src/agent/agent-lifecycle.js:923, src/agent/critical-agent-policy.ts:11)
    cid = running(agent("worker", maxRetries=2))
    publish(cid)
    for attempt in range(1, 4):
        task = claim(api)["task"]
        assert task["attempts"] == attempt
        Task.objects.filter(pk=task["id"]).update(lease_expires_at=1)
        tasks_expire(now=2)
    # the third expiry (maxRetries + 1) ends it, and the cluster with it
    assert Task.objects.get().state == "failed"
    assert api.post("/api/v1/tasks/claim", {"wait": 0}).status_code == 204
    error, failed = topics(cid, "AGENT_ERROR", "CLUSTER_FAILED")
    assert (error.data["phase"], error.data["retryBudgetExhausted"]) == ("lease", True)
    assert failed.data["reason"] == "critical_agent_failed"
    assert cluster_get(cluster_id=cid).state == "failed"


def test_a_hook_failing_three_times_fails_the_cluster(api: ApiClient) -> None:
    # zeroshot: src/agent/agent-lifecycle.js:578 (hookMaxRetries = 3) and :835 (CLUSTER_FAILED,
    # reason on_complete_hook_failed)
    counter = "globalThis.n = (globalThis.n || 0) + 1; throw new Error('hook broke ' + n);"
    hook = {
        "onComplete": {
            "action": "publish_message",
            "config": {"topic": "DONE"},
            "logic": {"engine": "javascript", "script": counter},
        }
    }
    cid = running(agent("worker", hooks=hook))
    publish(cid)
    done = complete(api, claim(api)["task"], {"summary": "s", "result": "r"})
    assert done.status_code == 200
    assert [m["topic"] for m in done.json()["messages"]] == [
        "AGENT_LIFECYCLE",
        "AGENT_ERROR",
        "CLUSTER_FAILED",
    ]
    error, failed = topics(cid, "AGENT_ERROR", "CLUSTER_FAILED")
    assert (error.data["hookFailure"], error.data["hookRetries"]) == (True, 3)
    assert (failed.sender, failed.data["reason"]) == ("worker", "on_complete_hook_failed")
    assert topics(cid, "DONE") == []
    assert cluster_get(cluster_id=cid).state == "failed"


# --- hooks (SPEC §7.5) ---------------------------------------------------------------------------


def test_on_start_publishes_before_task_started_and_task_started_says_who_triggered(
    api: ApiClient,
) -> None:
    # zeroshot: src/agent/agent-lifecycle.js:632 (runTaskAttempt: onStart first) and :469
    # (publishTaskStarted: triggerFrom)
    hooks = {
        "onStart": {
            "action": "publish_message",
            "config": {"topic": "WORK_STARTED", "content": {"text": "#{{iteration}}"}},
        }
    }
    cid = running(agent("worker", hooks=hooks))
    publish(cid, sender="planner")
    claim(api)
    started, lifecycle = topics(cid, "WORK_STARTED", "AGENT_LIFECYCLE")
    assert (started.topic, started.sender, started.text) == ("WORK_STARTED", "worker", "#1")
    assert lifecycle.data["event"] == "TASK_STARTED"
    assert (lifecycle.data["triggeredBy"], lifecycle.data["triggerFrom"]) == ("GO", "planner")


@override_settings(RUNS_RETRY_BASE_SECONDS=0)
def test_an_on_start_hook_that_fails_fails_the_attempt(api: ApiClient) -> None:
    hooks = {"onStart": {"action": "publish_message", "config": {"topic": "{{result.x}}"}}}
    cid = running(agent("worker", hooks=hooks, maxRetries=0))
    publish(cid)
    assert api.post("/api/v1/tasks/claim", {"wait": 0}).status_code == 204
    task = Task.objects.get()
    assert task.state == "failed"
    assert "onStart hook failed" in task.error
    assert cluster_get(cluster_id=cid).state == "failed"


def test_on_error_runs_after_the_final_failure_with_the_error(api: ApiClient) -> None:
    # zeroshot: src/agent/agent-lifecycle.js:961 (handleFinalFailure: onError after AGENT_ERROR)
    hooks = {
        "onError": {
            "action": "publish_message",
            "config": {"topic": "WORKER_DOWN", "content": {"text": "{{error.message}}"}},
        }
    }
    cid = running(agent("worker", hooks=hooks, maxRetries=0))
    publish(cid)
    fail(api, claim(api)["task"], "disk full")
    error, down, failed = topics(cid, "AGENT_ERROR", "WORKER_DOWN", "CLUSTER_FAILED")
    assert [error.topic, down.topic, failed.topic] == [
        "AGENT_ERROR",
        "WORKER_DOWN",
        "CLUSTER_FAILED",
    ]
    assert down.text == "disk full"


def test_a_transform_reading_a_field_the_result_lacks_fails(api: ApiClient) -> None:
    # zeroshot: src/agent/agent-hook-executor.js:201 (parseTransformResultData: missingFields)
    script = "return {topic: 'PLAN', content: {text: result.plan}};"
    hooks = {"onComplete": {"action": "publish_message", "transform": {"script": script}}}
    cid = running(agent("worker", hooks=hooks))
    publish(cid)
    complete(api, claim(api)["task"], {"summary": "s", "result": "r"})
    [error] = topics(cid, "AGENT_ERROR")
    assert error.data["phase"] == "hook_transform"
    assert "plan" in error.data["error"]
    assert topics(cid, "PLAN") == []


@pytest.mark.parametrize(
    "data", ["{}", "{operations: []}", "{operations: 'x'}", "{operations: [{}]}"]
)
def test_cluster_operations_without_operations_fail_the_hook(api: ApiClient, data: str) -> None:
    # zeroshot: src/agent/agent-hook-executor.js:329 (validateClusterOperationsResult)
    script = f"return {{topic: 'CLUSTER_OPERATIONS', content: {{data: {data}}}}};"
    hooks = {"onComplete": {"action": "publish_message", "transform": {"script": script}}}
    cid = running(agent("conductor", hooks=hooks, role="router"))
    publish(cid)
    complete(api, claim(api)["task"], {"summary": "s", "result": "r"})
    [error] = topics(cid, "AGENT_ERROR")
    assert "operations" in error.data["error"]
    assert topics(cid, "CLUSTER_OPERATIONS") == []
    assert cluster_get(cluster_id=cid).state == "failed"


def test_placeholders_iteration_and_created_at_stay_strings(api: ApiClient) -> None:
    # zeroshot: src/agent/agent-hook-executor.js:516-520 (substituteTemplate)
    config = {
        "topic": "DONE",
        "content": {
            "data": {"i": "{{iteration}}", "at": "{{cluster.createdAt}}", "e": "{{error.message}}"}
        },
    }
    cid = running(agent("worker", hooks={"onComplete": {"config": config}}))
    publish(cid)
    complete(api, claim(api)["task"], {"summary": "s", "result": "r"})
    [done] = topics(cid, "DONE")
    created = cluster_get(cluster_id=cid).created_at
    assert done.data == {"i": "1", "at": str(created), "e": ""}


# --- result schemas (SPEC §7.5) ------------------------------------------------------------------


def test_a_json_agent_without_a_schema_gets_zeroshots_default_and_its_warning(
    api: ApiClient,
) -> None:
    # zeroshot: src/agent/agent-config.ts:130 ({summary, result} required), :142 (strictSchema
    # true) and src/agent/agent-task-executor.js:3468 (AGENT_SCHEMA_WARNING)
    cid = running(agent("worker"))
    publish(cid)
    claimed = claim(api)
    assert claimed["agent"]["strictSchema"] is True
    done = complete(api, claimed["task"], {"summary": "did it"})
    assert done.status_code == 200
    [warning] = topics(cid, "AGENT_SCHEMA_WARNING")
    assert {k: warning.data[k] for k in ("agent", "role", "iteration")} == {
        "agent": "worker",
        "role": "implementation",
        "iteration": 1,
    }
    assert any("result" in e for e in warning.data["errors"])
    assert Task.objects.get().state == "completed"


def test_strict_schema_false_is_passed_to_the_runner(api: ApiClient) -> None:
    running(agent("worker", strictSchema=False))
    publish("c1")
    assert claim(api)["agent"]["strictSchema"] is False


def test_a_planners_result_off_its_schema_fails_for_good(api: ApiClient) -> None:
    # zeroshot: src/agent/agent-task-executor.js:3453 (terminalStructuredRole)
    cid = running(agent("planner", role="planner", maxRetries=3))
    publish(cid)
    refused = complete(api, claim(api)["task"], {"plan": "no summary"})
    assert refused.status_code == 422
    assert Task.objects.get().state == "failed"
    [failed] = topics(cid, "CLUSTER_FAILED")
    assert failed.data["reason"] == "critical_agent_failed"


# --- template validation (SPEC §7.1, §7.5) -------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "field"),
    [
        (
            {
                "triggers": [
                    {
                        "topic": "GO",
                        "action": "execute_task",
                        "logic": {"engine": "python", "script": "1"},
                    }
                ]
            },
            "triggers[0].logic.engine",
        ),
        (
            {"hooks": {"onComplete": {"logic": {"engine": "lua", "script": "return 1"}}}},
            "hooks.onComplete.logic.engine",
        ),
        (
            {"hooks": {"onComplete": {"transform": {"engine": "python", "script": "x"}}}},
            "hooks.onComplete.transform.engine",
        ),
        ({"triggers": [{"topic": "GO", "action": "launch_missiles"}]}, "triggers[0].action"),
    ],
)
def test_templates_with_other_engines_or_unknown_actions_are_refused(
    db: None, where: dict[str, Any], field: str
) -> None:
    # zeroshot: src/config-validator.js:186 (trigger action), :196 (trigger logic engine),
    # :1334 (hook logic engine)
    body = {"name": "t", "agents": [{"id": "a", "role": "r", "prompt": "p", **where}]}
    check = template_check(body)
    assert not check.valid
    assert any(field in error["message"] for error in check.errors), check.errors
