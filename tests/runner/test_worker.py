"""The runner's loop against the fake work API: claims, streaming, heartbeats, leases, stops."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.runner.helpers import agent_script, pids_in, running, wait_until
from tests.runner.work_api_fake import FakeWorkApi
from zeroshot_runner.backoff import Backoff
from zeroshot_runner.client import WorkClient
from zeroshot_runner.providers.base import Job, Provider
from zeroshot_runner.providers.command import CommandProvider
from zeroshot_runner.providers.scripted import ScriptedProvider, script_from_json
from zeroshot_runner.records import Completed, Outcome
from zeroshot_runner.worker import Runner, RunnerSettings, TaskReport
from zeroshot_runner.workspace import Workspaces

FAST = Backoff(attempts=3, base=0.001, cap=0.01)
# An agent that waits for the test to create a file, then answers.
GATED_AGENT = """
    import json, os, sys, time
    sys.stdin.read()
    print("step 1", flush=True)
    deadline = time.monotonic() + 20
    while not os.path.exists({gate!r}) and time.monotonic() < deadline:
        time.sleep(0.01)
    print(json.dumps({{"iteration": int(os.environ["ZEROSHOT_ITERATION"])}}))
"""


class RunnerThread:
    """A runner working in a thread of the test, with the reports of its tasks."""

    def __init__(self, runner: Runner, reports: list[TaskReport]) -> None:
        self.runner = runner
        self.reports = reports
        self.status: list[int] = []
        self.thread = threading.Thread(target=lambda: self.status.append(runner.run()))
        self.thread.start()

    def join(self, timeout: float = 15.0) -> int:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the runner did not end"
        return self.status[0]

    def stop(self) -> int:
        self.runner.request_stop()
        return self.join()


@contextmanager
def runner_on(
    fake: FakeWorkApi,
    provider: Provider,
    *,
    key: str = "test-key",
    workspaces: Workspaces | None = None,
    **settings: Any,
) -> Iterator[RunnerThread]:
    reports: list[TaskReport] = []
    client = WorkClient(url=fake.url, key=key, backoff=FAST, finish_backoff=FAST)
    options = {"worker": "test-runner", "wait": 0.2, "stop_grace": 5.0, **settings}
    runner = Runner(
        client=client,
        provider=provider,
        settings=RunnerSettings(**options),
        observer=reports.append,
        workspaces=workspaces,
    )
    started = RunnerThread(runner, reports)
    try:
        yield started
    finally:
        if started.thread.is_alive():
            started.stop()
        client.close()


def scripted(script: Any) -> ScriptedProvider:
    return ScriptedProvider(script_from_json(script))


def command(source: str) -> CommandProvider:
    return CommandProvider(command=source, default_timeout=30.0, kill_grace=0.5)


def test_tasks_complete_with_result_output_and_usage_then_the_runner_exits(
    work_api: FakeWorkApi,
) -> None:
    # given a cluster with three tasks, which ends once they are done
    work_api.end_when_idle = True
    worker = work_api.add_task(agent_id="worker", iteration=1)
    first = work_api.add_task(agent_id="validator", role="validator", iteration=1)
    second = work_api.add_task(agent_id="validator", role="validator", iteration=2)
    provider = scripted(
        {
            "worker": [
                {
                    "result": {"summary": "done"},
                    "output": ["editing", "testing"],
                    "usage": {"inputTokens": 100, "outputTokens": 20, "model": "m"},
                }
            ],
            "validator": {
                "1": {"result": {"approved": False}},
                "*": {"result": {"approved": True}},
            },
        }
    )

    # when a runner works the cluster until it ends
    with runner_on(work_api, provider, cluster="c1", exit_when_done=True) as runner:
        status = runner.join()

    # then every task completed with what its agent gave
    assert status == 0
    tasks = work_api.tasks
    assert tasks[worker].result == {"summary": "done"}
    assert tasks[worker].output == "editing\ntesting"
    assert tasks[worker].usage == {"inputTokens": 100, "outputTokens": 20, "model": "m"}
    assert tasks[worker].lines == ["editing", "testing"]
    assert tasks[first].result == {"approved": False}
    assert tasks[second].result == {"approved": True}
    assert "usage" not in tasks[second].complete_body
    # claimed with the runner's name, its lease and its cluster
    claim = work_api.seen("/tasks/claim")[0].body
    assert claim == {"worker": "test-runner", "wait": 0.2, "lease": 60.0, "cluster": "c1"}
    # and the reports follow each task from claim to acknowledgement
    assert sorted(report.status for report in runner.reports) == ["completed"] * 3
    for report in runner.reports:
        assert (
            report.claim_sent
            <= report.claimed
            <= report.provider_started
            <= report.provider_ended
            <= report.finished
        )


def test_output_streams_while_the_agent_runs(work_api: FakeWorkApi, tmp_path: Path) -> None:
    # given an agent that prints a line, then waits for the test before it answers
    gate = tmp_path / "gate"
    task_id = work_api.add_task()
    provider = command(agent_script(tmp_path, GATED_AGENT.format(gate=str(gate))))

    with runner_on(work_api, provider, batch_interval=0.05):
        # when its first line reaches the server while it still works
        assert work_api.wait_for(lambda: work_api.tasks[task_id].lines == ["step 1"])
        assert work_api.tasks[task_id].state == "claimed"
        gate.touch()

        # then it completes afterwards, each line sent once
        assert work_api.wait_for(lambda: work_api.tasks[task_id].state == "completed")
    assert work_api.tasks[task_id].lines == ["step 1", '{"iteration": 1}']
    assert work_api.tasks[task_id].result == {"iteration": 1}


def test_output_lines_keep_their_order_and_go_in_batches(work_api: FakeWorkApi) -> None:
    # given an agent printing 180 lines
    task_id = work_api.add_task()
    lines = [f"line {n}" for n in range(180)]
    provider = scripted({"worker": [{"output": lines}]})

    with runner_on(work_api, provider, batch_lines=50):
        assert work_api.wait_for(lambda: work_api.tasks[task_id].state == "completed")

    # then every line arrived once, in order, in fewer requests than lines, offsets adding up
    assert work_api.tasks[task_id].lines == lines
    batches = [request.body for request in work_api.seen("/output")]
    assert len(batches) < len(lines)
    offsets = [batch["offset"] for batch in batches]
    assert offsets == [sum(len(b["lines"]) for b in batches[:n]) for n in range(len(batches))]


def test_long_output_goes_in_requests_of_bounded_size(work_api: FakeWorkApi) -> None:
    # given an agent printing 150 lines of 10,000 characters (1.5 MB)
    task_id = work_api.add_task()
    lines = [f"{n:04d}" + "x" * 9_996 for n in range(150)]

    with runner_on(work_api, scripted({"worker": [{"output": lines}]})):
        assert work_api.wait_for(lambda: work_api.tasks[task_id].state == "completed")

    # then all arrived in order, no request carrying more than half a megabyte of lines
    assert work_api.tasks[task_id].lines == lines
    sizes = [sum(map(len, request.body["lines"])) for request in work_api.seen("/output")]
    assert len(sizes) >= 3
    assert max(sizes) <= 512 * 1024


def test_heartbeats_keep_the_lease_while_the_agent_works(
    work_api: FakeWorkApi, tmp_path: Path
) -> None:
    # given a short lease and an agent that answers only when the test lets it
    gate = tmp_path / "gate"
    task_id = work_api.add_task()
    provider = command(agent_script(tmp_path, GATED_AGENT.format(gate=str(gate))))

    with runner_on(work_api, provider, lease=0.3):
        # when the server has seen three heartbeats while the agent works
        assert work_api.wait_for(lambda: len(work_api.seen("/heartbeat")) >= 3)
        lease_id = work_api.tasks[task_id].lease_id
        gate.touch()
        assert work_api.wait_for(lambda: work_api.tasks[task_id].state == "completed")

    # then each one carried the lease and kept it
    beats = work_api.seen("/heartbeat")
    assert all(beat.body == {"lease_id": lease_id} for beat in beats)
    assert all(beat.status == 200 for beat in beats)


def test_a_lost_lease_stops_the_agent_and_reports_nothing(
    work_api: FakeWorkApi, tmp_path: Path
) -> None:
    # given an agent that would run a minute
    pids = tmp_path / "pids"
    task_id = work_api.add_task()
    provider = command(
        agent_script(
            tmp_path,
            f"""
            import os, time
            record_pids({str(pids)!r}, os.getpid())
            time.sleep(60)
            """,
        )
    )

    with runner_on(work_api, provider, lease=0.3) as runner:
        # when, once it runs, its heartbeat learns that the lease is gone
        assert wait_until(pids.exists)
        work_api.inject("/heartbeat", 409, body={"code": "lease_lost", "message": "re-claimed"})
        assert wait_until(lambda: not running(pids_in(pids)[0]))
        assert wait_until(lambda: len(runner.reports) >= 1)
        lost_lease = next(
            beat.body["lease_id"] for beat in work_api.seen("/heartbeat") if beat.status == 409
        )

    # then the agent was stopped, and nothing was completed or failed under that lease (the
    # task may be claimed again once the lease, no longer extended, has run out)
    assert runner.reports[0].status == "lost"
    reports = work_api.seen(f"{task_id}/complete") + work_api.seen(f"{task_id}/fail")
    assert all(request.body["lease_id"] != lost_lease for request in reports)


def test_stopping_fails_the_task_in_hand_as_retryable_and_claims_no_more(
    work_api: FakeWorkApi,
) -> None:
    # given two tasks, one runner slot, and an agent that takes a minute
    first = work_api.add_task(iteration=1)
    second = work_api.add_task(iteration=2)
    provider = scripted({"worker": [{"delay": 60, "result": {"late": True}}]})

    with runner_on(work_api, provider) as runner:
        assert work_api.wait_for(lambda: work_api.tasks[first].state == "claimed")

        # when the runner is told to stop
        status = runner.stop()

    # then the task in hand went back to the queue at once, and nothing more was claimed
    assert status == 0
    (failed,) = work_api.tasks[first].fails
    assert failed["retryable"] is True
    # the stop may come while the agent runs, or between the claim and its start
    assert failed["error"] in {
        "the runner stopped the scripted agent",
        "the runner stopped before starting the task",
    }
    assert work_api.tasks[first].state == "queued"
    assert work_api.seen("/complete") == []
    assert work_api.tasks[second].attempts == 0
    assert len(work_api.seen("/tasks/claim")) == 1


def test_a_task_claimed_while_stopping_is_failed_without_being_started(
    work_api: FakeWorkApi, caplog: pytest.LogCaptureFixture
) -> None:
    # given an idle runner whose claim is long-polling
    caplog.set_level(logging.INFO, logger="zeroshot_runner")
    provider = scripted({"worker": [{"output": ["must not run"]}]})
    with runner_on(work_api, provider, wait=20.0) as runner:
        assert work_api.wait_for(lambda: work_api.polling == 1)

        # when it is told to stop, and only then a task arrives for that pending claim
        runner.runner.request_stop()
        assert wait_until(lambda: "stopping:" in caplog.text)
        task_id = work_api.add_task()
        status = runner.join()

    # then the task is handed back at once without its agent having run
    assert status == 0
    task = work_api.tasks[task_id]
    assert task.state == "queued"
    assert task.fails[0]["error"] == "the runner stopped before starting the task"
    assert task.fails[0]["retryable"] is True
    assert task.lines == []
    assert [(report.status, report.error) for report in runner.reports] == [
        ("released", "the runner stopped before starting the task")
    ]


def test_tasks_run_at_once_up_to_the_concurrency(work_api: FakeWorkApi, tmp_path: Path) -> None:
    # given five tasks whose agents all wait for the test
    gate = tmp_path / "gate"
    ids = [work_api.add_task(iteration=n) for n in range(1, 6)]
    provider = command(agent_script(tmp_path, GATED_AGENT.format(gate=str(gate))))

    with runner_on(work_api, provider, concurrency=3):
        # when three are claimed at once, the gate opens
        assert work_api.wait_for(lambda: len(work_api.in_state("claimed")) == 3)
        gate.touch()

        # then all five complete, never more than three at a time
        assert work_api.wait_for(lambda: all(work_api.tasks[i].state == "completed" for i in ids))
    assert work_api.max_claimed == 3
    assert sorted(work_api.tasks[i].result["iteration"] for i in ids) == [1, 2, 3, 4, 5]


def test_a_transient_error_on_complete_is_retried_and_completes_once(
    work_api: FakeWorkApi,
) -> None:
    # given a server that applies the first completion but loses its answer
    task_id = work_api.add_task()
    work_api.inject("/complete", 503, after=True)

    with runner_on(work_api, scripted({"worker": [{"result": {"ok": True}}]})) as runner:
        assert wait_until(lambda: len(runner.reports) == 1)

    assert [r.status for r in work_api.seen("/complete")] == [503, 200]
    assert work_api.tasks[task_id].state == "completed"
    assert runner.reports[0].status == "completed"


def test_a_refused_result_fails_the_task_instead_of_leaving_it_claimed(
    work_api: FakeWorkApi,
) -> None:
    task_id = work_api.add_task()
    work_api.inject(
        "/complete", 422, body={"code": "validation_error", "message": "result too large"}
    )

    with runner_on(work_api, scripted({"worker": [{"result": {"ok": True}}]})) as runner:
        assert wait_until(lambda: len(runner.reports) >= 1)

    # (failed as retryable, the task may have been claimed again before the runner stopped)
    fail = work_api.tasks[task_id].fails[0]
    assert "result too large" in fail["error"]
    assert fail["retryable"] is True
    assert runner.reports[0].status == "failed"
    assert runner.reports[0].error == fail["error"]


class StubbornProvider:
    """An agent that ignores the stop (like a request in flight) until the test releases it."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def run(self, job: Job) -> Outcome:
        self.started.set()
        self.release.wait(30)
        return Completed(result={"late": True}, output="late")

    def close(self) -> None:
        pass


