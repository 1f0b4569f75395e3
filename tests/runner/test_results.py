"""Reading agents' output: the final JSON object, Claude and Codex envelopes, usage fields."""

from __future__ import annotations

import json
import time

import pytest

from zeroshot_runner.records import Completed, Failed, Usage
from zeroshot_runner.results import (
    last_json_object,
    outcome_from_output,
    read_agent_output,
    read_usage,
)


def test_the_last_top_level_object_wins_over_earlier_and_nested_ones() -> None:
    # given text with a draft object, prose with braces, and a final object holding a nested one
    text = (
        'Draft: {"approved": false}\n'
        "I used a set {a, b} and a function() { return 1; }\n"
        '```json\n{"approved": true, "details": {"approved": "nested"}}\n```\n'
        "Done."
    )

    # when / then
    assert last_json_object(text) == {"approved": True, "details": {"approved": "nested"}}


def test_no_object_is_found_in_text_arrays_or_invalid_json() -> None:
    assert last_json_object("nothing to see") is None
    assert last_json_object("[1, 2, 3]") is None
    assert last_json_object("{'single': 'quotes'}") is None
    assert last_json_object('{"unterminated": true') is None
    # NaN is not JSON: an object holding it is not a result.
    assert last_json_object('{"score": NaN}') is None


def test_a_broken_object_before_a_good_one_does_not_hide_it() -> None:
    text = '{"half": \n{"whole": 1}'

    assert last_json_object(text) == {"whole": 1}


def test_objects_of_any_size_are_found_wherever_they_are_cut_in_reading() -> None:
    # given objects whose end falls at every position around the reader's first 4 KiB slice,
    # some ending in a literal or a number that a slice could cut in two
    for size in range(4_050, 4_110):
        for tail in ('"flag": true', '"count": 12345', '"name": "x"', '"nested": {"a": [1]}'):
            padding = "x" * (size - len(tail))
            text = f'Result: {{"pad": "{padding}", {tail}}} trailing'

            # when / then
            found = last_json_object(text)
            assert found is not None, (size, tail)
            assert found["pad"] == padding


def test_a_long_output_full_of_braces_is_read_quickly() -> None:
    # given 1.5 MB of code with braces that are not JSON, then the result
    code = "def f(x):\n    return {x: [1, {\"k\": x}, {'a': x}]}\n" * 30_000
    started = time.monotonic()

    # when
    found = last_json_object(code + '{"done": true}')

    # then (reading from the start at each brace took minutes here)
    assert found == {"done": True}
    assert time.monotonic() - started < 10


def test_a_json_agent_without_an_object_fails_as_retryable_with_the_output_tail() -> None:
    outcome = outcome_from_output("I could not decide.\n", wants_json=True)

    assert isinstance(outcome, Failed)
    assert outcome.retryable is True
    assert "no JSON object" in outcome.error
    assert "I could not decide." in outcome.error


def test_an_empty_output_says_so() -> None:
    outcome = outcome_from_output("", wants_json=True)

    assert isinstance(outcome, Failed)
    assert "empty" in outcome.error


def test_a_text_agent_completes_with_its_text_and_no_result() -> None:
    outcome = outcome_from_output("Plain words.\n", wants_json=False)

    assert outcome == Completed(result=None, output="Plain words.\n", usage=None)


def test_a_plain_agent_keeps_its_whole_output_and_its_usage_fields() -> None:
    # given an agent that prints a line and then its result with usage in it
    result = {"summary": "ok", "inputTokens": 120, "outputTokens": 30, "costUsd": 0.002}
    output = "working\n" + json.dumps(result) + "\n"

    # when
    outcome = outcome_from_output(output, wants_json=True)

    # then
    assert outcome == Completed(
        result=result,
        output=output,
        usage=Usage(input_tokens=120, output_tokens=30, cost_usd=0.002),
    )


def test_a_claude_envelope_gives_the_agents_json_from_its_result_text() -> None:
    # given `claude -p --output-format json` output: the agent's JSON is text inside `result`
    agent_text = 'All fixed.\n```json\n{"canValidate": true, "summary": "fixed"}\n```'
    envelope = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": agent_text,
        "session_id": "s-1",
        "total_cost_usd": 0.0421,
        "usage": {
            "input_tokens": 1500,
            "cache_read_input_tokens": 9000,
            "output_tokens": 320,
        },
        "modelUsage": {"claude-sonnet-4-5": {"inputTokens": 1500}},
    }

    # when
    read = read_agent_output(json.dumps(envelope))

    # then
    assert read.text == agent_text
    assert read.result == {"canValidate": True, "summary": "fixed"}
    assert read.usage == Usage(
        input_tokens=1500, output_tokens=320, model="claude-sonnet-4-5", cost_usd=0.0421
    )
    assert read.error is None


