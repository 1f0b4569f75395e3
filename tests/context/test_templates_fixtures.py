"""The seven zeroshot templates in ``tests/fixtures/zeroshot/templates`` parse and resolve."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from context.cluster_templates import TemplateError, template_parse, template_resolve
from tests.fixtures import ZEROSHOT

TEMPLATES = ZEROSHOT / "templates"

NAMES = sorted(path.stem for path in TEMPLATES.glob("*.json"))
# zeroshot declares task_type without a default: its conductor always passes one.
NEEDS_TASK_TYPE = {"single-worker", "worker-validator", "full-workflow"}


def load(name: str) -> dict[str, Any]:
    with open(TEMPLATES / f"{name}.json", encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def all_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in all_strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in all_strings(item)]
    return []


def test_the_seven_templates_are_there() -> None:
    assert NAMES == [
        "conductor-bootstrap",
        "debug-workflow",
        "full-workflow",
        "heavy-validation",
        "quick-validation",
        "single-worker",
        "worker-validator",
    ]


@pytest.mark.parametrize("name", NAMES)
def test_template_parses(name: str) -> None:
    spec = template_parse(load(name))
    assert spec.agents
    # the only param without a default in zeroshot's templates is task_type
    expected = ("task_type",) if name in NEEDS_TASK_TYPE else ()
    assert spec.required_params == expected


@pytest.mark.parametrize("name", NAMES)
def test_template_resolves_with_its_defaults(name: str) -> None:
    raw = load(name)
    spec = template_parse(raw)
    params = {"task_type": "TASK"} if name in NEEDS_TASK_TYPE else {}
    config = template_resolve(raw, params)
    declared = {p.name for p in spec.params}
    for text in all_strings(config):
        # no param placeholder and no block tag survives; runtime placeholders may
        for placeholder in re.findall(r"\{\{\s*(\w+)\s*\}\}", text):
            assert placeholder not in declared
        assert "{{#" not in text
        assert "{{/" not in text
    for agent in config["agents"]:
        assert "condition" not in agent
        strategy = agent.get("contextStrategy")
        if strategy is not None:
            assert isinstance(strategy["maxTokens"], int)
        if "timeout" in agent:
            assert agent["timeout"] == 0
    assert "params" not in config
    assert config["name"] == raw["name"]


@pytest.mark.parametrize("name", sorted(NEEDS_TASK_TYPE))
def test_task_type_is_required_where_it_has_no_default(name: str) -> None:
    with pytest.raises(TemplateError, match="missing required params: task_type"):
        template_resolve(load(name), {})


def test_max_tokens_takes_the_typed_default() -> None:
    config = template_resolve(load("single-worker"), {"task_type": "INQUIRY"})
    assert config["agents"][0]["contextStrategy"]["maxTokens"] == 50000
    config = template_resolve(load("single-worker"), {"task_type": "INQUIRY", "max_tokens": 5000})
    assert config["agents"][0]["contextStrategy"]["maxTokens"] == 5000


def test_single_worker_keeps_only_the_matching_if_block() -> None:
    # the first line of each of the three {{#if task_type == ...}} blocks of the fixture
    markers = {
        "INQUIRY": "This is an INQUIRY",
        "TASK": "This is a TRIVIAL TASK",
        "DEBUG": "This is a TRIVIAL DEBUG",
    }
    for task_type, marker in markers.items():
        config = template_resolve(load("single-worker"), {"task_type": task_type})
        prompt = config["agents"][0]["prompt"]["system"]
        assert f"TASK TYPE: {task_type}" in prompt
        assert [m for m in markers.values() if m in prompt] == [marker]
        assert "\n\n\n" not in prompt


def test_full_workflow_conditions_pick_the_validators() -> None:
    raw = load("full-workflow")

    def ids(**params: Any) -> list[str]:
        return [a["id"] for a in template_resolve(raw, {"task_type": "TASK", **params})["agents"]]

    assert ids() == ["planner", "worker", "validator-requirements", "validator-code"]
    assert ids(validator_count=1) == ["planner", "worker", "validator-requirements"]
    assert ids(validator_count=3) == [
        "planner",
        "worker",
        "validator-requirements",
        "validator-code",
        "validator-security",
        "validator-tester",
    ]
    assert ids(validator_count=0, complexity="CRITICAL") == [
        "planner",
        "worker",
        "meta-coordinator",
    ]


def test_full_workflow_critical_blocks_follow_complexity() -> None:
    raw = load("full-workflow")
    standard = template_resolve(raw, {"task_type": "TASK"})["agents"][0]["prompt"]["system"]
    critical = template_resolve(raw, {"task_type": "TASK", "complexity": "CRITICAL"})
    assert "CRITICAL TASK" not in standard
    assert "CRITICAL TASK" in critical["agents"][0]["prompt"]["system"]


def test_runtime_placeholders_survive() -> None:
    debug = template_resolve(load("debug-workflow"), {})
    investigator = debug["agents"][0]
    assert investigator["hooks"]["onComplete"]["config"]["content"]["text"] == "{{result.fixPlan}}"
    bootstrap = template_resolve(load("conductor-bootstrap"), {})
    assert any("{{ISSUE_OPENED.content.text}}" in s for s in all_strings(bootstrap))


def test_prompt_less_completion_detector_is_accepted() -> None:
    agents = template_resolve(load("debug-workflow"), {})["agents"]
    detector = next(a for a in agents if a["id"] == "completion-detector")
    assert "prompt" not in detector
    assert detector["triggers"][0]["action"] == "stop_cluster"


def test_enum_params_are_checked() -> None:
    with pytest.raises(TemplateError, match="worker_level must be one of"):
        template_resolve(load("worker-validator"), {"task_type": "TASK", "worker_level": "level4"})
