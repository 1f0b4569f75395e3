"""Every template of zeroshot's ``cluster-templates/`` runs to ``completed`` (issue 18).

Driven over HTTP only, in process: the cluster is made from a built-in ``zeroshot/`` template
with ``POST /api/v1/clusters``, started, then a scripted agent claims and completes every task
through the work API, answering each the way the template's schema asks. Runs on SQLite and on
PostgreSQL (``make test-postgres``).

zeroshot's routing table is ``getConfig`` (``src/template-resolver.js`` of zeroshot, served to
scripts as ``helpers.getConfig``): DEBUG (not TRIVIAL) → debug-workflow, TRIVIAL → single-worker,
SIMPLE → worker-validator, STANDARD → full-workflow with 2 validators, CRITICAL → full-workflow
with none, whose meta-coordinator loads quick-validation then heavy-validation
(``cluster-templates/base-templates/full-workflow.json``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from context.services.templates import templates_load_builtin
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

ISSUE = "Add a --dry-run flag to the importer"
Answer = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.fixture(autouse=True)
def _templates(db: None) -> None:
    templates_load_builtin()  # a transactional test starts from empty tables


def implementation(claim: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": f"try {claim['task']['iteration']}",
        "completionStatus": {"canValidate": True, "percentComplete": 100},
    }


def verdict(approved: bool) -> dict[str, Any]:
    return {
        "approved": approved,
        "summary": "approved" if approved else "rejected",
        "errors": [] if approved else ["Missing tests"],
        "criteriaResults": [],
    }


PLAN = {"plan": "Add the flag", "summary": "a flag", "filesAffected": [], "acceptanceCriteria": []}
INVESTIGATION = {
    "successCriteria": "the importer runs with --dry-run and writes nothing",
    "failureInventory": ["the flag is unknown"],
    "rootCauses": [
        {
            "cause": "no flag",
            "whyItsFundamental": "the parser lacks it",
            "howDiscovered": "reading cli.py",
            "affectedAreas": ["cli.py"],
        }
    ],
    "similarPatternLocations": [],
    "fixPlan": "add the flag",
}
TESTER = {
    **verdict(True),
    "commandResult": {"command": "pytest -q", "exitCode": 0, "output": "1 passed"},
    "rootCauseVerification": [{"cause": "no flag", "addressed": True, "fixType": "root_fix"}],
    "testVerification": {"newTestsAdded": True, "testQuality": "adequate"},
}


def answers(
    *, junior: tuple[str, str] = ("SIMPLE", "TASK"), senior: tuple[str, str] | None = None
) -> dict[str, Answer]:
    """The scripted agents: one answer per agent id, by iteration where it matters."""

    def conduct(choice: tuple[str, str]) -> Answer:
        return lambda claim: {
            "complexity": choice[0],
            "taskType": choice[1],
            "reasoning": f"{choice[0]} {choice[1]}",
        }

    def validator(claim: dict[str, Any]) -> dict[str, Any]:
        return verdict(True)

    return {
        "junior-conductor": conduct(junior),
        "senior-conductor": conduct(senior or ("STANDARD", "TASK")),
        "planner": lambda claim: PLAN,
        "worker": implementation,
        "validator-requirements": validator,
        "validator-code": validator,
        "validator-security": validator,
        "validator-tester": validator,
        # worker-validator's reviewer rejects the first implementation.
        "validator": lambda claim: verdict(claim["task"]["iteration"] > 1),
        "meta-coordinator": lambda claim: {
            "action": "load_quick" if claim["task"]["iteration"] == 1 else "load_heavy"
        },
        "consensus-coordinator": lambda claim: {"allApproved": True, "summary": "all approve"},
        "investigator": lambda claim: INVESTIGATION,
        "fixer": lambda claim: {"summary": "fixed", "result": "the flag is added"},
        "tester": lambda claim: TESTER,
    }


def run(
    api: ApiClient, template: str, params: dict[str, Any], agents: dict[str, Answer]
) -> tuple[str, list[dict[str, Any]]]:
    """Create, start and work a cluster until no task is left; its id and the claims."""
    created = api.post("/api/v1/clusters", {"template": f"zeroshot/{template}", "params": params})
    assert created.status_code == 201, created.content
    cluster_id = created.json()["id"]
    started = api.post(f"/api/v1/clusters/{cluster_id}/start", {"issue": {"text": ISSUE}})
    assert started.status_code == 200, started.content
    claims: list[dict[str, Any]] = []
    for _ in range(60):
        response = api.post("/api/v1/tasks/claim", {"wait": 0, "worker": "scripted"})
        if response.status_code == 204:
            break
        assert response.status_code == 200, response.content
        claim = response.json()
        claims.append(claim)
        task = claim["task"]
        result = agents[task["agent_id"]](claim)
        done = api.post(
            f"/api/v1/tasks/{task['id']}/complete",
            {"lease_id": task["lease_id"], "result": result, "output": "done"},
        )
        assert done.status_code == 200, done.content
    return cluster_id, claims


def state(api: ApiClient, cluster_id: str) -> str:
    response = api.get(f"/api/v1/clusters/{cluster_id}")
    assert response.status_code == 200, response.content
    return str(response.json()["state"])


def messages(api: ApiClient, cluster_id: str) -> list[dict[str, Any]]:
    response = api.get(f"/api/v1/clusters/{cluster_id}/messages", limit=1000)
    assert response.status_code == 200, response.content
    return list(response.json()["items"])


def ran(claims: list[dict[str, Any]]) -> list[str]:
    return [c["task"]["agent_id"] for c in claims]


def assert_completed(api: ApiClient, cluster_id: str) -> list[dict[str, Any]]:
    ledger = messages(api, cluster_id)
    shown = [
        (m["topic"], m["sender"], m["content"].get("data") if "OPERATIONS_" in m["topic"] else "")
        for m in ledger
        if m["topic"] != "AGENT_OUTPUT"
    ]
    assert state(api, cluster_id) == "completed", shown
    assert ledger[-1]["topic"] == "CLUSTER_COMPLETE", shown
    return ledger


def test_conductor_bootstrap_simple_loads_worker_validator(api: ApiClient) -> None:
    # given zeroshot's default entry point, whose junior conductor classifies SIMPLE:TASK
    cluster_id, claims = run(api, "conductor-bootstrap", {}, answers(junior=("SIMPLE", "TASK")))

    # then its CLUSTER_OPERATIONS loaded worker-validator, which ran one rejection round
    ledger = assert_completed(api, cluster_id)
    assert ran(claims) == ["junior-conductor", "worker", "validator", "worker", "validator"]
    topics = [m["topic"] for m in ledger]
    assert "CLUSTER_OPERATIONS_SUCCESS" in topics
    success = next(m for m in ledger if m["topic"] == "CLUSTER_OPERATIONS_SUCCESS")
    # junior + senior conductors, worker, validator and the injected completion-detector
    assert success["content"]["data"] == {"operationCount": 2, "agentCount": 5}
    # the republished issue came from the conductor (the operations' sender)
    republished = [m for m in ledger if m["topic"] == "ISSUE_OPENED"][1]
    assert republished["sender"] == "junior-conductor"
    assert republished["metadata"] == {"_republished": True}
    # zeroshot's injected completion-detector ended it (orchestrator.js _injectCompletionAgent)
    assert ledger[-1]["sender"] == "completion-detector"
    detail = api.get(f"/api/v1/clusters/{cluster_id}").json()
    assert [a["id"] for a in detail["agents"]][-1] == "completion-detector"


def test_conductor_bootstrap_uncertain_escalates_to_the_senior(api: ApiClient) -> None:
    # given a junior conductor that cannot decide, and a senior that chooses STANDARD:TASK
    cluster_id, claims = run(
        api,
        "conductor-bootstrap",
        {},
        answers(junior=("UNCERTAIN", "TASK"), senior=("STANDARD", "TASK")),
    )

    # then the senior's operations loaded full-workflow with two validators
    ledger = assert_completed(api, cluster_id)
    agents = ran(claims)
    assert agents[:4] == ["junior-conductor", "senior-conductor", "planner", "worker"]
    assert sorted(agents[4:]) == ["validator-code", "validator-requirements"]
    escalation = next(m for m in ledger if m["topic"] == "CONDUCTOR_ESCALATE")
    assert escalation["sender"] == "junior-conductor"
    operations = [m for m in ledger if m["topic"] == "CLUSTER_OPERATIONS"]
    assert [m["sender"] for m in operations] == ["senior-conductor"]


@pytest.mark.parametrize(
    ("complexity", "task_type", "expected"),
    [
        ("TRIVIAL", "TASK", Counter({"junior-conductor": 1, "worker": 1})),
        ("SIMPLE", "INQUIRY", Counter({"junior-conductor": 1, "worker": 2, "validator": 2})),
        (
            "STANDARD",
            "TASK",
            Counter(
                {
                    "junior-conductor": 1,
                    "planner": 1,
                    "worker": 1,
                    "validator-requirements": 1,
                    "validator-code": 1,
                }
            ),
        ),
        (
            "CRITICAL",
            "TASK",
            Counter(
                {
                    "junior-conductor": 1,
                    "planner": 1,
                    "worker": 1,
                    "meta-coordinator": 2,
                    "validator-requirements": 1,
                    "validator-code": 1,
                    "consensus-coordinator": 2,
                    "validator-security": 1,
                    "validator-tester": 1,
                }
            ),
        ),
        (
            "STANDARD",
            "DEBUG",
            Counter({"junior-conductor": 1, "investigator": 1, "fixer": 1, "tester": 1}),
        ),
    ],
)
def test_each_route_of_zeroshots_routing_table_completes(
    api: ApiClient, complexity: str, task_type: str, expected: Counter[str]
) -> None:
    # given the conductor choosing one route of zeroshot's getConfig
    cluster_id, claims = run(
        api, "conductor-bootstrap", {}, answers(junior=(complexity, task_type))
    )

    # then the loaded template ran to completion with exactly its agents
    ledger = assert_completed(api, cluster_id)
    failed = [m["content"] for m in ledger if m["topic"].endswith("_FAILED")]
    assert Counter(ran(claims)) == expected, failed


def test_full_workflow_critical_loads_quick_then_heavy_validation(api: ApiClient) -> None:
    # given full-workflow at CRITICAL, started directly: no validators, a meta-coordinator
    params = {"task_type": "TASK", "complexity": "CRITICAL", "validator_count": 0}
    cluster_id, claims = run(api, "full-workflow", params, answers())

    # then the meta-coordinator loaded quick-validation, then heavy-validation, whose consensus
    # VALIDATION_RESULT the injected completion-detector accepted
    ledger = assert_completed(api, cluster_id)
    assert ran(claims)[:3] == ["planner", "worker", "meta-coordinator"]
    assert [m["topic"] for m in ledger].count("CLUSTER_OPERATIONS_SUCCESS") == 2
    verdicts = [m for m in ledger if m["topic"] == "VALIDATION_RESULT"]
    assert [(m["sender"], m["content"]["data"]["stage"]) for m in verdicts] == [
        ("consensus-coordinator", "heavy")
    ]
    assert ledger[-1]["sender"] == "completion-detector"
    versions = api.get(f"/api/v1/clusters/{cluster_id}").json()["config_version"]
    assert versions == 3


@pytest.mark.parametrize(
    ("template", "params", "expected"),
    [
        ("single-worker", {"task_type": "TASK"}, ["worker"]),
        ("worker-validator", {"task_type": "TASK"}, ["worker", "validator"] * 2),
        ("debug-workflow", {}, ["investigator", "fixer", "tester"]),
        # full-workflow's validator conditions: one, two (STANDARD in the routing table), three
        (
            "full-workflow",
            {"task_type": "TASK", "complexity": "STANDARD", "validator_count": 1},
            ["planner", "worker", "validator-requirements"],
        ),
        (
            "full-workflow",
            {"task_type": "INQUIRY", "complexity": "STANDARD", "validator_count": 2},
            ["planner", "worker", "validator-requirements", "validator-code"],
        ),
        (
            "full-workflow",
            {"task_type": "TASK", "complexity": "STANDARD", "validator_count": 3},
            [
                "planner",
                "worker",
                "validator-code",
                "validator-requirements",
                "validator-security",
                "validator-tester",
            ],
        ),
    ],
)
def test_base_templates_started_directly_complete(
    api: ApiClient, template: str, params: dict[str, Any], expected: list[str]
) -> None:
    cluster_id, claims = run(api, template, params, answers())

    assert_completed(api, cluster_id)
    # validators answer the same handoff, in any order
    assert ran(claims)[:2] + sorted(ran(claims)[2:]) == expected[:2] + sorted(expected[2:])