def test_a_stopping_runner_does_not_wait_for_an_agent_that_ignores_the_stop(
    work_api: FakeWorkApi,
) -> None:
    # given a task whose agent will not stop
    task_id = work_api.add_task()
    provider = StubbornProvider()

    with runner_on(work_api, provider, stop_grace=0.3) as runner:
        assert provider.started.wait(10)

        # when the runner is stopped
        status = runner.stop()

        # then it gave up on the agent after its grace and failed the task as retryable
        assert status == 0
        assert work_api.tasks[task_id].fails == [
            {
                "lease_id": work_api.tasks[task_id].fails[0]["lease_id"],
                "error": "the runner stopped before the task finished",
                "retryable": True,
            }
        ]
        # and the agent's late answer is never sent
        provider.release.set()
        assert wait_until(lambda: len(runner.reports) == 1)
    assert work_api.seen("/complete") == []
    assert runner.reports[0].status == "failed"


class BrokenProvider:
    """A provider with a bug: it raises instead of returning an outcome."""

    def run(self, job: Job) -> Outcome:
        raise RuntimeError("provider bug")

    def close(self) -> None:
        pass


def test_a_provider_that_raises_fails_the_task_as_retryable(work_api: FakeWorkApi) -> None:
    task_id = work_api.add_task()

    with runner_on(work_api, BrokenProvider()) as runner:
        assert work_api.wait_for(lambda: bool(work_api.tasks[task_id].fails))
        # the slot lives on and keeps claiming
        assert work_api.wait_for(lambda: work_api.tasks[task_id].attempts >= 2)
        runner.stop()

    fail = work_api.tasks[task_id].fails[0]
    assert fail["retryable"] is True
    assert "provider bug" in fail["error"]


