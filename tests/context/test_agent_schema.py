"""An agent's jsonSchema is self-contained and bounded (issue 17, items 1 and 2)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from context.agent_schema import SchemaRefused, schema_issues, schema_problems
from context.services.templates import template_check


def template(schema: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "agents": [
            {
                "id": "worker",
                "role": "implementation",
                "prompt": "Work.",
                "triggers": [{"topic": "ISSUE_OPENED", "action": "execute_task"}],
                "jsonSchema": schema,
            }
        ],
    }


@pytest.mark.parametrize(
    "ref",
    [
        "file:///etc/passwd#/x",
        "http://127.0.0.1:9/schema.json",
        "https://example.com/s#/a",
        "other.json",
    ],
)
def test_template_validation_refuses_an_external_ref(ref: str) -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": ref}}}

    errors = template_check(template(schema)).errors

    assert [e["field"] for e in errors] == ["agents[0].jsonSchema"]
    assert "points outside the schema" in str(errors[0]["message"])


def test_template_validation_accepts_local_refs() -> None:
    schema = {
        "type": "object",
        "$defs": {"flag": {"type": "boolean"}},
        "properties": {"a": {"$ref": "#/$defs/flag"}},
    }

    assert template_check(template(schema)).errors == []


@pytest.mark.parametrize("pattern", ["(?=a)b", "(a)\\1", "(?<!x)y"])
def test_template_validation_refuses_a_pattern_no_linear_engine_runs(pattern: str) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}
    in_properties = {"type": "object", "patternProperties": {pattern: {}}}

    for each in (schema, in_properties):
        errors = template_check(template(each)).errors
        assert len(errors) == 1
        assert "linear-time engine" in str(errors[0]["message"])


def test_unevaluated_properties_beside_pattern_properties_is_refused() -> None:
    schema = {"patternProperties": {"^x": {}}, "unevaluatedProperties": False}

    assert "unevaluatedProperties" in schema_problems(schema)[0]


def test_checking_never_retrieves_a_reference(tmp_path: Any) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"ptr": {"enum": ["TOP-SECRET"]}}')
    schema = {"properties": {"a": {"$ref": f"{secret.as_uri()}#/ptr"}}}

    with pytest.raises(SchemaRefused) as refused:
        schema_issues({"a": "ok"}, schema, limit=10)

    assert "points outside the schema" in refused.value.message
    assert "TOP-SECRET" not in refused.value.message


def test_a_catastrophic_pattern_is_matched_in_linear_time() -> None:
    schema = {"properties": {"a": {"pattern": "^(a+)+$"}}}
    started = time.monotonic()

    issues = schema_issues({"a": "a" * 29 + "!"}, schema, limit=10)

    assert time.monotonic() - started < 1.0
    assert [issue.path for issue in issues] == ["$.a"]
    assert "does not match" in issues[0].message


def test_pattern_properties_and_additional_properties_read_patterns_with_re2() -> None:
    schema = {
        "patternProperties": {"^(a+)+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    key = "a" * 40 + "!"
    started = time.monotonic()

    issues = schema_issues({"aaa": "x", key: 1}, schema, limit=10)

    assert time.monotonic() - started < 1.0
    messages = sorted(issue.message for issue in issues)
    assert messages == [
        f"'{key}' does not match any of the regexes: '^(a+)+$'",
        "'x' is not of type 'integer'",
    ]


def test_a_schema_that_fans_out_exponentially_stops_at_the_time_limit() -> None:
    # Each level checks the next one twice: 2**40 checks without a time limit.
    defs = {f"d{n}": {"allOf": [{"$ref": f"#/$defs/d{n + 1}"}] * 2} for n in range(40)}
    defs["d40"] = {"type": "object"}
    schema = {"$defs": defs, "$ref": "#/$defs/d0"}
    started = time.monotonic()

    with pytest.raises(SchemaRefused) as refused:
        schema_issues({}, schema, limit=10, time_limit=0.2)

    # (without the limit: hours; the margin is for a loaded machine)
    assert time.monotonic() - started < 5.0
    assert "took more than 0.2 s" in refused.value.message


def test_a_schema_that_refers_to_itself_without_end_is_refused_not_raised() -> None:
    with pytest.raises(SchemaRefused):
        schema_issues({}, {"$ref": "#"}, limit=10)


def test_unique_items_of_a_large_array_of_objects_is_linear() -> None:
    # Pair by pair, 20,000 objects take 200 million comparisons: minutes.
    items: list[Any] = [{"n": n} for n in range(20_000)]
    started = time.thread_time()

    unique = schema_issues(items, {"uniqueItems": True}, limit=10, time_limit=60)
    repeated = schema_issues([*items, {"n": 5.0}], {"uniqueItems": True}, limit=10, time_limit=60)

    # This thread's CPU: far above a linear check's on a slow machine, far below minutes.
    assert time.thread_time() - started < 10.0
    assert unique == ()
    assert "non-unique" in repeated[0].message


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ([1, 1.0], False),
        ([True, 1], True),
        ([0, False, None], True),
        ([{"a": [1, {"b": 2}]}, {"a": [1, {"b": 2.0}]}], False),
        ([[1, 2], [2, 1]], True),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),
    ],
)
def test_unique_items_keeps_json_equality(items: list[Any], unique: bool) -> None:
    issues = schema_issues(items, {"uniqueItems": True}, limit=10)

    assert (issues == ()) is unique


def test_a_schemas_check_is_kept_per_schema_text(monkeypatch: pytest.MonkeyPatch) -> None:
    from context import agent_schema

    checked: list[object] = []
    real = agent_schema._schema_problems

    def counting(schema: object) -> list[str]:
        checked.append(schema)
        return real(schema)

    monkeypatch.setattr(agent_schema, "_schema_problems", counting)
    schema = {"type": "object", "properties": {"kept-per-text": {"type": "string"}}}
    assert schema_problems(schema) == []
    assert schema_problems(dict(schema)) == []
    assert len(checked) == 1
    # the answer is the caller's own list; a broken schema is still refused
    schema_problems(schema).append("changed")
    assert schema_problems(schema) == []
    assert schema_problems({"type": "nope-kept-per-text"})
