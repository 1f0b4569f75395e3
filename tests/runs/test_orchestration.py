"""Running clusters end to end through the work API, with a test worker (SPEC §7)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from context.services.templates import (
    cluster_create_from_template,
    template_save,
)
from ledger.interfaces import MessageFilter, cluster_get, message_query
from runs.models import Task
from tests.conftest import ApiClient
from tests.fixtures import ZEROSHOT
from tests.runs.conftest import ScriptedWorker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _templates(builtin_templates: None) -> None:
    pass


FIXTURES = ZEROSHOT / "templates"


def implementation(summary: str) -> dict[str, Any]:
    return {"summary": summary, "completionStatus": {"canValidate": True, "percentComplete": 100}}


def verdict(approved: bool, *errors: str) -> dict[str, Any]:
    return {
        "approved": approved,
        "summary": "approved" if approved else "rejected",
        "errors": list(errors),
        "criteriaResults": [],
    }


def start(api: ApiClient, cluster_id: str, text: str = "Add a login button") -> None:
    response = api.post(f"/api/v1/clusters/{cluster_id}/start", {"issue": {"text": text}})
    assert response.status_code == 200, response.content


def topics(cluster_id: str) -> list[str]:
    return [m.topic for m in message_query(cluster_id=cluster_id, limit=None)]


def test_worker_validator_runs_to_completion_with_one_rejection(api: ApiClient) -> None:
    # given the built-in worker-validator template, started with an issue
    cluster_id = cluster_create_from_template(template_name="worker-validator", params={}).id
    start(api, cluster_id)
    worker = ScriptedWorker(
        api,
        {
            "worker": [implementation("First try"), implementation("Second try, tests added")],
            "validator": [verdict(False, "Missing tests"), verdict(True)],
        },
    )

    # when a worker answers every task
    claims = worker.run()

    # then the agents ran in turn: worker, validator (rejects), worker again, validator
    assert [(c["task"]["agent_id"], c["task"]["iteration"]) for c in claims] == [
        ("worker", 1),
        ("validator", 1),
        ("worker", 2),
        ("validator", 2),
    ]
    # the second worker prompt holds the rejection, and since last_task_end works
    second = claims[2]["prompt"]
    assert "Missing tests" in second
    assert "Topic: VALIDATION_RESULT" in second
    # the ledger holds each task's lifecycle and usage in order, and the cluster completed
    ledger_topics = topics(cluster_id)
    assert ledger_topics[-1] == "CLUSTER_COMPLETE"
    assert cluster_get(cluster_id=cluster_id).state == "completed"
    completed = message_query(
        cluster_id=cluster_id, where=MessageFilter(topic="AGENT_LIFECYCLE"), limit=None
    )
    events = [(m.sender, m.data["event"]) for m in completed]
    assert events == [
        ("worker", "TASK_STARTED"),
        ("worker", "TASK_COMPLETED"),
        ("validator", "TASK_STARTED"),
        ("validator", "TASK_COMPLETED"),
        ("worker", "TASK_STARTED"),
        ("worker", "TASK_COMPLETED"),
        ("validator", "TASK_STARTED"),
        ("validator", "TASK_COMPLETED"),
    ]
    for claim in claims:
        task_id = claim["task"]["id"]
        batch = [
            m.topic
            for m in message_query(cluster_id=cluster_id, limit=None)
            if isinstance(m.data, dict) and m.data.get("taskId") == task_id
        ]
        assert batch == ["AGENT_LIFECYCLE", "TOKEN_USAGE", "AGENT_LIFECYCLE"]
    assert set(Task.objects.values_list("state", flat=True)) == {"completed"}
    rejection = message_query(
        cluster_id=cluster_id, where=MessageFilter(topic="VALIDATION_RESULT"), limit=None
    )[0]
    assert rejection.data["approved"] is False
    assert rejection.data["errors"] == ["Missing tests"]


def test_the_second_worker_build_reads_only_what_came_after_its_last_task(api: ApiClient) -> None:
    # given a worker whose validation source reads since its last task's end
    cluster_id = cluster_create_from_template(template_name="worker-validator", params={}).id
    start(api, cluster_id)
    worker = ScriptedWorker(
        api,
        {
            "worker": [implementation("one"), implementation("two"), implementation("three")],
            "validator": [
                verdict(False, "first rejection"),
                verdict(False, "second rejection"),
                verdict(True),
            ],
        },
    )

    # when it runs three times
    claims = worker.run()

    # then each build of the worker holds only the newest rejection
    prompts = [c["prompt"] for c in claims if c["task"]["agent_id"] == "worker"]
    assert "first rejection" in prompts[1]
    assert "first rejection" not in prompts[2]
    assert "second rejection" in prompts[2]


def zeroshot_template(name: str, params: dict[str, Any]) -> str:
    """A cluster of one of zeroshot's own templates, imported as it is."""
    body = json.loads((FIXTURES / f"{name}.json").read_text())
    template_save(name=f"zeroshot-{name}", body=body)
    return cluster_create_from_template(template_name=f"zeroshot-{name}", params=params).id


def test_the_zeroshot_worker_validator_template_runs_the_same(api: ApiClient) -> None:
    # given zeroshot's worker-validator, which has no completion handler: zeroshot's
    # completion-detector joins it (orchestrator.js _injectCompletionAgent)
    cluster_id = zeroshot_template("worker-validator", {"task_type": "TASK"})
    start(api, cluster_id)
    worker = ScriptedWorker(
        api,
        {
            "worker": [implementation("one"), implementation("two")],
            "validator": [verdict(False, "nope"), verdict(True)],
        },
    )

    claims = worker.run()

    assert [c["task"]["agent_id"] for c in claims] == ["worker", "validator"] * 2
    assert cluster_get(cluster_id=cluster_id).state == "completed"
    [complete] = message_query(
        cluster_id=cluster_id, where=MessageFilter(topic="CLUSTER_COMPLETE"), limit=None
    )
    assert complete.sender == "completion-detector"


def test_the_zeroshot_full_workflow_template_runs_the_same(api: ApiClient) -> None:
    # given zeroshot's full workflow with two validators
    cluster_id = zeroshot_template(
        "full-workflow", {"task_type": "TASK", "complexity": "STANDARD", "validator_count": 2}
    )
    start(api, cluster_id)
    plan = {
        "plan": "Add the button",
        "summary": "a button",
        "acceptanceCriteria": [],
        "filesAffected": ["login.html"],
    }
    worker = ScriptedWorker(
        api,
        {
            "planner": [plan],
            "worker": [implementation("one"), implementation("two")],
            "validator-requirements": [verdict(True), verdict(True)],
            "validator-code": [verdict(False, "style"), verdict(True)],
        },
    )

    # when the worker answers every task
    claims = worker.run()

    # then the planner, the worker and both validators ran, twice for the rejection, and the
    # injected completion-detector ended the cluster (git-pusher-template.js's trigger script)
    agents = [c["task"]["agent_id"] for c in claims]
    assert agents[:2] == ["planner", "worker"]
    assert sorted(agents[2:4]) == ["validator-code", "validator-requirements"]
    assert agents[4] == "worker"
    assert sorted(agents[5:]) == ["validator-code", "validator-requirements"]
    assert cluster_get(cluster_id=cluster_id).state == "completed"
    assert topics(cluster_id)[-1] == "CLUSTER_COMPLETE"