def test_a_refused_key_ends_the_runner_with_status_1(work_api: FakeWorkApi) -> None:
    with runner_on(work_api, scripted({"*": [{}]}), key="wrong", concurrency=2) as runner:
        status = runner.join()

    assert status == 1
    assert runner.runner.fatal is not None
    assert "HTTP 401" in runner.runner.fatal


def test_a_cluster_that_has_ended_is_not_worked_at_all(work_api: FakeWorkApi) -> None:
    work_api.cluster_state = "stopped"
    work_api.add_task()

    with runner_on(work_api, scripted({"*": [{}]}), cluster="c1", exit_when_done=True) as runner:
        status = runner.join()

    assert status == 0
    assert work_api.seen("/tasks/claim") == []


@pytest.mark.parametrize("timeout", [10**400, 1e300, 10**13], ids=["10**400", "1e300", "10**13"])
def test_an_absurd_agent_timeout_is_ignored_not_a_crashed_slot(
    work_api: FakeWorkApi, timeout: Any
) -> None:
    task_id = work_api.add_task(timeout=timeout)

    with runner_on(work_api, scripted({"*": [{}]})) as runner:
        assert work_api.wait_for(lambda: work_api.tasks[task_id].complete_body is not None)
        status = runner.stop()

    assert status == 0


def test_a_crashed_slot_ends_the_runner_with_status_1(
    work_api: FakeWorkApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_claim(**_: Any) -> None:
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(WorkClient, "claim", lambda self, **kw: broken_claim(**kw))

    with runner_on(work_api, scripted({"*": [{}]}), concurrency=2) as runner:
        status = runner.join()

    assert status == 1
    assert "OverflowError" in str(runner.runner.fatal)
