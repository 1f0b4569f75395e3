"""The project's own templates (``context/builtin_templates``) are complete and consistent."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from context.cluster_templates import template_builtin_list, template_parse, template_resolve
from tests.fixtures import ZEROSHOT

BUILTINS = template_builtin_list()
NAMES = ["debug-workflow", "planner-worker-validators", "single-worker", "worker-validator"]
FIXTURE_TEMPLATES = ZEROSHOT / "templates"
# Topics an agent may read without another agent of the cluster publishing them (SPEC §2.1).
EXEMPT_SOURCES = {"ISSUE_OPENED", "CLUSTER_RESUMED", "STATE_SNAPSHOT"}


def resolved(name: str) -> list[dict[str, Any]]:
    agents: list[dict[str, Any]] = template_resolve(BUILTINS[name], {})["agents"]
    return agents


def sources(agent: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["topic"]: s for s in agent["contextStrategy"]["sources"]}


def published(agents: list[dict[str, Any]]) -> set[str]:
    return {a["hooks"]["onComplete"]["config"]["topic"] for a in agents}


def test_the_four_builtins_exist() -> None:
    assert sorted(BUILTINS) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_parses_and_resolves_with_defaults(name: str) -> None:
    spec = template_parse(BUILTINS[name])
    assert spec.required_params == ()
    max_tokens = spec.param("max_tokens")
    assert max_tokens is not None
    assert (max_tokens.type, max_tokens.default) == ("integer", 100000)
    assert resolved(name)


@pytest.mark.parametrize("name", NAMES)
def test_every_agent_has_a_prompt_triggers_and_the_token_budget(name: str) -> None:
    for raw, agent in zip(BUILTINS[name]["agents"], resolved(name), strict=True):
        assert agent["prompt"]["system"].strip(), agent["id"]
        assert agent["triggers"], agent["id"]
        assert raw["contextStrategy"]["maxTokens"] == "{{max_tokens}}"
        assert agent["contextStrategy"]["maxTokens"] == 100000
        assert "{{#if" not in agent["prompt"]["system"]


@pytest.mark.parametrize("name", NAMES)
def test_sources_triggers_and_hooks_fit_together(name: str) -> None:
    agents = resolved(name)
    topics = published(agents)
    has_planner = any(a["role"] == "planning" and a["id"] == "planner" for a in agents)
    for agent in agents:
        by_topic = sources(agent)
        assert by_topic["ISSUE_OPENED"]["priority"] == "required"
        assert "STATE_SNAPSHOT" in by_topic
        if has_planner and agent["id"] != "planner":  # the planner writes the plan
            assert by_topic["PLAN_READY"]["priority"] == "required"
        # every trigger topic is in the agent's context (SPEC §2.1 warns otherwise)
        for trigger in agent["triggers"]:
            assert trigger["topic"] in by_topic, (agent["id"], trigger["topic"])
        # every source topic is published by an agent of this cluster (or exempt)
        for topic in by_topic:
            assert topic in topics | EXEMPT_SOURCES, (agent["id"], topic)
        for source in by_topic.values():
            assert source["strategy"] == "latest"
            assert source["amount"] >= 1
    # every published topic is read by someone, or ends the cluster
    consumed = {t["topic"] for a in agents for t in a["triggers"]}
    assert topics <= consumed | {"CLUSTER_COMPLETE"}


@pytest.mark.parametrize(
    "name", ["worker-validator", "planner-worker-validators", "debug-workflow"]
)
def test_workers_read_rejections_since_their_last_task(name: str) -> None:
    agents = resolved(name)
    workers = [a for a in agents if a["role"] == "implementation"]
    validators = [a for a in agents if a["role"] == "validator"]
    assert len(workers) == 1
    worker = workers[0]
    assert sources(worker)["VALIDATION_RESULT"]["since"] == "last_task_end"
    assert worker["hooks"]["onComplete"]["config"]["topic"] == "IMPLEMENTATION_READY"
    # No stop_cluster beside the execute_task on VALIDATION_RESULT: the first trigger whose topic
    # matches decides (zeroshot src/agent/agent-trigger-evaluator.ts:56), so it would never be
    # tried; the cluster ends by the completion rule, as zeroshot's templates end by its
    # injected completion-detector.
    assert {t["action"] for t in worker["triggers"]} == {"execute_task"}
    assert worker["maxIterations"] >= 1
    for validator in validators:
        assert sources(validator)["IMPLEMENTATION_READY"]["since"] == "last_agent_start"
        assert validator["hooks"]["onComplete"]["config"]["topic"] == "VALIDATION_RESULT"
        schema = validator["jsonSchema"]
        assert {"approved", "summary", "errors", "criteriaResults"} <= set(schema["properties"])
        assert schema["properties"]["approved"]["type"] == "boolean"
        data = validator["hooks"]["onComplete"]["config"]["content"]["data"]
        assert data["approved"] == "{{result.approved}}"


def test_the_expected_agents_per_workflow() -> None:
    ids = {name: [a["id"] for a in resolved(name)] for name in NAMES}
    assert ids["single-worker"] == ["worker"]
    assert ids["worker-validator"] == ["worker", "validator"]
    assert ids["planner-worker-validators"] == [
        "planner",
        "worker",
        "validator-requirements",
        "validator-code",
    ]
    assert ids["debug-workflow"] == ["investigator", "fixer", "validator"]
    assert published(resolved("debug-workflow")) >= {"INVESTIGATION_COMPLETE"}
    assert published(resolved("planner-worker-validators")) >= {"PLAN_READY"}


def test_critical_complexity_adds_the_extra_care_section() -> None:
    raw = BUILTINS["planner-worker-validators"]
    standard = template_resolve(raw, {})["agents"][0]["prompt"]["system"]
    critical = template_resolve(raw, {"complexity": "CRITICAL"})["agents"][0]["prompt"]["system"]
    assert "marked critical" not in standard
    assert "marked critical" in critical


def _shingles(text: str, size: int = 8) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9']+", text.lower())
    return {tuple(words[i : i + size]) for i in range(len(words) - size + 1)}


def test_prompts_are_our_own_words() -> None:
    # given every prompt zeroshot ships
    theirs: set[tuple[str, ...]] = set()
    for path in FIXTURE_TEMPLATES.glob("*.json"):
        with open(path, encoding="utf-8") as handle:
            for agent in json.load(handle).get("agents", []):
                prompt = agent.get("prompt")
                texts = prompt.values() if isinstance(prompt, dict) else [prompt or ""]
                for text in texts:
                    theirs |= _shingles(str(text))
    # then no run of eight words of ours appears in theirs
    for name in NAMES:
        for agent in BUILTINS[name]["agents"]:
            shared = _shingles(agent["prompt"]["system"]) & theirs
            assert not shared, (name, agent["id"], sorted(shared)[:3])


def test_zeroshots_templates_ship_unchanged_as_built_ins() -> None:
    # given zeroshot's seven templates as the suite keeps them (byte-identical to zeroshot's)
    from context.cluster_templates import BUILTIN_TEMPLATES_DIR, template_zeroshot_list
    from tests.fixtures import ZEROSHOT

    fixtures = sorted((ZEROSHOT / "templates").glob("*.json"))
    # then each ships as a built-in, unchanged, named zeroshot/<name>, with zeroshot's licence
    shipped = BUILTIN_TEMPLATES_DIR / "zeroshot"
    for fixture in fixtures:
        assert (shipped / fixture.name).read_bytes() == fixture.read_bytes()
    assert sorted(template_zeroshot_list()) == [f"zeroshot/{p.stem}" for p in fixtures]
    assert (shipped / "LICENSE").read_bytes() == (ZEROSHOT / "LICENSE").read_bytes()
