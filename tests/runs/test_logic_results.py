"""Reading an agent's result from its output (SPEC §7.5) and checking its ``jsonSchema``."""

from __future__ import annotations

import json
import time

import pytest

from runs.logic import LogicError, ParsedResult, SchemaIssue, result_parse

VALIDATOR_SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "summary": {"type": "string"},
        "errors": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["approved", "summary"],
}


def test_an_output_that_is_one_json_object_is_the_result() -> None:
    outcome = result_parse('  {"approved": true, "summary": "ok"}\n')

    assert outcome == ParsedResult(data={"approved": True, "summary": "ok"})


@pytest.mark.parametrize(
    "output",
    [
        'I checked everything.\n{"approved": false, "summary": "two issues"}\nBye.',
        'Result:\n```json\n{"approved": false, "summary": "two issues"}\n```\n',
        '{"type": "progress", "step": 1}\n{"approved": false, "summary": "two issues"}',
        'Use {braces} and {"broken": } freely, then:\n{"approved": false, "summary": "two issues"}',
    ],
)
def test_the_last_json_object_in_surrounding_text_is_the_result(output: str) -> None:
    outcome = result_parse(output)

    assert outcome == ParsedResult(data={"approved": False, "summary": "two issues"})


def test_an_object_nested_in_the_last_one_is_not_taken_for_it() -> None:
    output = 'Done.\n{"summary": "s", "completionStatus": {"canValidate": true}}'

    outcome = result_parse(output)

    assert isinstance(outcome, ParsedResult)
    assert outcome.data == {"summary": "s", "completionStatus": {"canValidate": True}}


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "the agent's output is empty"),
        ("   \n", "the agent's output is empty"),
        ("No JSON here, sorry.", "holds no JSON object"),
        ('["a", "list"]', "is JSON (list), not a JSON object"),
        ("null", "is JSON (null), not a JSON object"),
        ('{"approved": NaN}', "holds no JSON object"),
    ],
)
def test_an_output_without_a_json_object_is_an_error(output: str, message: str) -> None:
    outcome = result_parse(output)

    assert isinstance(outcome, LogicError)
    assert outcome.kind == "output"
    assert message in outcome.message


def test_text_output_has_no_result_object() -> None:
    assert result_parse("plain words", output_format="text") == ParsedResult(data=None)


def test_a_result_that_matches_its_schema_has_no_issues() -> None:
    output = json.dumps({"approved": True, "summary": "ok", "errors": []})

    outcome = result_parse(output, json_schema=VALIDATOR_SCHEMA)

    assert outcome == ParsedResult(data=json.loads(output), schema_issues=(), accepted=True)


def test_schema_mismatches_are_data_and_the_result_is_still_used() -> None:
    # given a result with a wrong type, a missing field and a bad list item
    output = json.dumps({"approved": "yes", "errors": ["fine", 3]})

    # when it is parsed against the validator schema
    outcome = result_parse(output, json_schema=VALIDATOR_SCHEMA)

    # then the mismatches are listed by path and the result is accepted anyway
    assert isinstance(outcome, ParsedResult)
    assert outcome.data == {"approved": "yes", "errors": ["fine", 3]}
    assert outcome.accepted is True
    assert outcome.schema_issues == (
        SchemaIssue(path="$", message="'summary' is a required property"),
        SchemaIssue(path="$.approved", message="'yes' is not of type 'boolean'"),
        SchemaIssue(path="$.errors[1]", message="3 is not of type 'string'"),
    )
    assert outcome.schema_issues[1].text == "$.approved: 'yes' is not of type 'boolean'"


def test_a_strict_schema_refuses_a_mismatching_result() -> None:
    mismatching = result_parse('{"approved": 1}', json_schema=VALIDATOR_SCHEMA, strict=True)
    matching = result_parse(
        '{"approved": true, "summary": "s"}', json_schema=VALIDATOR_SCHEMA, strict=True
    )

    assert isinstance(mismatching, ParsedResult)
    assert mismatching.accepted is False
    assert len(mismatching.schema_issues) == 2
    assert isinstance(matching, ParsedResult)
    assert matching.accepted is True


def test_a_schema_given_as_json_text_is_read() -> None:
    outcome = result_parse('{"approved": 1}', json_schema=json.dumps(VALIDATOR_SCHEMA))

    assert isinstance(outcome, ParsedResult)
    assert [issue.path for issue in outcome.schema_issues] == ["$", "$.approved"]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("{not json", "the agent's jsonSchema is not JSON"),
        (["a", "list"], "the agent's jsonSchema must be an object"),
        ({"type": "no-such-type"}, "the agent's jsonSchema is invalid"),
    ],
)
def test_an_invalid_schema_is_an_error(schema: object, message: str) -> None:
    outcome = result_parse('{"approved": true}', json_schema=schema)

    assert isinstance(outcome, LogicError)
    assert outcome.kind == "schema"
    assert message in outcome.message


def test_many_mismatches_are_capped() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "string"}}
    output = json.dumps({f"field{n:03}": n for n in range(80)})

    outcome = result_parse(output, json_schema=schema)

    assert isinstance(outcome, ParsedResult)
    assert len(outcome.schema_issues) == 50
    assert outcome.schema_issues[0].path == "$.field000"


def test_deep_unclosed_objects_are_searched_in_linear_time() -> None:
    # 0.75 MB of objects nested 500 deep, never closed: re-parsing from every "{" took 33 s.
    block = '{"a":' * 500
    text = (block * ((750_000 // len(block)) + 1))[:750_000]
    started = time.thread_time()

    outcome = result_parse(text)

    # This thread's CPU: far above a linear search's on a slow machine, far below 33 s.
    assert time.thread_time() - started < 5.0
    assert isinstance(outcome, LogicError)
    assert outcome.kind == "output"


def test_many_stray_braces_before_the_result_are_linear() -> None:
    text = "{ " * 400_000 + '{"approved": true}'
    started = time.thread_time()

    outcome = result_parse(text)

    # This thread's CPU: far above a linear search's on a slow machine, far below a quadratic.
    assert time.thread_time() - started < 5.0
    assert isinstance(outcome, ParsedResult)
    assert outcome.data == {"approved": True}
