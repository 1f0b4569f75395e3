"""Runner pools and the runners the server sees (SPEC §7.4): cluster labels, claims filtered by
labels and providers, the runner registry and ``GET /api/v1/runners``."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.interfaces import MessageDraft, cluster_create, cluster_get, message_publish
from ledger.keys import api_key_create
from runs.models import Runner, Task
from runs.selectors import runners_seen
from runs.waiting import ClaimFilter, claimable_heads
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

CLAIM = "/api/v1/tasks/claim"


def agent(agent_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": "implementation",
        "prompt": f"You are {agent_id}.",
        "triggers": [{"topic": "GO"}],
        **extra,
    }


def queued(cluster_id: str, *agents: dict[str, Any], labels: Any = None) -> str:
    created = cluster_create(
        cluster_id=cluster_id,
        config={"agents": list(agents) or [agent("worker")]},
        state="running",
        labels=labels,
    )
    message_publish(cluster_id=created.id, draft=MessageDraft(topic="GO", sender="system"))
    return created.id


def claimed_cluster(api: ApiClient, **body: Any) -> str | None:
    response = api.post(CLAIM, {"wait": 0, **body})
    if response.status_code == 204:
        return None
    assert response.status_code == 200, response.content
    return str(response.json()["task"]["cluster_id"])


# --- cluster labels --------------------------------------------------------------------------


def test_a_cluster_created_with_labels_carries_and_shows_them(api: ApiClient) -> None:
    # when a cluster is created through the API with labels
    created = api.post(
        "/api/v1/clusters",
        {"id": "pooled", "config": {"agents": [agent("worker")]}, "labels": {"pool": "demo"}},
    )
    # then it stores and shows them; one created without has none
    assert created.status_code == 201, created.content
    assert created.json()["labels"] == {"pool": "demo"}
    assert api.get("/api/v1/clusters/pooled").json()["labels"] == {"pool": "demo"}
    assert cluster_get(cluster_id="pooled").labels == {"pool": "demo"}
    plain = api.post("/api/v1/clusters", {"id": "plain", "config": {"agents": [agent("worker")]}})
    assert plain.json()["labels"] == {}
    listed = {c["id"]: c["labels"] for c in api.get("/api/v1/clusters").json()}
    assert listed == {"pooled": {"pool": "demo"}, "plain": {}}


def test_labels_from_a_template_are_kept(api: ApiClient, builtin_templates: None) -> None:
    created = api.post(
        "/api/v1/clusters",
        {"id": "t", "template": "worker-validator", "labels": {"pool": "gpu", "team": "a"}},
    )
    assert created.status_code == 201, created.content
    assert cluster_get(cluster_id="t").labels == {"pool": "gpu", "team": "a"}


@pytest.mark.parametrize(
    "labels",
    [
        {f"k{i}": "v" for i in range(17)},
        {"": "v"},
        {"-x": "v"},
        {"a b": "v"},
        {"k" * 64: "v"},
        {"pool": "v" * 64},
        {"pool": "<script>"},
        {"pool": 1},
        ["pool", "demo"],
    ],
)
def test_labels_out_of_bounds_are_refused(api: ApiClient, labels: Any) -> None:
    response = api.post(
        "/api/v1/clusters", {"id": "bad", "config": {"agents": [agent("w")]}, "labels": labels}
    )
    assert response.status_code == 422, response.content
    assert api.get("/api/v1/clusters/bad").status_code == 404


# --- claims filtered by labels and providers -------------------------------------------------


def test_a_claim_with_labels_gets_only_tasks_of_clusters_carrying_every_one(
    api: ApiClient,
) -> None:
    # given three clusters' tasks, oldest first: none, pool=demo, pool=demo + team=a
    queued("plain")
    queued("demo", labels={"pool": "demo"})
    queued("demo-a", labels={"pool": "demo", "team": "a"})
    # then a runner of team a's demo pool gets only the one with both
    assert claimed_cluster(api, labels={"pool": "demo", "team": "a"}) == "demo-a"
    assert claimed_cluster(api, labels={"pool": "demo", "team": "a"}) is None
    # a runner of the demo pool gets the other demo cluster, never the unlabelled one
    assert claimed_cluster(api, labels={"pool": "demo"}) == "demo"
    assert claimed_cluster(api, labels={"pool": "demo"}) is None
    assert claimed_cluster(api, labels={"pool": "other"}) is None
    # and a runner asking for no labels serves any cluster
    assert claimed_cluster(api) == "plain"


def test_a_claim_with_providers_gets_agents_naming_one_of_them_or_none(api: ApiClient) -> None:
    # given agents on claude, on codex, and one naming no provider
    queued("c", agent("on-claude", provider="claude"), agent("on-codex", provider="codex"))
    queued("n", agent("anyone"))
    assert dict(Task.objects.values_list("agent_id", "provider")) == {
        "on-claude": "claude",
        "on-codex": "codex",
        "anyone": "",
    }

    def agent_of(**body: Any) -> str | None:
        response = api.post(CLAIM, {"wait": 0, **body})
        return None if response.status_code == 204 else response.json()["task"]["agent_id"]

    # then a gemini runner gets only the agent naming none
    assert agent_of(providers=["gemini", "opencode"]) == "anyone"
    assert agent_of(providers=["gemini", "opencode"]) is None
    # a claude runner gets claude's, and a runner asking for any provider the rest
    assert agent_of(providers=["claude"]) == "on-claude"
    assert agent_of(providers=["claude"]) is None
    assert agent_of() == "on-codex"


def test_a_waiting_claim_is_woken_only_by_tasks_it_may_take() -> None:
    queued("plain", agent("w", provider="claude"))
    queued("demo", agent("w"), labels={"pool": "demo"})
    heads = claimable_heads(now=2**62)
    by_cluster = {head[0]: head for head in heads}
    demo = ClaimFilter(labels=(("pool", "demo"),))
    assert not demo.passes(by_cluster["plain"])
    assert demo.passes(by_cluster["demo"])
    codex = ClaimFilter(providers=("codex",))
    assert not codex.passes(by_cluster["plain"])
    assert codex.passes(by_cluster["demo"])
    assert ClaimFilter(providers=("claude",)).passes(by_cluster["plain"])


@pytest.mark.parametrize(
    "body",
    [
        {"labels": {"a b": "x"}},
        {"labels": {f"k{i}": "v" for i in range(17)}},
        {"labels": {"pool": 1}},
        {"providers": ["p"] * 33},
        {"providers": "claude"},
        {"providers": [""]},
        {"providers": ["p" * 65]},
    ],
)
def test_claim_filters_out_of_bounds_are_refused(api: ApiClient, body: dict[str, Any]) -> None:
    queued("plain")
    response = api.post(CLAIM, {"wait": 0, **body})
    assert response.status_code == 422, response.content
    assert not Task.objects.filter(state="claimed").exists()


# --- the runners the server sees -------------------------------------------------------------


def test_the_server_keeps_each_runner_what_it_serves_holds_and_did(api: ApiClient) -> None:
    # given two tasks of a demo cluster
    queued("demo", agent("a"), agent("b"), labels={"pool": "demo"})
    # when a runner claims both, completes one and fails the other for good, and another idles
    body = {"worker": "box:1", "labels": {"pool": "demo"}, "providers": ["scripted", "claude"]}
    first = api.post(CLAIM, {"wait": 0, **body}).json()["task"]
    second = api.post(CLAIM, {"wait": 0, **body}).json()["task"]
    assert api.post(CLAIM, {"wait": 0, "worker": "box:2"}).status_code == 204
    seen = {r.name: r for r in runners_seen()}
    assert seen["box:1"].holding == 2
    assert seen["box:1"].claimed == 2
    assert seen["box:2"].holding == 0
    done = api.post(
        f"/api/v1/tasks/{first['id']}/complete",
        {"lease_id": first["lease_id"], "result": {"summary": "ok"}},
    )
    assert done.status_code == 200, done.content
    failed = api.post(
        f"/api/v1/tasks/{second['id']}/fail",
        {"lease_id": second["lease_id"], "error": "broken", "retryable": False},
    )
    assert failed.status_code == 200, failed.content
    # then the registry says so, most recently seen first, on the API too
    runners = api.get("/api/v1/runners")
    assert runners.status_code == 200, runners.content
    by_name = {r["name"]: r for r in runners.json()}
    assert by_name["box:1"] == {
        "name": "box:1",
        "first_seen_at": by_name["box:1"]["first_seen_at"],
        "last_seen_at": by_name["box:1"]["last_seen_at"],
        "labels": {"pool": "demo"},
        "providers": ["claude", "scripted"],
        "holding": 0,
        "claimed": 2,
        "completed": 1,
        "failed": 1,
    }
    assert by_name["box:2"]["labels"] == {}
    assert by_name["box:2"]["claimed"] == 0
    assert runners.json()[0]["name"] == "box:1"  # its fail call came after box:2's claim


def test_a_runner_claiming_anew_is_seen_again_with_what_it_serves_now(api: ApiClient) -> None:
    api.post(CLAIM, {"wait": 0, "worker": "w", "labels": {"pool": "a"}})
    first = Runner.objects.get(name="w")
    api.post(CLAIM, {"wait": 0, "worker": "w", "labels": {"pool": "b"}})
    again = Runner.objects.get(name="w")
    assert again.labels == {"pool": "b"}
    assert again.first_seen_at == first.first_seen_at
    assert again.last_seen_at >= first.last_seen_at
    # a claim with no worker name records no runner
    api.post(CLAIM, {"wait": 0})
    assert list(Runner.objects.values_list("name", flat=True)) == ["w"]


def test_a_runner_that_claims_tasks_is_recorded_with_what_each_claim_serves(
    api: ApiClient,
) -> None:
    # given two tasks, and a runner never seen before
    queued("demo", agent("a"), agent("b"), labels={"pool": "demo"})
    # when it claims one serving some providers, then the other, at once, serving others
    first = {"wait": 0, "worker": "w", "labels": {"pool": "demo"}, "providers": ["codex"]}
    assert api.post(CLAIM, first).status_code == 200
    made = Runner.objects.get(name="w")
    second = {**first, "labels": {}, "providers": ["gemini", "claude"]}
    assert api.post(CLAIM, second).status_code == 200
    # then its row was made by the first claim and brought up to date by the second
    again = Runner.objects.get(name="w")
    assert (made.labels, made.providers, made.claimed) == ({"pool": "demo"}, ["codex"], 1)
    assert (again.labels, again.providers, again.claimed) == ({}, ["claude", "gemini"], 2)
    assert again.first_seen_at == made.first_seen_at
    assert again.last_seen_at >= made.last_seen_at


def test_a_cluster_scoped_key_cannot_list_the_runners(api: ApiClient) -> None:
    cluster_create(cluster_id="c1")
    _, key = api_key_create(name="scoped", cluster_id="c1")
    assert ApiClient(key).get("/api/v1/runners").status_code == 403
    assert api.get("/api/v1/runners").status_code == 200
