"""Cluster operations (SPEC §7.7) and zeroshot's completion-detector (SPEC §7.1).

Each follows zeroshot's ``src/orchestrator.js``: ``_handleOperations`` (validate the chain, then
the proposed config, then execute), the ``_op*`` functions and ``_injectCompletionAgent``; the
completion-detector's trigger script is ``SHARED_TRIGGER_SCRIPT`` of
``src/agents/git-pusher-template.js``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import override_settings

from context.completion import COMPLETION_DETECTOR_ID, config_with_completion
from context.models import ContextBuild
from context.services.templates import template_save, templates_load_builtin
from ledger.interfaces import (
    ImportedMessage,
    MessageDraft,
    MessageFilter,
    MessageRecord,
    cluster_config_versions,
    cluster_create,
    cluster_get,
    message_import_batch,
    message_publish,
    message_query,
)
from runs.models import Task
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)


def agent(agent_id: str, *topics: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": extra.pop("role", "implementation"),
        "prompt": "Work.",
        "triggers": [{"topic": t, "action": "execute_task"} for t in topics],
        **extra,
    }


# A handler of its own: no completion-detector joins, so the agents listed are all there is.
ENDS = agent(
    "closer",
    "DONE",
    hooks={"onComplete": {"action": "publish_message", "config": {"topic": "CLUSTER_COMPLETE"}}},
)


def running(*agents: dict[str, Any], cluster_id: str = "ops", template: str = "") -> str:
    record = cluster_create(
        cluster_id=cluster_id, config={"agents": list(agents)}, state="running", template=template
    )
    return record.id


def publish(
    cluster_id: str,
    topic: str,
    *,
    sender: str = "conductor",
    data: Any = None,
    metadata: Any = None,
) -> MessageRecord:
    content = {"data": data} if data is not None else {}
    return message_publish(
        cluster_id=cluster_id,
        draft=MessageDraft(topic=topic, sender=sender, content=content, metadata=metadata),
    )


def operations(cluster_id: str, *ops: dict[str, Any], sender: str = "conductor") -> MessageRecord:
    return publish(cluster_id, "CLUSTER_OPERATIONS", sender=sender, data={"operations": list(ops)})


def ledger_of(cluster_id: str, topic: str | None = None) -> list[MessageRecord]:
    return message_query(cluster_id=cluster_id, where=MessageFilter(topic=topic), limit=None)


def tasks(cluster_id: str) -> list[tuple[str, str]]:
    return list(
        Task.objects.filter(cluster_id=cluster_id)
        .order_by("created_at", "id")
        .values_list("agent_id", "trigger_topic")
    )


def agent_ids(cluster_id: str) -> list[str]:
    return [a["id"] for a in cluster_get(cluster_id=cluster_id).agents]


# --- add, remove, update, publish ------------------------------------------------------------


def test_an_added_agent_triggers_only_on_what_comes_after_it_joined() -> None:
    # given a running cluster, and a GO published before the chain
    cid = running(agent("worker", "START"), ENDS)
    publish(cid, "GO")

    # when a conductor adds an agent triggered by GO
    chain = operations(cid, {"action": "add_agents", "agents": [agent("late", "GO")]})

    # then it joined without a task for the earlier GO (orchestrator.js _opAddAgents starts the
    # agent, which subscribes to what comes next), and the next GO triggers it
    assert agent_ids(cid) == ["worker", "closer", "late"]
    assert tasks(cid) == []
    publish(cid, "GO")
    assert tasks(cid) == [("late", "GO")]
    [success] = ledger_of(cid, "CLUSTER_OPERATIONS_SUCCESS")
    assert success.sender == "orchestrator"
    assert success.data == {"operationCount": 1, "agentCount": 3}
    # and the change is a new config version: who, which message, the diff
    record = cluster_get(cluster_id=cid)
    assert record.config_version == 2
    first, second = cluster_config_versions(cluster_id=cid)
    assert [a["id"] for a in first.agents] == ["worker", "closer"]
    assert (second.version, second.sender, second.message_id) == (2, "conductor", chain.id)
    assert second.diff == [{"agent": "late", "change": "added"}]


def test_remove_update_and_publish_in_one_chain() -> None:
    hook = {"action": "publish_message", "config": {"topic": "A", "content": {"text": "a"}}}
    cid = running(agent("worker", "START", hooks={"onComplete": hook}), agent("extra", "GO"), ENDS)

    operations(
        cid,
        {"action": "remove_agents", "agentIds": ["extra", "nobody"]},
        # deep-merged (SPEC §7.7): the hook keeps its action and content
        {
            "action": "update_agent",
            "agentId": "worker",
            "updates": {"hooks": {"onComplete": {"config": {"topic": "B"}}}},
        },
        # the sender is the operations' own, whatever the operation says (_opPublish)
        {
            "action": "publish",
            "topic": "GO",
            "sender": "someone-else",
            "receiver": "worker",
            "content": {"text": "go"},
            "metadata": {"_republished": True},
        },
    )

    assert agent_ids(cid) == ["worker", "closer"]
    worker = cluster_get(cluster_id=cid).agents[0]
    assert worker["hooks"]["onComplete"] == {
        "action": "publish_message",
        "config": {"topic": "B", "content": {"text": "a"}},
    }
    [go] = ledger_of(cid, "GO")
    assert (go.sender, go.receiver, go.metadata) == ("conductor", "worker", {"_republished": True})
    assert tasks(cid) == []  # the removed agent no longer triggers
    assert cluster_config_versions(cluster_id=cid)[-1].diff == [
        {"agent": "extra", "change": "removed"},
        {"agent": "worker", "change": "changed"},
    ]


def test_operations_given_as_json_text_run_too() -> None:
    cid = running(agent("worker", "START"), ENDS)
    ops = [{"action": "add_agents", "agents": [agent("late", "GO")]}]
    publish(cid, "CLUSTER_OPERATIONS", data={"operations": json.dumps(ops)})
    assert agent_ids(cid) == ["worker", "closer", "late"]


def test_an_imported_cluster_operations_message_changes_nothing() -> None:
    cid = running(agent("worker", "START"), ENDS)
    ops = [{"action": "add_agents", "agents": [agent("late", "GO")]}]
    message_import_batch(
        cluster_id=cid,
        messages=[
            ImportedMessage(
                id="imported-ops",
                timestamp=1,
                topic="CLUSTER_OPERATIONS",
                sender="conductor",
                receiver="broadcast",
                content={"data": {"operations": ops}},
                metadata=None,
            )
        ],
    )
    assert agent_ids(cid) == ["worker", "closer"]
    assert ledger_of(cid, "CLUSTER_OPERATIONS_SUCCESS") == []


# --- validation, then execution ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("ops", "error"),
    [
        ([{"action": "explode"}], 'Operation 0: unknown action "explode"'),
        ([{"agents": []}], "Operation 0: missing 'action' field"),
        ([], "the operations array is empty"),
        ([{"action": "publish", "topic": "X"}] * 51, "at most 50 in one chain"),
        # the proposed config as a whole fails template validation
        (
            [
                {
                    "action": "add_agents",
                    "agents": [
                        {
                            "id": "bad",
                            "role": "r",
                            "prompt": "p",
                            "triggers": [{"topic": "GO", "action": "launch"}],
                        }
                    ],
                }
            ],
            "launch",
        ),
        (
            [{"action": "load_config", "config": "no-such-template"}],
            "template 'no-such-template' does not exist",
        ),
        ([{"action": "load_config", "config": "../etc/passwd"}], "invalid template name"),
        (
            [{"action": "load_config", "config": {"base": "small", "params": {"level": 7}}}],
            "level must be of type string, got 7",
        ),
    ],
)
def test_an_invalid_chain_changes_nothing_and_says_why(ops: list[Any], error: str) -> None:
    small = {
        "name": "Small",
        "params": {"level": {"type": "string", "default": "a"}},
        "agents": [agent("helper", "GO")],
    }
    template_save(name="small", body=small)
    cid = running(agent("worker", "START"), ENDS)

    operations(cid, *ops)

    # then CLUSTER_OPERATIONS_VALIDATION_FAILED (orchestrator.js _validateProposedConfig) and
    # the cluster runs on, unchanged, for a conductor to try again
    [failed] = ledger_of(cid, "CLUSTER_OPERATIONS_VALIDATION_FAILED")
    assert failed.sender == "orchestrator"
    assert set(failed.data) == {"errors", "warnings", "operations"}
    assert any(error in e for e in failed.data["errors"]), failed.data["errors"]
    record = cluster_get(cluster_id=cid)
    assert (record.state, record.config_version) == ("running", 1)
    assert agent_ids(cid) == ["worker", "closer"]
    assert ledger_of(cid, "CLUSTER_OPERATIONS_SUCCESS") == []


def test_an_execution_error_fails_the_cluster_and_changes_nothing() -> None:
    # given a chain whose first operation is fine and whose second cannot run
    cid = running(agent("worker", "START"), ENDS)

    operations(
        cid,
        {"action": "add_agents", "agents": [agent("late", "GO")]},
        {"action": "update_agent", "agentId": "nobody", "updates": {"role": "x"}},
    )

    # then CLUSTER_OPERATIONS_FAILED and CLUSTER_FAILED (orchestrator.js, the catch of
    # _handleOperations), and the first operation left no trace: all or nothing (SPEC §7.7)
    [failed] = ledger_of(cid, "CLUSTER_OPERATIONS_FAILED")
    assert "update_agent: Agent nobody not found" in failed.data["error"]
    [ended] = ledger_of(cid, "CLUSTER_FAILED")
    assert (ended.sender, ended.data) == ("orchestrator", {"reason": "cluster_operations_failed"})
    record = cluster_get(cluster_id=cid)
    assert (record.state, record.config_version) == ("failed", 1)
    assert agent_ids(cid) == ["worker", "closer"]


def test_a_chain_without_operations_is_ignored() -> None:
    # orchestrator.js: "CLUSTER_OPERATIONS missing operations array, ignoring"
    cid = running(agent("worker", "START"), ENDS)
    publish(cid, "CLUSTER_OPERATIONS", data={"reasoning": "none"})
    assert [m.topic for m in ledger_of(cid)] == ["CLUSTER_OPERATIONS"]


# --- load_config ------------------------------------------------------------------------------


def test_load_config_resolves_zeroshots_names_and_injects_the_completion_detector() -> None:
    # given a cluster of zeroshot's conductor-bootstrap (whose names are zeroshot's)
    templates_load_builtin()
    cid = running(
        agent("junior-conductor", "ISSUE_OPENED", role="conductor"),
        template="zeroshot/conductor-bootstrap",
    )

    operations(
        cid,
        {
            "action": "load_config",
            "config": {
                "base": "worker-validator",
                "params": {"task_type": "TASK", "worker_level": "level2", "complexity": "SIMPLE"},
            },
        },
    )

    # then zeroshot's worker-validator joined (its undeclared params ignored, as zeroshot's
    # resolver ignores them), with zeroshot's completion-detector after it
    assert agent_ids(cid) == ["junior-conductor", "worker", "validator", COMPLETION_DETECTOR_ID]
    worker = cluster_get(cluster_id=cid).agents[1]
    assert worker["modelLevel"] == "level2"


def test_a_recorded_build_names_the_config_version_it_used(api: ApiClient) -> None:
    cid = running(agent("worker", "START"), ENDS)
    operations(cid, {"action": "add_agents", "agents": [agent("late", "GO")]})
    publish(cid, "GO")

    claimed = api.post("/api/v1/tasks/claim", {"wait": 0, "worker": "test"})

    assert claimed.status_code == 200, claimed.content
    build = ContextBuild.objects.get(cluster_id=cid, agent_id="late")
    assert build.config_version == 2
    listed = api.get(f"/api/v1/clusters/{cid}/builds").json()["items"]
    assert [(b["agent_id"], b["config_version"]) for b in listed] == [("late", 2)]


# --- zeroshot's completion-detector -----------------------------------------------------------


def test_the_detector_joins_only_a_config_without_a_completion_handler() -> None:
    # orchestrator.js _hasCompletionHandler: a stop_cluster trigger, a hook publishing
    # CLUSTER_COMPLETE, or an agent named completion-detector or git-pusher
    bare = {"agents": [agent("worker", "START")]}
    assert [a["id"] for a in config_with_completion(bare)["agents"]] == [
        "worker",
        "completion-detector",
    ]
    for own in (
        ENDS,
        agent("stopper", "GO", triggers=[{"topic": "GO", "action": "stop_cluster"}]),
        agent("git-pusher", "GO"),
    ):
        config = {"agents": [agent("worker", "START"), own]}
        assert config_with_completion(config) == config
    assert config_with_completion({"agents": []}) == {"agents": []}


def verdict(approved: Any, *criteria: dict[str, Any]) -> dict[str, Any]:
    return {"approved": approved, "summary": "", "criteriaResults": list(criteria)}


PASS_WITH_EVIDENCE = {
    "id": "AC1",
    "status": "PASS",
    "evidence": {"command": "pytest", "exitCode": 0, "output": "ok"},
}


@pytest.mark.parametrize(
    ("results", "completes"),
    [
        # every validator's newest verdict approves
        ([("v1", verdict(True)), ("v2", verdict(True))], True),
        ([("v1", verdict(True))], False),  # v2 has not answered
        ([("v1", verdict(True)), ("v2", verdict(False))], False),
        ([("v1", verdict(False)), ("v2", verdict(True)), ("v1", verdict("true"))], True),
        # a PASS criterion needs evidence: a command and an exit code
        ([("v1", verdict(True, {"id": "AC1", "status": "PASS"})), ("v2", verdict(True))], False),
        ([("v1", verdict(True, PASS_WITH_EVIDENCE)), ("v2", verdict(True))], True),
        # CANNOT_VALIDATE_YET blocks; CANNOT_VALIDATE does not
        (
            [
                ("v1", verdict(True, {"id": "AC1", "status": "CANNOT_VALIDATE_YET"})),
                ("v2", verdict(True)),
            ],
            False,
        ),
        (
            [
                ("v1", verdict(True, {"id": "AC1", "status": "CANNOT_VALIDATE"})),
                ("v2", verdict(True)),
            ],
            True,
        ),
        # a consensus VALIDATION_RESULT (its sender is no validator) counts on its own
        ([("consensus-coordinator", verdict(True))], True),
        ([("consensus-coordinator", verdict(False))], False),
    ],
)
def test_the_completion_detector_follows_zeroshots_script(
    results: list[tuple[str, dict[str, Any]]], completes: bool
) -> None:
    # given two validators and no completion handler: zeroshot's detector joins
    cid = running(
        agent("worker", "START"),
        agent("v1", "IMPLEMENTATION_READY", role="validator"),
        agent("v2", "IMPLEMENTATION_READY", role="validator"),
    )
    publish(cid, "IMPLEMENTATION_READY", sender="worker")
    Task.objects.filter(cluster_id=cid).delete()  # the validators' own tasks play no part here

    for sender, data in results:
        publish(cid, "VALIDATION_RESULT", sender=sender, data=data)

    complete = ledger_of(cid, "CLUSTER_COMPLETE")
    assert bool(complete) is completes
    if completes:
        assert complete[0].sender == COMPLETION_DETECTOR_ID
        assert cluster_get(cluster_id=cid).state == "completed"


def test_without_validators_the_first_verdict_after_a_handoff_completes() -> None:
    cid = running(agent("worker", "START"))
    publish(cid, "VALIDATION_RESULT", data=verdict(True))  # before any IMPLEMENTATION_READY
    assert ledger_of(cid, "CLUSTER_COMPLETE") == []
    publish(cid, "IMPLEMENTATION_READY", sender="worker")
    publish(cid, "VALIDATION_RESULT", sender="someone", data=verdict(False))
    assert len(ledger_of(cid, "CLUSTER_COMPLETE")) == 1


def test_the_detector_is_rechecked_after_an_operation_chain() -> None:
    # given a cluster that ends itself, then a chain removing the agent that ended it
    cid = running(agent("worker", "START"), ENDS)
    operations(cid, {"action": "remove_agents", "agentIds": ["closer"]})
    # then the detector joins: a verdict after a handoff ends the cluster
    publish(cid, "IMPLEMENTATION_READY", sender="worker")
    publish(cid, "VALIDATION_RESULT", sender="someone", data=verdict(True))
    [complete] = ledger_of(cid, "CLUSTER_COMPLETE")
    assert complete.sender == COMPLETION_DETECTOR_ID


def test_a_removed_agents_open_task_is_cancelled() -> None:
    # zeroshot's _opRemoveAgents stops the agent: its queued task ends with it
    cid = running(agent("worker", "START"), agent("extra", "GO"), ENDS)
    publish(cid, "GO")
    assert tasks(cid) == [("extra", "GO")]

    operations(cid, {"action": "remove_agents", "agentIds": ["extra"]})

    assert list(Task.objects.filter(cluster_id=cid).values_list("state", flat=True)) == [
        "cancelled"
    ]


# --- the conductor watchdog -------------------------------------------------------------------


def conductor(topic: str) -> dict[str, Any]:
    hook = {"action": "publish_message", "config": {"topic": topic, "content": {"text": "x"}}}
    return agent("junior", "ISSUE_OPENED", role="conductor", hooks={"onComplete": hook})


def work_one(api: ApiClient) -> None:
    claimed = api.post("/api/v1/tasks/claim", {"wait": 0, "worker": "test"})
    assert claimed.status_code == 200, claimed.content
    task = claimed.json()["task"]
    done = api.post(
        f"/api/v1/tasks/{task['id']}/complete",
        {"lease_id": task["lease_id"], "result": {"summary": "s", "result": "r"}, "output": "done"},
    )
    assert done.status_code == 200, done.content


@pytest.mark.parametrize(
    ("published", "fails"), [("NOT_OPERATIONS", True), ("CLUSTER_OPERATIONS", False)]
)
def test_a_conductor_that_completes_without_operations_fails_its_cluster(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, published: str, fails: bool
) -> None:
    # given a conductor whose hook publishes something else than CLUSTER_OPERATIONS
    cid = running(conductor(published), ENDS)
    publish(cid, "ISSUE_OPENED", sender="system")
    work_one(api)
    monkeypatch.setattr("runs.watchdog._last_look", 0.0)  # this process looked a moment ago

    # when the next claim comes after CONDUCTOR_WATCHDOG_SECONDS
    with override_settings(CONDUCTOR_WATCHDOG_SECONDS=0.05):
        time.sleep(0.1)
        assert api.post("/api/v1/tasks/claim", {"wait": 0}).status_code == 204

    # then zeroshot's watchdog message failed the cluster (orchestrator.js
    # _registerConductorWatchdog), unless the conductor published CLUSTER_OPERATIONS
    failed = ledger_of(cid, "CLUSTER_FAILED")
    assert bool(failed) is fails
    if fails:
        assert failed[0].sender == "orchestrator"
        assert failed[0].text == (
            "Conductor completed but CLUSTER_OPERATIONS never published - hook failure"
        )
        assert failed[0].data["reason"] == "CONDUCTOR_WATCHDOG_TIMEOUT"
        assert failed[0].data["timeoutMs"] == 50
        assert cluster_get(cluster_id=cid).state == "failed"
    else:
        assert cluster_get(cluster_id=cid).state == "running"


def test_a_cluster_makes_a_bounded_number_of_versions_of_a_bounded_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("runs.operations.VERSIONS_MAX", 2)
    monkeypatch.setattr("runs.operations.CONFIG_MAX_BYTES", 2_000)
    cid = running(agent("worker", "START"), ENDS)

    # a config past its size is refused; the cluster runs on
    operations(cid, {"action": "add_agents", "agents": [agent("big", "GO", prompt="x" * 3_000)]})
    operations(cid, {"action": "add_agents", "agents": [agent("one", "GO")]})
    # the second change would make a third version
    operations(cid, {"action": "add_agents", "agents": [agent("two", "GO")]})

    first, second = ledger_of(cid, "CLUSTER_OPERATIONS_VALIDATION_FAILED")
    assert "at most 2000" in first.data["errors"][0]
    assert "at most 2" in second.data["errors"][0]
    assert agent_ids(cid) == ["worker", "closer", "one"]
    assert cluster_get(cluster_id=cid).config_version == 2


@pytest.mark.parametrize("text", ["[not json", "[" * 100_000 + "]" * 100_000, "[]"])
def test_operations_text_that_is_no_usable_json_is_ignored(text: str) -> None:
    # zeroshot ignores a CLUSTER_OPERATIONS whose operations text does not parse; so do we,
    # also when it nests deeper than the ledger stores (the empty list fails validation)
    cid = running(agent("worker", "START"), ENDS)
    publish(cid, "CLUSTER_OPERATIONS", data={"operations": text})
    expected = ["CLUSTER_OPERATIONS"] + (
        ["CLUSTER_OPERATIONS_VALIDATION_FAILED"] if text == "[]" else []
    )
    assert [m.topic for m in ledger_of(cid)] == expected
    assert cluster_get(cluster_id=cid).state == "running"
