"""A cluster that can no longer move is never shown as running (SPEC §7.3, last sentence;
issue 20 item 3): ``stalled`` and ``failed`` with their reasons, in the API and the dashboard."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from dashboard.demo.recording import demo_recorded
from ledger.interfaces import (
    MessageDraft,
    cluster_create,
    cluster_get,
    message_publish,
    now_ms,
)
from runs.selectors import cluster_conditions
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)


def agent(agent_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": "GO"}],
        "hooks": {"onComplete": {"action": "publish_message", "config": {"topic": "DONE"}}},
        **extra,
    }


def running(cluster_id: str, *agents: dict[str, Any]) -> str:
    return cluster_create(
        cluster_id=cluster_id, config={"agents": list(agents)}, state="running"
    ).id


def publish(cluster_id: str, topic: str = "GO") -> None:
    message_publish(
        cluster_id=cluster_id, draft=MessageDraft(topic=topic, sender="system", content={})
    )


def worked(api: ApiClient, cluster_id: str) -> None:
    """The cluster's worker runs its one task: afterwards nothing triggers anyone."""
    publish(cluster_id)
    claimed = api.post("/api/v1/tasks/claim", {"wait": 0, "cluster": cluster_id}).json()
    task = claimed["task"]
    done = api.post(
        f"/api/v1/tasks/{task['id']}/complete",
        {"lease_id": task["lease_id"], "result": {"summary": "s", "result": "r"}},
    )
    assert done.status_code == 200


def test_a_running_cluster_idle_past_the_stall_time_is_stalled(api: ApiClient) -> None:
    # given a cluster whose worker ran and whose hook's message nobody answers
    idle = running("idle", agent("worker"))
    worked(api, idle)
    # and one with a task still queued, and one without agents (a zeroshot run we follow)
    waiting = running("waiting", agent("worker"))
    publish(waiting)
    followed = running("followed")
    publish(followed)
    clusters = [cluster_get(cluster_id=c) for c in (idle, waiting, followed)]
    later = now_ms() + 3_600_000
    # then only the idle one is stalled, an hour later; nothing is stalled right away
    with override_settings(CLUSTER_STALL_SECONDS=600):
        now = {c: v.state for c, v in cluster_conditions(clusters).items()}
        hour = cluster_conditions(clusters, now=later)
    assert now == {"idle": "running", "waiting": "running", "followed": "running"}
    assert {c: v.state for c, v in hour.items()} == {
        "idle": "stalled",
        "waiting": "running",
        "followed": "running",
    }
    assert "nothing queued, claimed or waiting" in hour["idle"].reason
    assert hour["idle"].idle_since == clusters[0].last_activity


@override_settings(RUNS_RETRY_BASE_SECONDS=0)
def test_a_failed_cluster_shows_why(api: ApiClient) -> None:
    cid = running("broken", agent("worker", maxRetries=0))
    publish(cid)
    task = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
    api.post(f"/api/v1/tasks/{task['id']}/fail", {"lease_id": task["lease_id"], "error": "oom"})
    condition = cluster_conditions([cluster_get(cluster_id=cid)])[cid]
    assert condition.state == "failed"
    assert condition.reason.startswith("critical_agent_failed")
    assert "oom" in condition.reason


@override_settings(RUNS_RETRY_BASE_SECONDS=0)
def test_conditions_take_two_queries_whatever_the_number_of_clusters(api: ApiClient) -> None:
    for n in range(12):
        cid = running(f"c{n}", agent("worker", maxRetries=0))
        publish(cid)
        if n % 3 == 0:
            task = api.post("/api/v1/tasks/claim", {"wait": 0, "cluster": cid}).json()["task"]
            api.post(
                f"/api/v1/tasks/{task['id']}/fail", {"lease_id": task["lease_id"], "error": "x"}
            )
    clusters = [cluster_get(cluster_id=f"c{n}") for n in range(12)]
    with CaptureQueriesContext(connection) as queries:
        conditions = cluster_conditions(clusters, now=now_ms() + 3_600_000)
    assert len(queries) == 2
    assert sorted({c.state for c in conditions.values()}) == ["failed", "running"]


@override_settings(CLUSTER_STALL_SECONDS=0)
def test_the_api_and_the_dashboard_show_stalled_with_the_reason(
    api: ApiClient, admin_client: Client
) -> None:
    idle = running("idle", agent("worker"))
    worked(api, idle)
    time.sleep(0.01)
    condition = api.get(f"/api/v1/clusters/{idle}/condition").json()
    assert condition["state"] == "stalled"
    assert condition["stalled"] is True
    assert "nothing will wake one" in condition["reason"]
    for page in ("/", f"/clusters/{idle}/", f"/clusters/{idle}/tasks/"):
        html = admin_client.get(page).content.decode()
        assert 'class="state state-stalled"' in html, page
        assert "nothing queued, claimed or waiting" in html, page
        assert 'class="state state-running"' not in html, page


@override_settings(CLUSTER_STALL_SECONDS=0)
def test_the_cluster_list_reads_conditions_in_constant_queries(
    api: ApiClient, admin_client: Client
) -> None:
    def queries_for_list() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert admin_client.get("/").status_code == 200
        return len(queries)

    for n in range(2):
        worked(api, running(f"a{n}", agent("worker")))
    few = queries_for_list()
    for n in range(8):
        worked(api, running(f"b{n}", agent("worker")))
    assert queries_for_list() == few


def test_no_running_demo_cluster_contradicts_its_history() -> None:
    # steady-lantern-12 was shown running after its validator approved the last round: its
    # history is imported (imports never trigger, SPEC §7.1), so the completion the recorded
    # run published after that approval must be in the history, and its state must say so
    for spec in demo_recorded():
        verdicts = [m for m in spec["messages"] if m["topic"] == "VALIDATION_RESULT"]
        ended = [m["topic"] for m in spec["messages"] if m["topic"].startswith("CLUSTER_")]
        last_approves = bool(verdicts) and verdicts[-1]["content"]["data"]["approved"] is True
        if spec["state"] == "running":
            assert not last_approves, spec["id"]
            assert ended == [], spec["id"]
        if last_approves:
            assert ended == ["CLUSTER_COMPLETE"], spec["id"]
            assert spec["state"] == "completed", spec["id"]
