"""Cluster templates in the database: checked saves, versions, built-ins, clusters (SPEC §4)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from context.cluster_templates import TemplateError, template_builtin_list
from context.services.templates import (
    cluster_create_from_template,
    template_check,
    template_get,
    template_list,
    template_save,
    template_version_diff,
    template_versions,
    templates_load_builtin,
)
from ledger.errors import InvalidInput, NotFound

pytestmark = pytest.mark.django_db

OWN_BUILTINS = ["debug-workflow", "planner-worker-validators", "single-worker", "worker-validator"]
# zeroshot's cluster-templates/, shipped as built-ins (context/builtin_templates/zeroshot/)
ZEROSHOT_BUILTINS = [
    f"zeroshot/{name}"
    for name in (
        "conductor-bootstrap",
        "debug-workflow",
        "full-workflow",
        "heavy-validation",
        "quick-validation",
        "single-worker",
        "worker-validator",
    )
]
BUILTIN_NAMES = OWN_BUILTINS + ZEROSHOT_BUILTINS


def small_template(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "Small",
        "description": "one worker",
        "params": {
            "max_tokens": {"type": "integer", "default": 1000},
            "task_type": {"type": "string", "enum": ["INQUIRY", "TASK"]},
        },
        "agents": [
            {
                "id": "worker",
                "role": "implementation",
                "prompt": {"system": "Do the {{task_type}} well."},
                "triggers": [{"topic": "ISSUE_OPENED", "action": "execute_task"}],
                "contextStrategy": {
                    "maxTokens": "{{max_tokens}}",
                    "sources": [{"topic": "ISSUE_OPENED", "priority": "required"}],
                },
                "hooks": {"onComplete": {"action": "publish_message", "config": {"topic": "DONE"}}},
            }
        ],
    }
    body.update(changes)
    return body


def with_strategy(body: dict[str, Any], strategy: str) -> dict[str, Any]:
    changed = copy.deepcopy(body)
    changed["agents"][0]["contextStrategy"]["sources"][0]["strategy"] = strategy
    return changed


def test_builtins_load_once_and_keep_edits() -> None:
    # given a database whose migration loaded the built-ins
    templates_load_builtin()
    # when they are loaded again after an edit of one
    original = template_get(name="single-worker").body
    edited = copy.deepcopy(original)
    edited["description"] = "edited by the operator"
    template_save(name="single-worker", body=edited, note="edit")
    created = templates_load_builtin()
    # then nothing is created twice and the edit stays
    assert created == []
    builtins = [t for t in template_list() if t.builtin]
    assert [t.name for t in builtins] == BUILTIN_NAMES
    assert template_get(name="single-worker").description == "edited by the operator"
    assert template_get(name="worker-validator").body == template_builtin_list()["worker-validator"]


def test_every_change_is_a_new_version() -> None:
    # given a saved template
    first = template_save(name="small", body=small_template(), note="first")
    assert (first.status, first.template.version, first.template.version_count) == ("created", 1, 1)
    # when the same body is saved again, then a changed one
    again = template_save(name="small", body=small_template())
    changed = template_save(
        name="small", body=small_template(description="two workers"), note="second"
    )
    # then only the change is a version, and the previous body is kept
    assert again.status == "unchanged"
    assert (changed.status, changed.template.version) == ("updated", 2)
    versions = template_versions(name="small")
    assert [(v.version, v.note) for v in versions] == [(2, "second"), (1, "first")]
    assert versions[1].body["description"] == "one worker"
    assert template_get(name="small").description == "two workers"
    diff = template_version_diff(name="small", version=1)
    assert '-  "description": "one worker",' in diff
    assert '+  "description": "two workers",' in diff


def test_unknown_strategy_is_rejected_naming_agent_source_and_field() -> None:
    # when a template with strategy "newest" is saved
    with pytest.raises(InvalidInput) as raised:
        template_save(name="small", body=with_strategy(small_template(), "newest"))
    # then the error names the agent, the source and the field, and nothing is stored
    assert 'agent "worker", source 0, field "strategy": unknown strategy "newest"' in (
        raised.value.message
    )
    errors = raised.value.details["errors"]
    assert errors[0]["agent"] == "worker"
    assert errors[0]["source"] == 0
    assert errors[0]["field"] == "strategy"
    with pytest.raises(NotFound):
        template_get(name="small")


def test_an_invalid_change_keeps_the_stored_body() -> None:
    # given a saved template
    template_save(name="small", body=small_template())
    # when an invalid change is saved
    with pytest.raises(InvalidInput):
        template_save(name="small", body=with_strategy(small_template(), "newest"))
    # then the template and its versions are unchanged
    assert template_get(name="small").body == small_template()
    assert len(template_versions(name="small")) == 1


def test_shape_errors_are_listed() -> None:
    check = template_check({"name": "", "agents": []})
    assert not check.valid
    assert [e["field"] for e in check.errors] == ["name", "agents"]


def test_required_enum_param_is_checked_with_its_first_value() -> None:
    # when a template whose task_type has no default is checked
    check = template_check(small_template())
    # then it is valid, with a warning saying which value stood in
    assert check.valid
    assert check.warnings[0]["field"] == "params.task_type"
    assert '"INQUIRY"' in check.warnings[0]["message"]


def test_agents_switched_off_by_default_are_checked_too() -> None:
    # given a second agent that only runs when a param says so, with a bad strategy
    body = small_template()
    body["params"]["extra"] = {"type": "boolean", "default": False}
    extra = copy.deepcopy(body["agents"][0])
    extra.update(id="extra", condition="{{extra}}")
    extra["contextStrategy"]["sources"][0]["priority"] = "urgent"
    body["agents"].append(extra)
    # when it is checked, then the switched-off agent's error is reported
    check = template_check(body)
    assert [(e["agent"], e["field"]) for e in check.errors] == [("extra", "priority")]


def test_cluster_from_template_resolves_params() -> None:
    # given the built-in templates
    templates_load_builtin()
    # when a cluster is made from one with a param
    cluster = cluster_create_from_template(
        template_name="worker-validator", params={"max_tokens": 5000}, cluster_id="wv-1"
    )
    # then its agents are resolved and the params hold the defaults too
    assert cluster.template == "worker-validator"
    assert [a["id"] for a in cluster.agents] == ["worker", "validator"]
    assert {a["contextStrategy"]["maxTokens"] for a in cluster.agents} == {5000}
    assert cluster.params["max_tokens"] == 5000
    assert cluster.params["worker_level"] == "level2"


def test_cluster_from_template_errors() -> None:
    templates_load_builtin()
    template_save(name="small", body=small_template())
    with pytest.raises(NotFound):
        cluster_create_from_template(template_name="nope", params={})
    with pytest.raises(TemplateError, match="max_tokens must be of type integer"):
        cluster_create_from_template(template_name="worker-validator", params={"max_tokens": "x"})
    with pytest.raises(TemplateError, match="unknown param 'colour'"):
        cluster_create_from_template(template_name="worker-validator", params={"colour": 1})
    # a required param stays required when a cluster is made
    with pytest.raises(TemplateError, match="missing required params: task_type"):
        cluster_create_from_template(template_name="small", params={})
    made = cluster_create_from_template(template_name="small", params={"task_type": "TASK"})
    assert made.agents[0]["prompt"]["system"] == "Do the TASK well."


def test_hooks_that_would_run_shell_commands_refuse_the_template() -> None:
    # given a template whose agent verifies pull requests on completion
    body = {
        "name": "pushes",
        "agents": [
            {
                "id": "pusher",
                "role": "completion-detector",
                "prompt": "Push.",
                "triggers": [{"topic": "VALIDATION_RESULT", "action": "execute_task"}],
                "hooks": {"onComplete": {"action": "verify_pull_request"}},
            }
        ],
    }
    # when it is checked, then it is refused, naming the agent and why
    check = template_check(body)
    assert not check.valid
    [error] = [e for e in check.errors if e["field"] == "agents[0].hooks.onComplete.action"]
    assert error["agent"] == "pusher"
    assert "never runs shell commands" in str(error["message"])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "t", "description": "a\x00b", "agents": []}, "description"),
        (
            {"name": "t", "agents": [{"id": "w", "role": "r", "prompt": "\ud800"}]},
            "agents[0].prompt",
        ),
        (
            {"name": "t", "params": {"n": {"type": "number", "default": float("nan")}}},
            "params.n.default",
        ),
    ],
)
def test_a_template_the_database_could_not_store_is_an_error_naming_the_field(
    body: dict[str, Any], field: str
) -> None:
    check = template_check(body)

    assert not check.valid
    assert check.errors[0]["field"] == field


def test_a_template_name_with_a_nul_is_refused_and_finds_nothing() -> None:
    with pytest.raises(InvalidInput, match="name must not contain NUL"):
        template_save(name="bad\x00name", body=small_template())

    with pytest.raises(NotFound):
        template_get(name="bad\x00name")
