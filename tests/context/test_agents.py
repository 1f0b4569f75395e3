"""The typed agent model (context.agents): one reading of each field, one topic matcher."""

from __future__ import annotations

import json
from typing import Any

import pytest

from context.agents import (
    MAX_ITERATIONS_MAX,
    TIMEOUT_MAX_MS,
    AgentConfigError,
    Trigger,
    agent_parse,
    agents_parse,
    config_ends_cluster,
)


def raw(**extra: Any) -> dict[str, Any]:
    return {"id": "worker", "role": "implementation", "prompt": "Work.", **extra}


@pytest.mark.parametrize(
    ("pattern", "topic", "matches"),
    [
        ("PLAN_READY", "PLAN_READY", True),
        ("PLAN_READY", "PLAN_READY_V2", False),
        ("*", "ANYTHING", True),
        ("VALIDATION_*", "VALIDATION_RESULT", True),
        ("VALIDATION_*", "VALIDATION", False),
        # fnmatch would say yes; zeroshot, and so dispatch, never queue a task for it
        ("*_RESULT", "VALIDATION_RESULT", False),
    ],
)
def test_the_one_topic_matcher(pattern: str, topic: str, matches: bool) -> None:
    assert Trigger(topic=pattern).matches(topic) is matches


def test_a_config_is_read_once_with_its_defaults() -> None:
    agent = agent_parse(raw(triggers=[{"topic": "GO"}], modelLevel="level2"))
    assert agent.id == "worker"
    assert agent.output_format == "json"
    assert agent.limits.max_iterations == 100
    assert agent.limits.max_retries == 3
    assert agent.limits.timeout_ms == 0
    assert agent.triggers == (Trigger(topic="GO", action="execute_task", logic=None),)
    # fields the server does not read travel on unchanged
    assert agent.raw["modelLevel"] == "level2"


def test_numbers_are_read_as_json_reads_them() -> None:
    agent = agent_parse(raw(maxIterations="5", maxRetries=2.0, timeout=60_000))
    assert (agent.limits.max_iterations, agent.limits.max_retries) == (5, 2)
    assert agent.limits.timeout_ms == 60_000


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"maxIterations": MAX_ITERATIONS_MAX + 1}, "agent.maxIterations"),
        ({"timeout": TIMEOUT_MAX_MS + 1}, "agent.timeout"),
        ({"timeout": 10**5000}, "agent.timeout"),
        ({"timeout": float("inf")}, "agent.timeout"),
        ({"maxRetries": True}, "agent.maxRetries"),
        ({"maxRetries": 1.5}, "agent.maxRetries"),
        ({"strictSchema": "yes"}, "agent.strictSchema"),
        ({"role": ["validator"]}, "agent.role"),
        ({"prompt": 3}, "agent.prompt"),
        ({"triggers": {"topic": "GO"}}, "agent.triggers"),
        ({"triggers": [{"topic": "go"}]}, "agent.triggers[0].topic"),
        ({"triggers": [{"topic": "GO", "logic": {"script": 1}}]}, "agent.triggers[0].logic.script"),
        ({"hooks": {"onComplete": {"config": []}}}, "agent.hooks.onComplete.config"),
    ],
)
def test_a_config_out_of_shape_or_bounds_names_its_field(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(AgentConfigError) as refused:
        agent_parse(raw(**extra))
    assert refused.value.field == field
    assert refused.value.message.startswith(field)


def test_agent_ids_are_unique() -> None:
    with pytest.raises(AgentConfigError) as refused:
        agents_parse([raw(), raw()])
    assert refused.value.field == "agents[1].id"


@pytest.mark.parametrize(
    ("extra", "ends"),
    [
        ({"triggers": [{"topic": "GO", "action": "stop_cluster"}]}, True),
        ({"hooks": {"onComplete": {"config": {"topic": "CLUSTER_COMPLETE"}}}}, True),
        ({"hooks": {"onComplete": {"config": {"topic": "DONE"}}}}, False),
        # what a transform returns is known only when it runs: it does not count, even when its
        # source names the topic
        (
            {
                "hooks": {
                    "onComplete": {"transform": {"script": "return {topic: 'CLUSTER_COMPLETE'}"}}
                }
            },
            False,
        ),
    ],
)
def test_what_the_config_says_about_ending_its_cluster(extra: dict[str, Any], ends: bool) -> None:
    assert config_ends_cluster(agents_parse([raw(**extra)])) is ends


def test_the_inspector_matches_triggers_as_dispatch_does() -> None:
    from context.services.triggers import trigger_matches

    # an inline agent of a preview need not be a config that could run
    assert trigger_matches({"triggers": [{"topic": "*_RESULT"}]}, "VALIDATION_RESULT") is False
    assert trigger_matches(raw(triggers=[{"topic": "VALIDATION_*"}]), "VALIDATION_RESULT")


def test_the_topology_draws_a_prefix_trigger_from_the_agent_that_publishes_its_topic() -> None:
    from dashboard.topology import topology

    publisher = raw(
        id="validator",
        triggers=[{"topic": "ISSUE_OPENED"}],
        hooks={"onComplete": {"config": {"topic": "VALIDATION_RESULT"}}},
    )
    listener = raw(id="watcher", triggers=[{"topic": "VALIDATION_*"}])
    graph = topology([publisher, listener])
    assert {(e.source, e.topic, e.target) for e in graph.edges} == {
        ("outside", "ISSUE_OPENED", "validator"),
        ("validator", "VALIDATION_RESULT", "watcher"),
    }


def test_a_configs_agents_are_parsed_once_per_config_text(monkeypatch: pytest.MonkeyPatch) -> None:
    from context import completion

    parsed: list[object] = []
    real = completion.config_agents

    def counting(config: Any) -> Any:
        parsed.append(config)
        return real(config)

    monkeypatch.setattr(completion, "config_agents", counting)
    config = {"agents": [raw(triggers=[{"topic": "GO"}]), raw(id="other")]}
    first = completion.running_agents(config)
    # the same config again, read anew from the database: no parse
    again = completion.running_agents({"agents": [dict(a) for a in config["agents"]]})
    assert again is first
    assert [a.id for a in first] == ["worker", "other", "completion-detector"]
    assert len(parsed) == 1
    # a changed config is parsed again; the specs share nothing with the caller's dicts
    config["agents"][1]["role"] = "validator"
    changed = completion.running_agents(config)
    assert len(parsed) == 2
    assert changed[1].role == "validator"
    assert first[1].role == "implementation"
    assert changed[1].raw is not config["agents"][1]
    # the config's stored text, when given, finds the parse without writing the config out
    stored = json.dumps(config)
    by_text = completion.running_agents(json.loads(stored), text=stored)
    assert by_text == changed
    assert completion.running_agents({}, text=stored) is by_text
    # a config the model refuses is refused every time
    with pytest.raises(AgentConfigError):
        completion.running_agents({"agents": [raw(id="")]})
    with pytest.raises(AgentConfigError):
        completion.running_agents({"agents": [raw(id="")]})
