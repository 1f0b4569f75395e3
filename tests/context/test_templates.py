"""Template checking and param resolution (SPEC §4), on small inline templates."""

from __future__ import annotations

from typing import Any

import pytest

from context.cluster_templates import (
    TemplateError,
    template_params,
    template_parse,
    template_resolve,
)
from ledger.errors import InvalidInput


def template(*agents: dict[str, Any], **params: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "t",
        "description": "test template",
        "params": params,
        "agents": list(agents) or [agent()],
    }


def agent(ident: str = "worker", **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": ident,
        "role": "implementation",
        "prompt": {"system": "Do the work."},
        "triggers": [{"topic": "ISSUE_OPENED", "action": "execute_task"}],
    }
    body.update(fields)
    return body


def fields_of(error: TemplateError) -> list[str]:
    return [problem["field"] for problem in error.details["errors"]]


# --- placeholders ---------------------------------------------------------------------------


def test_whole_string_placeholders_take_the_typed_value() -> None:
    raw = template(
        agent(
            modelLevel="{{level}}",
            strict="{{strict}}",
            ratio="{{ratio}}",
            contextStrategy={"sources": [], "maxTokens": "{{max_tokens}}"},
        ),
        max_tokens={"type": "integer", "default": 100000},
        strict={"type": "boolean", "default": False},
        level={"type": "string", "default": "level2"},
        ratio={"type": "number", "default": 0.5},
    )
    resolved = template_resolve(raw, {"max_tokens": 5000})
    worker = resolved["agents"][0]
    assert worker["contextStrategy"]["maxTokens"] == 5000
    assert worker["strict"] is False
    assert worker["modelLevel"] == "level2"
    assert worker["ratio"] == 0.5


def test_embedded_placeholders_are_formatted_as_text() -> None:
    raw = template(
        agent(prompt={"system": "Use {{n}} tokens, strict={{strict}}, x{{f}}, {{ name }}."}),
        n={"type": "integer", "default": 5},
        strict={"type": "boolean", "default": True},
        f={"type": "number", "default": 2.0},
        name={"type": "string", "default": "Ada"},
    )
    prompt = template_resolve(raw, {})["agents"][0]["prompt"]["system"]
    assert prompt == "Use 5 tokens, strict=true, x2, Ada."


def test_runtime_placeholders_are_left_alone() -> None:
    hooks = {
        "onComplete": {
            "action": "publish_message",
            "config": {
                "topic": "VALIDATION_RESULT",
                "content": {"text": "{{result.summary}}", "data": {"all": "{{result}}"}},
            },
        }
    }
    raw = template(agent(prompt="Issue: {{ISSUE_OPENED.content.text}}", hooks=hooks))
    resolved = template_resolve(raw, {})["agents"][0]
    assert resolved["prompt"] == "Issue: {{ISSUE_OPENED.content.text}}"
    assert resolved["hooks"] == hooks


def test_unknown_fields_are_kept_and_params_dropped() -> None:
    raw = template(agent(custom={"x": [1, None]}), level={"type": "string", "default": "a"})
    raw["extra"] = {"by": "{{level}}"}
    resolved = template_resolve(raw, {})
    assert resolved["agents"][0]["custom"] == {"x": [1, None]}
    assert resolved["extra"] == {"by": "a"}
    assert resolved["name"] == "t"
    assert "params" not in resolved


def test_resolve_does_not_mutate_the_template_or_share_values() -> None:
    raw = template(
        agent(opts="{{opts}}"),
        opts={"type": "string", "default": "x"},
    )
    before = repr(raw)
    resolved = template_resolve(raw, {})
    resolved["agents"][0]["prompt"]["system"] = "changed"
    assert repr(raw) == before


# --- params ---------------------------------------------------------------------------------


def test_defaults_are_merged_under_given_params() -> None:
    spec = template_parse(
        template(
            a={"type": "integer", "default": 1},
            b={"type": "string", "default": "x"},
        )
    )
    assert template_params(spec, {"b": "y"}) == {"a": 1, "b": "y"}


def test_enum_violation_names_the_param_and_the_choices() -> None:
    raw = template(level={"type": "string", "enum": ["level1", "level2"], "default": "level1"})
    with pytest.raises(TemplateError) as caught:
        template_resolve(raw, {"level": "level9"})
    assert 'level must be one of "level1", "level2", got "level9"' in caught.value.message
    assert fields_of(caught.value) == ["params.level"]


