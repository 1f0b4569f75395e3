"""Guidance to a running cluster over the work API (SPEC §7.8): the mailbox, the next prompt,
delivered once, and what a claim that never reached its runner leaves queued."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from context.guidance import guidance_block
from context.models import ContextBuild
from ledger.interfaces import (
    MessageDraft,
    MessageFilter,
    cluster_create,
    message_publish,
    message_query,
)
from ledger.keys import api_key_create
from runs.models import Task
from runs.services import GUIDANCE_TEXT_MAX, task_claim
from runs.services.tasks import lease_look
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

SECTION = "## Guidance (Queued)"


def agent(agent_id: str, topic: str = "GO") -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": "implementation",
        "prompt": f"You are {agent_id}.",
        "triggers": [{"topic": topic}],
        "contextStrategy": {"sources": [{"topic": "GO", "amount": 1}], "maxTokens": 4000},
    }


def running(*agents: dict[str, Any], cluster_id: str = "c1", state: str = "running") -> str:
    return cluster_create(cluster_id=cluster_id, config={"agents": list(agents)}, state=state).id


def go(cluster_id: str, text: str = "go") -> None:
    message_publish(
        cluster_id=cluster_id,
        draft=MessageDraft(topic="GO", sender="system", content={"text": text}),
    )


def claim(api: ApiClient) -> dict[str, Any]:
    response = api.post("/api/v1/tasks/claim", {"wait": 0})
    assert response.status_code == 200, response.content
    return dict(response.json())


def complete(api: ApiClient, claimed: dict[str, Any]) -> None:
    task = claimed["task"]
    body = {"lease_id": task["lease_id"], "result": {"summary": "done", "result": "ok"}}
    response = api.post(f"/api/v1/tasks/{task['id']}/complete", body)
    assert response.status_code == 200, response.content


def guide(api: ApiClient, cluster_id: str, **body: Any) -> Any:
    return api.post(f"/api/v1/clusters/{cluster_id}/guidance", body)


def guidance_messages(cluster_id: str) -> list[Any]:
    topics = ("USER_GUIDANCE_AGENT", "USER_GUIDANCE_CLUSTER")
    return message_query(cluster_id=cluster_id, where=MessageFilter(topic=topics), limit=None)


def test_guidance_is_published_as_zeroshot_publishes_it(api: ApiClient) -> None:
    # zeroshot: src/orchestrator.js:2791-2810 (_publishGuidance, _publishClusterGuidance:
    # sender "user", the agent as receiver, content {text}, metadata.delivery)
    cid = running(agent("worker"), agent("reviewer"))

    to_one = guide(api, cid, text="Use approach B", agent="worker")
    to_all = guide(api, cid, text="Keep the change small")

    assert (to_one.status_code, to_all.status_code) == (201, 201)
    one, everyone = guidance_messages(cid)
    assert (one.topic, one.sender, one.receiver) == ("USER_GUIDANCE_AGENT", "user", "worker")
    assert (everyone.topic, everyone.receiver) == ("USER_GUIDANCE_CLUSTER", "broadcast")
    assert one.content == {"text": "Use approach B"}
    assert one.metadata["delivery"]["status"] == "queued"
    assert to_one.json()["id"] == one.id


def test_guidance_reaches_the_agents_next_prompt_once(api: ApiClient) -> None:
    # zeroshot: tests/integration/guidance-queue-context.test.js:52-78
    cid = running(agent("worker"), agent("reviewer", topic="NEVER"))
    go(cid)
    first = claim(api)
    # sent while the worker's first task runs: its prompt was built before
    guide(api, cid, text="Use approach B", agent="worker")
    guide(api, cid, text="To the reviewer", agent="reviewer")
    complete(api, first)
    go(cid, "again")
    second = claim(api)
    complete(api, second)
    go(cid, "once more")
    third = claim(api)

    assert SECTION not in first["prompt"]
    note = next(m for m in guidance_messages(cid) if m.receiver == "worker")
    assert guidance_block([note]) in second["prompt"]
    assert "To the reviewer" not in second["prompt"]
    assert SECTION not in third["prompt"]
    # the build explains it: a required pack, right after the instructions
    packs = [p["id"] for p in second["metrics"]["packs"] if p["status"] == "included"]
    assert packs[:3] == ["header", "instructions", "queuedGuidance"]
    build = ContextBuild.objects.get(pk=second["task"]["build_id"])
    assert (build.guidance_through, build.guidance_delivered) == (note.sequence, True)


def test_a_failed_attempt_leaves_the_guidance_queued(api: ApiClient) -> None:
    cid = running(agent("worker"))
    go(cid)
    guide(api, cid, text="Use approach B")
    with override_settings(RUNS_RETRY_BASE_SECONDS=0):
        first = claim(api)
        failed = api.post(
            f"/api/v1/tasks/{first['task']['id']}/fail",
            {"lease_id": first["task"]["lease_id"], "error": "crash"},
        )
        assert failed.json()["state"] == "queued"
        retry = claim(api)
    complete(api, retry)
    go(cid, "again")
    after = claim(api)

    assert "Use approach B" in first["prompt"]
    assert "Use approach B" in retry["prompt"]
    assert SECTION not in after["prompt"]


def test_a_claim_that_never_reached_its_runner_loses_no_guidance(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = running(agent("worker"))
    go(cid)
    guide(api, cid, text="Use approach B")

    def lost(_: Any) -> Any:
        raise ConnectionResetError("the answer never left")

    # the build is recorded, then the claim fails before it returns
    with monkeypatch.context() as patched:
        patched.setattr("runs.services.tasks.agent_wire", lost)
        with pytest.raises(ConnectionResetError):
            task_claim(lease_seconds=30)
    assert ContextBuild.objects.count() == 1
    Task.objects.update(lease_expires_at=1)  # its lease runs out
    lease_look.now()  # behind this process's back: its next claim looks
    again = claim(api)

    assert again["task"]["attempts"] == 2
    assert "Use approach B" in again["prompt"]


def test_guidance_triggers_what_listens_to_its_topic_only(api: ApiClient) -> None:
    # zeroshot: guidance is a ledger message like any other; an agent acts on it only when a
    # trigger of its matches the topic (src/agent/agent-lifecycle.js:267-283, no receiver check)
    cid = running(agent("worker"), agent("listener", topic="USER_GUIDANCE_AGENT"))

    guide(api, cid, text="Use approach B", agent="worker")

    queued = list(Task.objects.filter(cluster_id=cid).values_list("agent_id", "trigger_topic"))
    assert queued == [("listener", "USER_GUIDANCE_AGENT")]


def test_guidance_is_refused_clearly(api: ApiClient) -> None:
    cid = running(agent("worker"))
    idle = running(agent("worker"), cluster_id="c2", state="initializing")

    unknown = guide(api, cid, text="x", agent="ghost")
    stopped = guide(api, idle, text="x")
    blank = guide(api, cid, text="  \n ")
    long = guide(api, cid, text="x" * (GUIDANCE_TEXT_MAX + 1))
    extra = guide(api, cid, text="x", to="worker")
    missing = guide(api, "nope", text="x")

    assert unknown.status_code == 422
    assert unknown.json()["code"] == "unknown_agent"
    assert unknown.json()["details"]["agents"] == ["worker"]
    assert stopped.status_code == 409
    assert "not running" in stopped.json()["message"]
    assert (blank.status_code, blank.json()["details"]["field"]) == (422, "text")
    assert long.status_code == 422
    assert extra.status_code == 422
    assert missing.status_code == 404
    assert guidance_messages(cid) == []


def test_a_cluster_scoped_key_guides_its_own_cluster_only(api: ApiClient) -> None:
    mine = running(agent("worker"))
    other = running(agent("worker"), cluster_id="c2")
    _, key = api_key_create(name="scoped", cluster_id=mine)
    scoped = ApiClient(key)

    assert guide(scoped, mine, text="x").status_code == 201
    assert guide(scoped, other, text="x").status_code == 403
