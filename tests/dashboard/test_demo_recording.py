"""The demo is its templates run (issue 20 item 6): recorded once, loaded fast, never by hand."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from context.cluster_templates import template_builtin_list, template_resolve
from context.models import ContextBuild
from context.services.templates import templates_load_builtin
from dashboard.demo.recording import demo_record, demo_recorded
from dashboard.demo.scenarios import SCENARIOS
from ledger.interfaces import cluster_get
from runs.models import Task
from runs.selectors import cluster_conditions

# Messages every run has whatever its agents: a task's life, its output and usage, snapshots.
RUN_TOPICS = {
    "AGENT_LIFECYCLE",
    "AGENT_OUTPUT",
    "TOKEN_USAGE",
    "STATE_SNAPSHOT",
    "CLUSTER_COMPLETE",
    "CLUSTER_FAILED",
}
SYSTEM_SENDERS = {"system", "state-snapshotter", "completion-detector"}


def recorded_by_id() -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in demo_recorded()}


def trigger_topics(config: dict[str, Any]) -> set[str]:
    return {t["topic"] for a in config["agents"] for t in a.get("triggers", [])}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_each_demo_cluster_is_its_template_resolved(scenario: Any) -> None:
    recorded = recorded_by_id()[scenario.id]
    template = template_builtin_list()[scenario.template]

    assert recorded["template"] == scenario.template
    assert recorded["config"] == template_resolve(template, scenario.params)
    # every agent of the template, no other (bold-ridge-3 once had a worker for a fixer)
    assert [a["id"] for a in recorded["config"]["agents"]] == [a["id"] for a in template["agents"]]
    # budgets are the template's: its max_tokens param, 100,000 unless the scenario sets it
    budget = template["params"]["max_tokens"]["default"]
    assert recorded["params"]["max_tokens"] == scenario.params.get("max_tokens", budget)
    assert {a["contextStrategy"]["maxTokens"] for a in recorded["config"]["agents"]} == {
        recorded["params"]["max_tokens"]
    }


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_demo_messages_follow_the_templates_topics(scenario: Any) -> None:
    recorded = recorded_by_id()[scenario.id]
    agents = {a["id"] for a in recorded["config"]["agents"]}
    listened = trigger_topics(recorded["config"])
    hooks = {
        a["hooks"]["onComplete"]["config"]["topic"]
        for a in recorded["config"]["agents"]
        if "onComplete" in a.get("hooks", {})
    }
    messages = recorded["messages"]

    # no sender that is neither an agent of the template nor the server
    assert {m["sender"] for m in messages} <= agents | SYSTEM_SENDERS
    for m in messages:
        if m["topic"] in RUN_TOPICS:
            continue
        # no topic nobody listens to (INVESTIGATION_COMPLETE once went to nobody)
        assert m["topic"] in listened, (m["topic"], m["sender"])
        # an agent publishes only its template's hook topics
        if m["sender"] in agents:
            assert m["topic"] in hooks, (m["topic"], m["sender"])
    # every agent the run reached did work: it has a build, a task's start, or is still queued
    built = {b["agent_id"] for b in recorded["builds"]}
    assert built <= agents
    if recorded["state"] == "completed":
        assert built == agents
        assert messages[-1]["topic"] == "CLUSTER_COMPLETE"
    if recorded["state"] == "failed":
        assert messages[-1]["topic"] == "CLUSTER_FAILED"


@pytest.mark.django_db(transaction=True)
def test_the_committed_recording_is_what_the_templates_produce_today(tmp_path: Path) -> None:
    # given the built-in templates and an empty database, when the demo is recorded again
    templates_load_builtin()
    path = tmp_path / "recorded.json"
    demo_record(path)
    fresh = {c["id"]: c for c in demo_recorded(path)}

    # then it tells the same story as the committed one: ids and times aside, the same
    # configs, states, messages and builds (re-record with `make demo-record` after a change)
    def story(cluster: dict[str, Any]) -> Any:
        return (
            cluster["config"],
            cluster["params"],
            cluster["state"],
            cluster["open_trigger_sequence"],
            [(m["topic"], m["sender"], m["receiver"]) for m in cluster["messages"]],
            [(b["agent_id"], b["iteration"], b["trigger_sequence"]) for b in cluster["builds"]],
        )

    committed = recorded_by_id()
    assert fresh.keys() == committed.keys()
    for cluster_id, cluster in committed.items():
        assert story(fresh[cluster_id]) == story(cluster), cluster_id


@pytest.mark.django_db(transaction=True)
def test_the_loaded_demo_is_the_recording_and_nothing_contradicts_its_state() -> None:
    call_command("demo", stdout=StringIO())

    clusters = [cluster_get(cluster_id=c["id"]) for c in demo_recorded()]
    conditions = cluster_conditions(clusters)
    for cluster, recorded in zip(clusters, demo_recorded(), strict=True):
        assert cluster.config == recorded["config"]
        assert cluster.params == recorded["params"]
        assert cluster.state == recorded["state"]
        builds = ContextBuild.objects.filter(cluster_id=cluster.id)
        assert {b.max_tokens for b in builds} == {recorded["params"]["max_tokens"]}
        assert builds.count() == len(recorded["builds"]) - (
            recorded["open_trigger_sequence"] is not None
            and sum(
                b["trigger_sequence"] == recorded["open_trigger_sequence"]
                for b in recorded["builds"]
            )
        )
        condition = conditions.get(cluster.id)
        assert condition is None or not condition.stalled, cluster.id
    # the cluster recorded running has its open task queued again, for `make run`'s runner
    running = [c for c in clusters if c.state == "running"]
    assert running
    for cluster in running:
        assert Task.objects.filter(cluster_id=cluster.id, state="queued").count() == 1
