"""Hook configs without a database (SPEC §7.5): deep merge, placeholders, refused actions."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from runs.logic import LogicError, deep_merge, substitute, template_actions_check

VALIDATOR_CONFIG = {
    "topic": "VALIDATION_RESULT",
    "content": {
        "text": "{{result.summary}}",
        "data": {"approved": "{{result.approved}}", "errors": "{{result.errors}}"},
    },
}

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
# Enough examples to find a broken rule; few enough to keep the module fast.
properties = settings(max_examples=60, deadline=None)


def substituted(config: dict[str, Any], result: dict[str, Any] | None, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "result": result,
        "output_text": '{"summary": "raw"}',
        "cluster_id": "emerald-prism-4",
        "cluster_created_at": 1_760_000_000_000,
        "iteration": 3,
        "error_message": None,
    }
    values.update(overrides)
    return substitute(config, **values)


# --- deep merge ---------------------------------------------------------------------------------


def test_deep_merge_merges_objects_and_replaces_everything_else() -> None:
    # given zeroshot's worker hook config and a patch that changes the topic and some data
    config = {
        "topic": "IMPLEMENTATION_READY",
        "content": {"text": "{{result.summary}}", "data": {"a": 1, "list": [1, 2]}},
    }
    patch = {"topic": "WORKER_PROGRESS", "content": {"data": {"list": [3], "b": None}}}

    # when the patch is merged in
    merged = deep_merge(config, patch)

    # then objects merged key by key, the array and the scalar replaced, and null kept
    assert merged == {
        "topic": "WORKER_PROGRESS",
        "content": {"text": "{{result.summary}}", "data": {"a": 1, "list": [3], "b": None}},
    }


def test_deep_merge_replaces_an_object_with_a_scalar_and_back() -> None:
    assert deep_merge({"a": {"b": 1}}, {"a": 2}) == {"a": 2}
    assert deep_merge({"a": 2}, {"a": {"b": 1}}) == {"a": {"b": 1}}


@properties
@given(json_objects, json_objects)
def test_deep_merge_leaves_its_inputs_alone_and_patch_values_win(
    config: dict[str, Any], patch: dict[str, Any]
) -> None:
    config_before, patch_before = copy.deepcopy(config), copy.deepcopy(patch)

    merged = deep_merge(config, patch)

    assert (config, patch) == (config_before, patch_before)
    assert set(merged) == set(config) | set(patch)
    for key, value in patch.items():
        if not (isinstance(value, dict) and isinstance(config.get(key), dict)):
            assert merged[key] == value
    for key in set(config) - set(patch):
        assert merged[key] == config[key]


@properties
@given(json_objects)
def test_deep_merge_with_nothing_or_itself_changes_nothing(config: dict[str, Any]) -> None:
    assert deep_merge(config, {}) == config
    assert deep_merge({}, config) == config
    assert deep_merge(config, config) == config


# --- substitution -------------------------------------------------------------------------------


def test_whole_placeholders_keep_the_json_type_of_the_result() -> None:
    # given a validator's hook config and its result
    result = {"approved": False, "errors": ["missing test", "typo"], "summary": "Two issues"}

    # when the placeholders are replaced
    config = substituted(VALIDATOR_CONFIG, result)

    # then false stays the boolean false and the list stays a list
    assert config == {
        "topic": "VALIDATION_RESULT",
        "content": {
            "text": "Two issues",
            "data": {"approved": False, "errors": ["missing test", "typo"]},
        },
    }


def test_a_placeholder_inside_a_longer_string_becomes_text() -> None:
    result = {"summary": "all green", "count": 3, "ok": True, "files": ["a.py"], "meta": {"k": 1}}
    config = {
        "text": "Done: {{result.summary}}",
        "data": "{{result.count}} files, ok={{result.ok}}: {{result.files}} {{result.meta}}",
        "none": "missing={{result.nothing}}",
    }

    assert substituted(config, result) == {
        "text": "Done: all green",
        "data": '3 files, ok=true: ["a.py"] {"k":1}',
        "none": "missing=null",
    }


def test_a_missing_field_is_null_and_a_dotted_path_reads_nested_fields() -> None:
    result = {"completionStatus": {"canValidate": True, "steps": [{"name": "lint"}]}}
    config = {
        "missing": "{{result.summary}}",
        "nested": "{{result.completionStatus.canValidate}}",
        "through_list": "{{result.completionStatus.steps.0.name}}",
        "past_the_end": "{{result.completionStatus.steps.5.name}}",
        "into_a_scalar": "{{result.completionStatus.canValidate.x}}",
    }

    assert substituted(config, result) == {
        "missing": None,
        "nested": True,
        "through_list": "lint",
        "past_the_end": None,
        "into_a_scalar": None,
    }


def test_cluster_iteration_output_and_error_placeholders() -> None:
    config = {
        "id": "{{cluster.id}}",
        "created": "{{cluster.createdAt}}",
        "iteration": "{{iteration}}",
        "line": "run {{cluster.id}} #{{iteration}}",
        "output": "{{result.output}}",
        "error": "failed: {{error.message}}",
    }

    outcome = substituted(config, {"output": "ignored"}, error_message="boom")

    # zeroshot substitutes these inside the config's JSON strings, so they stay strings
    # (src/agent/agent-hook-executor.js:516-517: String(cluster.createdAt), String(iteration))
    assert outcome == {
        "id": "emerald-prism-4",
        "created": "1760000000000",
        "iteration": "3",
        "line": "run emerald-prism-4 #3",
        "output": '{"summary": "raw"}',
        "error": "failed: boom",
    }


def test_other_double_braces_are_content() -> None:
    config = {
        "text": "React: <div dangerouslySetInnerHTML={{__html: x}} /> {{ result.summary }}",
        "data": ["{{ISSUE_OPENED.content.text}}", "{{results}}", "{{result.}}"],
    }

    assert substituted(config, {"summary": "s"}) == config


def test_unresolved_placeholders_of_our_families_fail_the_hook() -> None:
    config = {
        "a": "{{cluster.name}}",
        "b": "{{iteration.count}}",
        "d": "{{result}}",
        "e": ["{{cluster.name}}"],
    }

    outcome = substituted(config, {"summary": "s"})

    assert outcome == LogicError(
        "placeholder",
        "the hook config has unresolved placeholders: {{cluster.name}}, {{iteration.count}}, "
        "{{result}}",
    )


def test_error_message_is_empty_without_an_error() -> None:
    # zeroshot: src/agent/agent-hook-executor.js:520 (context.error?.message ?? '')
    outcome = substituted({"a": "{{error.message}}", "b": "no error: {{error.message}}"}, {})

    assert outcome == {"a": "", "b": "no error: "}


def test_result_fields_without_a_result_object_fail_the_hook() -> None:
    outcome = substituted({"text": "{{result.summary}}", "raw": "{{result.output}}"}, None)

    assert outcome == LogicError(
        "placeholder", "the hook config has unresolved placeholders: {{result.summary}}"
    )


def test_substituted_text_is_never_read_for_placeholders_again() -> None:
    result = {"summary": "{{cluster.id}} {{result.secret}}", "secret": "hidden"}

    assert substituted({"text": "{{result.summary}}", "more": "x {{result.summary}}"}, result) == {
        "text": "{{cluster.id}} {{result.secret}}",
        "more": "x {{cluster.id}} {{result.secret}}",
    }


def test_substitution_leaves_the_config_alone() -> None:
    config = copy.deepcopy(VALIDATOR_CONFIG)
    result = {"approved": True, "errors": [], "summary": "ok"}

    first = substituted(config, result)
    assert isinstance(first, dict)
    first["content"]["data"]["errors"].append("changed")

    assert config == VALIDATOR_CONFIG
    assert result["errors"] == []


@properties
@given(json_values)
def test_any_json_value_survives_a_whole_placeholder(value: Any) -> None:
    assert substituted({"v": "{{result.field}}"}, {"field": value}) == {"v": value}


@properties
@given(json_values)
def test_any_json_value_inside_text_becomes_its_text(value: Any) -> None:
    outcome = substituted({"v": "<{{result.field}}>"}, {"field": value})

    as_json = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    text = value if isinstance(value, str) else as_json
    assert outcome == {"v": f"<{text}>"}


@properties
@given(json_objects)
def test_a_config_without_placeholders_is_unchanged(config: dict[str, Any]) -> None:
    assume("{{" not in json.dumps(config, ensure_ascii=False))

    assert substituted(config, {"a": 1}) == config


# --- template actions ---------------------------------------------------------------------------


def test_shell_running_hook_actions_are_refused_with_a_clear_message() -> None:
    # given a template with the two zeroshot actions that run commands
    template = {
        "agents": [
            {"id": "worker", "hooks": {"onComplete": {"action": "publish_message", "config": {}}}},
            {
                "id": "pusher",
                "hooks": {
                    "onComplete": {"action": "execute_system_command", "config": {"cmd": "ls"}}
                },
            },
            {"id": "reviewer", "hooks": {"onComplete": {"action": "verify_pull_request"}}},
        ]
    }

    # when it is checked
    check = template_actions_check(template)

    # then both are errors naming the agent and the field, and the publishing hook is fine
    assert check.errors == (
        {
            "agent": "pusher",
            "field": "agents[1].hooks.onComplete.action",
            "message": "execute_system_command is refused: the server never runs shell commands "
            "from a template",
        },
        {
            "agent": "reviewer",
            "field": "agents[2].hooks.onComplete.action",
            "message": "verify_pull_request is refused: the server never runs shell commands "
            "from a template, so it cannot verify pull requests",
        },
    )
    assert check.warnings == ()


def test_unknown_or_missing_actions_are_errors() -> None:
    template = {
        "agents": [
            {"id": "a", "hooks": {"onComplete": {"action": "send_email"}}},
            {"id": "b", "hooks": {"onComplete": {"config": {"topic": "X"}}}},
        ]
    }

    messages = [problem["message"] for problem in template_actions_check(template).errors]

    assert messages == [
        'the action is "send_email"; a hook can only publish_message',
        "the action is missing; a hook can only publish_message",
    ]


def test_hooks_publishing_cluster_operations_run_without_a_warning() -> None:
    template = {
        "agents": [
            {
                "id": "conductor",
                "hooks": {
                    "onComplete": {
                        "action": "publish_message",
                        "transform": {
                            "engine": "javascript",
                            "script": "return { topic: 'CLUSTER_OPERATIONS', content: {} };",
                        },
                    }
                },
            },
            {
                "id": "coordinator",
                "hooks": {
                    "onComplete": {
                        "action": "publish_message",
                        "config": {"topic": "CLUSTER_OPERATIONS"},
                    },
                    "onStart": {"action": "publish_message", "config": {"topic": "STARTED"}},
                },
            },
        ]
    }

    check = template_actions_check(template)

    # The server executes CLUSTER_OPERATIONS (SPEC §7.7): nothing to warn about.
    assert check.errors == ()
    assert check.warnings == ()


def test_templates_without_hooks_or_with_odd_shapes_have_nothing_to_report() -> None:
    for template in (
        {},
        {"agents": "nope"},
        {"agents": [{"id": "a"}, "junk", {"hooks": None}, {"hooks": {"onComplete": 3}}]},
    ):
        check = template_actions_check(template)
        assert (check.errors, check.warnings) == ((), ())