@pytest.mark.parametrize(
    ("kind", "bad"),
    [
        ("integer", 1.5),
        ("integer", True),
        ("integer", "5000"),
        ("number", "1"),
        ("number", False),
        ("number", float("inf")),
        ("boolean", 1),
        ("boolean", "true"),
        ("string", 3),
        ("string", None),
    ],
)
def test_type_violations_are_reported(kind: str, bad: Any) -> None:
    raw = template(p={"type": kind})
    with pytest.raises(TemplateError, match=f"p must be of type {kind}"):
        template_resolve(raw, {"p": bad})


def test_integer_accepts_ints_and_number_accepts_both() -> None:
    raw = template(i={"type": "integer"}, n={"type": "number"})
    spec = template_parse(raw)
    assert template_params(spec, {"i": 3, "n": 3}) == {"i": 3, "n": 3}
    assert template_params(spec, {"i": 3, "n": 2.5})["n"] == 2.5


def test_missing_required_params_are_all_listed() -> None:
    raw = template(a={"type": "string"}, b={"type": "integer"}, c={"type": "integer", "default": 1})
    with pytest.raises(TemplateError, match="missing required params: a, b"):
        template_resolve(raw, {})


def test_unknown_params_are_refused() -> None:
    raw = template(a={"type": "string", "default": "x"})
    with pytest.raises(TemplateError, match=r"unknown param 'max_token' \(declared: a\)"):
        template_resolve(raw, {"max_token": 5})


def test_every_problem_is_reported_at_once() -> None:
    raw = template(a={"type": "string"}, b={"type": "integer", "default": 1})
    with pytest.raises(TemplateError) as caught:
        template_resolve(raw, {"b": "x", "zzz": 1})
    assert fields_of(caught.value) == ["params.zzz", "params.b", "params"]
    assert caught.value.message.endswith("(and 2 more)")


# --- conditions -----------------------------------------------------------------------------


def test_if_blocks_follow_the_params() -> None:
    prompt = (
        "Start\n\n{{#if task_type == 'INQUIRY'}}\nOnly read.\n{{/if}}\n\n"
        "{{#if task_type != 'INQUIRY'}}\nChange code.\n{{/if}}\n\nEnd"
    )
    raw = template(
        agent(prompt={"system": prompt}),
        task_type={"type": "string", "enum": ["INQUIRY", "TASK"], "default": "TASK"},
    )
    task = template_resolve(raw, {})["agents"][0]["prompt"]["system"]
    inquiry = template_resolve(raw, {"task_type": "INQUIRY"})["agents"][0]["prompt"]["system"]
    assert task == "Start\n\nChange code.\n\nEnd"
    assert inquiry == "Start\n\nOnly read.\n\nEnd"


def test_if_else_nesting_and_operators() -> None:
    prompt = (
        "{{#if strict}}S{{#if n >= 3 && !(mode == 'x' || mode == 'y')}}N{{else}}n{{/if}}"
        "{{else}}L{{/if}}"
    )
    raw = template(
        agent(prompt=prompt),
        strict={"type": "boolean", "default": True},
        n={"type": "integer", "default": 3},
        mode={"type": "string", "default": "z"},
    )

    def render(**params: Any) -> str:
        return str(template_resolve(raw, params)["agents"][0]["prompt"])

    assert render() == "SN"
    assert render(mode="y") == "Sn"
    assert render(n=2) == "Sn"
    assert render(strict=False) == "L"


def test_agent_conditions_drop_agents_and_disappear_from_the_config() -> None:
    raw = template(
        agent("planner"),
        agent("security", condition="{{validator_count}} == 3"),
        agent("code", condition="{{validator_count}} >= 2 && {{validator_count}} < 4"),
        agent("meta", condition="{{complexity}} == 'CRITICAL' && {{validator_count}} == 0"),
        agent("always", condition=True),
        agent("never", condition=False),
        validator_count={"type": "number", "default": 2},
        complexity={"type": "string", "default": "STANDARD"},
    )

    def ids(**params: Any) -> list[str]:
        return [a["id"] for a in template_resolve(raw, params)["agents"]]

    assert ids() == ["planner", "code", "always"]
    assert ids(validator_count=3) == ["planner", "security", "code", "always"]
    assert ids(validator_count=0, complexity="CRITICAL") == ["planner", "meta", "always"]
    assert all("condition" not in a for a in template_resolve(raw, {})["agents"])


