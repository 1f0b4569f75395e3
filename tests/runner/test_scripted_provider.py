"""The scripted provider: canned results by agent and iteration, delays, failures."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from tests.runner.helpers import claim_for, job_for
from zeroshot_runner.providers.scripted import ScriptedProvider, ScriptError, script_from_json
from zeroshot_runner.records import Completed, Failed, Usage

SCRIPT = {
    "worker": [
        {"result": {"summary": "first try"}, "output": ["editing", "testing"]},
        {"result": {"summary": "fixed"}, "usage": {"inputTokens": 900, "outputTokens": 40}},
    ],
    "validator": {
        "1": {"result": {"approved": False}},
        "*": {"result": {"approved": True}},
    },
    "flaky": {"1": {"fail": "the model timed out"}, "3": {"result": {"ok": True}}},
    "*": [{"fail": {"error": "no script for this agent", "retryable": False}}],
}


def run(agent_id: str, iteration: int, **agent: object) -> tuple[object, list[str]]:
    provider = ScriptedProvider(script_from_json(SCRIPT))
    job, lines = job_for(claim_for(agent_id=agent_id, iteration=iteration, **agent))
    return provider.run(job), lines.lines


def test_a_list_serves_iterations_in_order_and_its_last_entry_after() -> None:
    first, lines = run("worker", 1)
    second, _ = run("worker", 2)
    later, _ = run("worker", 7)

    assert first == Completed(result={"summary": "first try"}, output="editing\ntesting")
    assert lines == ["editing", "testing"]
    assert second == Completed(
        result={"summary": "fixed"},
        output='{"summary": "fixed"}',
        usage=Usage(input_tokens=900, output_tokens=40),
    )
    assert later == second


def test_an_object_serves_iterations_by_number_and_star_for_the_rest() -> None:
    assert run("validator", 1)[0] == Completed(
        result={"approved": False}, output='{"approved": false}'
    )
    assert run("validator", 2)[0] == Completed(
        result={"approved": True}, output='{"approved": true}'
    )


def test_without_a_star_the_highest_iteration_serves_the_rest() -> None:
    assert run("flaky", 1)[0] == Failed(error="the model timed out", retryable=True)
    assert run("flaky", 2)[0] == Completed(result={"ok": True}, output='{"ok": true}')


def test_an_unknown_agent_gets_the_star_agent() -> None:
    assert run("planner", 1)[0] == Failed(error="no script for this agent", retryable=False)


def test_an_agent_missing_from_a_script_without_a_star_fails_for_good() -> None:
    provider = ScriptedProvider(script_from_json({"worker": [{}]}))
    job, _ = job_for(claim_for(agent_id="planner"))

    assert provider.run(job) == Failed(
        error="the script has no entry for agent planner", retryable=False
    )


def test_a_text_agent_gets_no_result_object() -> None:
    outcome, _ = run("worker", 1, outputFormat="text")

    assert outcome == Completed(result=None, output="editing\ntesting")


def test_a_stop_cuts_a_delay_short() -> None:
    # given an entry that would take a minute
    provider = ScriptedProvider(script_from_json({"worker": [{"delay": 60, "output": ["a"]}]}))
    stop = threading.Event()
    job, lines = job_for(claim_for(), stop=stop)

    # when the runner stops it
    threading.Timer(0.1, stop.set).start()
    outcome = provider.run(job)

    # then
    assert outcome == Failed(error="the runner stopped the scripted agent", retryable=True)
    assert lines.lines == []


def test_a_script_file_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))

    provider = ScriptedProvider.from_file(path)
    job, _ = job_for(claim_for(agent_id="validator"))

    assert provider.run(job) == Completed(result={"approved": False}, output='{"approved": false}')


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ([], "non-empty object keyed by agent id"),
        ({"worker": []}, "worker: has no entries"),
        ({"worker": {"first": {}}}, 'key "first" is neither an iteration nor "*"'),
        ({"worker": [{"result": [1]}]}, "worker[0].result: must be an object"),
        ({"worker": [{"delay": -1}]}, "worker[0].delay: must be a number of seconds"),
        ({"worker": [{"output": [1]}]}, "worker[0].output: must be a string or a list"),
        ({"worker": [{"usage": {"inputTokens": "9"}}]}, "worker[0].usage: inputTokens"),
        ({"worker": [{"fail": {"retryable": True}}]}, "worker[0].fail: must be a string"),
        ({"worker": [{"reslt": {}}]}, "worker[0]: unknown field(s) reslt"),
    ],
)
def test_a_malformed_script_is_refused_with_where_and_why(script: object, message: str) -> None:
    with pytest.raises(ScriptError) as raised:
        script_from_json(script, source="demo.json")

    assert message in str(raised.value)
    assert str(raised.value).startswith("demo.json")


def test_an_unreadable_script_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")

    with pytest.raises(ScriptError) as raised:
        ScriptedProvider.from_file(path)

    assert str(path) in str(raised.value)
