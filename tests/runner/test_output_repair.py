"""Output repair through the runner's loop: a wrong answer is asked for once more, counted on
the task's output and in the runner's report."""

from __future__ import annotations

from pathlib import Path

from tests.runner.helpers import agent_script, claim_for, job_for, wait_until
from tests.runner.test_worker import command, runner_on
from tests.runner.work_api_fake import FakeWorkApi
from zeroshot_runner.records import Completed

SCHEMA = {"type": "object", "required": ["approved"], "properties": {"approved": {}}}
# Answers without JSON, unless it is being asked again (or always, when told to).
AGENT = """
    import json, os, sys
    prompt = sys.stdin.read()
    repairing = "Your previous answer could not be used" in prompt
    if repairing and os.environ["ZEROSHOT_AGENT_ID"] == "learner":
        print(json.dumps({"approved": True}))
    else:
        print("Looks good to me!")
"""


def test_an_agent_that_answers_well_when_asked_again_completes_its_task(
    work_api: FakeWorkApi, tmp_path: Path
) -> None:
    task = work_api.add_task(agent_id="learner", role="validator", jsonSchema=SCHEMA)

    with runner_on(work_api, command(agent_script(tmp_path, AGENT))) as runner:
        assert wait_until(lambda: work_api.tasks[task].state == "completed")

    assert work_api.tasks[task].result == {"approved": True}
    (report,) = runner.reports
    assert report.status == "completed"
    assert report.repairs == 1
    lines = work_api.tasks[task].lines
    assert lines[0] == "Looks good to me!"
    assert lines[1].startswith("[zeroshot-runner] output repair 1: the answer holds no JSON")
    assert lines[-1] == "[zeroshot-runner] output repairs: 1; the answer is usable"


def test_an_agent_that_always_answers_badly_fails_its_task_as_retryable(
    work_api: FakeWorkApi, tmp_path: Path
) -> None:
    task = work_api.add_task(agent_id="stubborn", role="validator", jsonSchema=SCHEMA)

    with runner_on(work_api, command(agent_script(tmp_path, AGENT))) as runner:
        assert wait_until(lambda: len(work_api.tasks[task].fails) >= 1)
        runner.stop()

    first = work_api.tasks[task].fails[0]
    assert first["retryable"] is True
    assert "holds no JSON object" in first["error"]
    assert "after 1 output repair" in first["error"]
    assert runner.reports[0].status == "failed"
    assert runner.reports[0].repairs == 1
    assert "[zeroshot-runner] output repairs: 1; the answer is still wrong" in (
        work_api.tasks[task].lines
    )


def test_an_object_still_breaking_the_schema_goes_to_the_server_to_judge(tmp_path: Path) -> None:
    # SPEC §7.5: the server fails a validator's result, and uses another agent's with a warning
    agent = command(agent_script(tmp_path, 'print(\'{"verdict": "fine"}\')'))
    job, lines = job_for(claim_for(jsonSchema=SCHEMA))

    outcome = agent.run(job)

    assert isinstance(outcome, Completed)
    assert outcome.result == {"verdict": "fine"}
    assert outcome.repairs == 1
    assert "'approved' is a required property" in lines.lines[1]