def test_a_bare_placeholder_condition_uses_truthiness() -> None:
    raw = template(
        agent("a"),
        agent("b", condition="{{enabled}}"),
        enabled={"type": "boolean", "default": False},
    )
    assert [a["id"] for a in template_resolve(raw, {})["agents"]] == ["a"]
    assert [a["id"] for a in template_resolve(raw, {"enabled": True})["agents"]] == ["a", "b"]


def test_equality_is_strict_about_types() -> None:
    raw = template(
        agent("a"),
        agent("b", condition="{{flag}} == 1"),
        agent("c", condition="{{n}} == 2.0"),
        flag={"type": "boolean", "default": True},
        n={"type": "integer", "default": 2},
    )
    assert [a["id"] for a in template_resolve(raw, {})["agents"]] == ["a", "c"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{{#each items}}x{{/each}}", "unsupported template construct {{#each items}}"),
        ("{{#unless a}}x{{/unless}}", "unsupported template construct {{#unless a}}"),
        ("{{#if a}}x{{else if b}}y{{/if}}", "unsupported template construct {{else if b}}"),
        ("{{#if a}}never closed", "never closed"),
        ("stray {{/if}}", "without a matching {{#if}}"),
        ("{{else}}", "outside an {{#if}} block"),
        ("{{#if a}}x{{else}}y{{else}}z{{/if}}", "outside an {{#if}} block"),
        ("{{#if}}x{{/if}}", "{{#if}} needs a condition"),
        ("{{#if unknown}}x{{/if}}", "names 'unknown', which is not a param"),
        ("{{#if a ~= 'x'}}x{{/if}}", "unsupported condition"),
        ("{{#if a == }}x{{/if}}", "ends too early"),
        ("{{#if (a}}x{{/if}}", "ends too early"),
        ("{{#if a 'b'}}x{{/if}}", "unexpected"),
    ],
)
def test_unsupported_or_broken_blocks_are_clear_errors(text: str, fragment: str) -> None:
    raw = template(agent(prompt={"system": text}), a={"type": "string", "default": "x"})
    with pytest.raises(TemplateError) as caught:
        template_parse(raw)
    assert fragment in caught.value.message
    assert fields_of(caught.value) == ["agents[0].prompt.system"]


def test_bad_agent_condition_is_reported_at_parse_time() -> None:
    raw = template(agent(condition="{{nope}} > 1"), agent("b", condition=3))
    with pytest.raises(TemplateError) as caught:
        template_parse(raw)
    assert fields_of(caught.value) == ["agents[0].condition", "agents[1].condition"]
    assert "'nope', which is not a param" in caught.value.message


def test_ordering_a_string_against_a_number_is_an_error_not_false() -> None:
    raw = template(agent(condition="{{mode}} > 2"), mode={"type": "string", "default": "x"})
    with pytest.raises(TemplateError, match="cannot order 'x' > 2"):
        template_resolve(raw, {})


# --- shape ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ([], ""),
        ({"agents": [{"id": "a", "role": "r", "prompt": "p"}]}, "name"),
        ({"name": "t", "description": 3, "agents": [agent()]}, "description"),
        ({"name": "t", "agents": []}, "agents"),
        ({"name": "t", "params": [], "agents": [agent()]}, "params"),
        ({"name": "t", "params": {"a b": {"type": "string"}}, "agents": [agent()]}, "params.a b"),
        ({"name": "t", "params": {"a": "string"}, "agents": [agent()]}, "params.a"),
        ({"name": "t", "params": {"a": {"type": "text"}}, "agents": [agent()]}, "params.a.type"),
        ({"name": "t", "params": {"a": {"type": "string", "enum": []}}, "agents": [agent()]},
         "params.a.enum"),
        ({"name": "t", "params": {"a": {"type": "string", "enum": [1]}}, "agents": [agent()]},
         "params.a.enum"),
        ({"name": "t", "params": {"a": {"type": "integer", "default": "5"}}, "agents": [agent()]},
         "params.a.default"),
        ({"name": "t", "params": {"a": {"type": "string", "enum": ["x"], "default": "y"}},
          "agents": [agent()]}, "params.a.default"),
        ({"name": "t", "agents": ["worker"]}, "agents[0]"),
        ({"name": "t", "agents": [agent(id="")]}, "agents[0].id"),
        ({"name": "t", "agents": [agent(), agent()]}, "agents[1].id"),
        ({"name": "t", "agents": [agent(role=None)]}, "agents[0].role"),
        ({"name": "t", "agents": [agent(prompt=None)]}, "agents[0].prompt"),
        ({"name": "t", "agents": [agent(prompt="  ")]}, "agents[0].prompt"),
        ({"name": "t", "agents": [agent(prompt={"system": ""})]}, "agents[0].prompt"),
        ({"name": "t", "agents": [agent(prompt={"system": 3})]}, "agents[0].prompt.system"),
        ({"name": "t", "agents": [agent(triggers={})]}, "agents[0].triggers"),
        ({"name": "t", "agents": [agent(triggers=[{"topic": "X"}])]},
         "agents[0].triggers[0].action"),
        ({"name": "t", "agents": [agent(triggers=["X"])]}, "agents[0].triggers[0]"),
        ({"name": "t", "agents": [agent(hooks=[])]}, "agents[0].hooks"),
        ({"name": "t", "agents": [agent(jsonSchema="{}")]}, "agents[0].jsonSchema"),
        ({"name": "t", "agents": [agent(contextStrategy={"sources": {}})]},
         "agents[0].contextStrategy.sources"),
    ],
)  # fmt: skip
def test_shape_errors_name_the_field(raw: Any, field: str) -> None:
    with pytest.raises(TemplateError) as caught:
        template_parse(raw)
    assert field in fields_of(caught.value)
    assert caught.value.message.startswith(f"{field}: " if field else "a template")