def test_a_claude_stream_ends_with_the_same_envelope() -> None:
    lines = [
        {"type": "system", "subtype": "init"},
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "hi"}]}},
        {"type": "result", "result": '{"approved": true}', "usage": {"output_tokens": 4}},
    ]

    read = read_agent_output("\n".join(json.dumps(line) for line in lines))

    assert read.result == {"approved": True}
    assert read.usage == Usage(input_tokens=0, output_tokens=4)


def test_claude_structured_output_is_taken_as_it_is() -> None:
    envelope = {"type": "result", "result": "", "structured_output": {"approved": False}}

    assert read_agent_output(json.dumps(envelope)).result == {"approved": False}


def test_a_claude_error_envelope_fails_the_task() -> None:
    envelope = {"type": "result", "subtype": "error_max_turns", "is_error": True, "result": ""}

    outcome = outcome_from_output(json.dumps(envelope), wants_json=True)

    assert isinstance(outcome, Failed)
    assert outcome.retryable is True
    assert "error_max_turns" in outcome.error


def test_a_codex_event_stream_gives_the_last_agent_message_and_the_turn_usage() -> None:
    # given `codex exec --json` output
    events = [
        {"type": "thread.started", "thread_id": "t-1"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"type": "reasoning", "text": "{not: json}"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "draft"}},
        {
            "type": "item.completed",
            "item": {"type": "agent_message", "text": 'Result: {"approved": true}'},
        },
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 800, "cached_input_tokens": 100, "output_tokens": 60},
        },
    ]

    # when
    read = read_agent_output("\n".join(json.dumps(event) for event in events))

    # then
    assert read.text == 'Result: {"approved": true}'
    assert read.result == {"approved": True}
    assert read.usage == Usage(input_tokens=800, output_tokens=60)


def test_a_failed_codex_turn_fails_the_task() -> None:
    events = [
        {"type": "thread.started", "thread_id": "t-1"},
        {"type": "turn.failed", "error": {"message": "usage limit reached"}},
    ]

    outcome = outcome_from_output("\n".join(json.dumps(e) for e in events), wants_json=True)

    assert isinstance(outcome, Failed)
    assert "usage limit reached" in outcome.error


def test_an_agents_own_error_typed_result_is_not_taken_for_an_event_stream() -> None:
    output = '{"type": "error", "message": "the tests fail", "approved": false}'

    assert read_agent_output(output).result == {
        "type": "error",
        "message": "the tests fail",
        "approved": False,
    }


def test_usage_is_read_by_its_usual_names_and_left_out_when_absent() -> None:
    assert read_usage({"summary": "no usage"}) is None
    assert read_usage({"usage": {"input_tokens": 5, "output_tokens": 2}, "model": "m"}) == Usage(
        input_tokens=5, output_tokens=2, model="m"
    )
    assert read_usage({"inputTokens": 7, "outputTokens": 3, "costUsd": 1}) == Usage(
        input_tokens=7, output_tokens=3, cost_usd=1.0
    )
    assert read_usage({"usage": {"prompt_tokens": 9, "completion_tokens": 4}}) == Usage(
        input_tokens=9, output_tokens=4
    )
    # Booleans and negative numbers are not counts.
    assert read_usage({"inputTokens": True, "outputTokens": -1}) is None


def test_usage_goes_on_the_wire_in_the_work_apis_names() -> None:
    assert Usage(input_tokens=5, output_tokens=2).to_wire() == {
        "inputTokens": 5,
        "outputTokens": 2,
    }
    assert Usage(input_tokens=5, output_tokens=2, model="m", cost_usd=0.5).to_wire() == {
        "inputTokens": 5,
        "outputTokens": 2,
        "model": "m",
        "costUsd": 0.5,
    }


@pytest.mark.parametrize(
    "text",
    [
        ('{"a":' * 500 * 300)[:750_000],
        '{"a":[' * 100_000,
        '{"' * 500_000,
    ],
    ids=["500-deep-unclosed", "past-the-parser", "keys-without-colons"],
)
def test_output_built_to_make_every_brace_read_far_is_searched_in_bounded_time(text: str) -> None:
    # This thread's CPU, a bound far above a linear search's (0.1-0.6 s on a slow machine) and
    # far below a search that reads from every brace again (tens of seconds and more).
    started = time.thread_time()

    found = last_json_object(text)

    assert found is None
    assert time.thread_time() - started < 5.0