def test_an_agent_that_never_runs_a_model_needs_no_prompt() -> None:
    detector = {
        "id": "completion-detector",
        "role": "orchestrator",
        "triggers": [{"topic": "VALIDATION_RESULT", "action": "stop_cluster"}],
    }
    spec = template_parse(template(agent(), detector))
    assert [a["id"] for a in spec.agents] == ["worker", "completion-detector"]


def test_prompt_may_be_initial_and_subsequent() -> None:
    spec = template_parse(template(agent(prompt={"initial": "Start.", "subsequent": "Again."})))
    assert spec.agents[0]["prompt"]["initial"] == "Start."


def test_parse_returns_a_typed_spec() -> None:
    raw = template(
        level={"type": "string", "enum": ["a", "b"], "default": "a", "description": "Model"},
        task={"type": "string"},
    )
    spec = template_parse(raw)
    assert spec.name == "t"
    assert spec.description == "test template"
    level = spec.param("level")
    assert level is not None
    assert level.enum == ("a", "b")
    assert level.default == "a"
    assert level.description == "Model"
    assert spec.required_params == ("task",)
    assert spec.param("missing") is None


def test_template_error_is_a_value_error_with_a_stable_code() -> None:
    with pytest.raises(TemplateError) as caught:
        template_parse({})
    error = caught.value
    assert isinstance(error, ValueError)
    assert isinstance(error, InvalidInput)
    body = error.to_dict()
    assert body["code"] == "template_invalid"
    assert body["details"]["errors"][0] == {
        "field": "name",
        "message": body["message"].split(" (")[0],
    }


@pytest.mark.parametrize("agent_id", ["team/worker", "-worker", "w" * 65, "a b", "wörker"])
def test_a_template_agent_id_outside_spec_4_is_an_error_naming_the_agent(agent_id: str) -> None:
    body = {
        "name": "odd-ids",
        "agents": [{"id": agent_id, "role": "implementation", "prompt": "Work."}],
    }

    with pytest.raises(TemplateError) as refused:
        template_parse(body)

    assert "agents[0].id: must be 1-64 letters, digits or _.- characters" in refused.value.message


def test_a_template_agent_id_with_a_placeholder_is_checked_once_resolved() -> None:
    body = {
        "name": "param-ids",
        "params": {"team": {"type": "string", "default": "alpha"}},
        "agents": [{"id": "{{team}}-worker", "role": "implementation", "prompt": "Work."}],
    }

    assert template_parse(body).agents[0]["id"] == "{{team}}-worker"
