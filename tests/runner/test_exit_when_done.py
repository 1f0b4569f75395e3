"""``--exit-when-done``: the runner exits within a second of its cluster's end, however it ended,
even while its claims long-poll and its agents still work."""

from __future__ import annotations

import time

import pytest

from tests.runner.helpers import wait_until
from tests.runner.test_worker import FAST, runner_on, scripted
from tests.runner.work_api_fake import FakeWorkApi
from zeroshot_runner.client import WorkClient
from zeroshot_runner.worker import Runner, RunnerSettings, TaskReport


@pytest.mark.timed
@pytest.mark.parametrize("ended", ["completed", "failed", "stopped"])
def test_the_runner_exits_within_a_second_of_its_cluster_ending(
    work_api: FakeWorkApi, ended: str
) -> None:
    # given a runner long-polling its cluster with 10 s claims, one slot idle, one agent at work
    work_api.add_task(agent_id="slow")
    provider = scripted({"slow": [{"delay": 60, "output": ["thinking"]}]})
    with runner_on(
        work_api, provider, cluster="c1", exit_when_done=True, wait=10.0, concurrency=2
    ) as runner:
        assert wait_until(lambda: work_api.polling == 1 and len(work_api.in_state("claimed")) == 1)

        # when the cluster ends
        ended_at = time.monotonic()
        work_api.cluster_state = ended
        status = runner.join(timeout=5.0)
        took = time.monotonic() - ended_at

    # then the runner is gone within a second, its agent stopped and its task handed back
    assert status == 0
    assert took < 1.0, f"the runner took {took:.2f} s to exit"
    print(f"exited {took:.3f} s after the cluster became {ended}")
    (report,) = runner.reports
    assert report.status == "failed"


def test_the_runner_exits_only_once_its_last_task_is_reported(work_api: FakeWorkApi) -> None:
    # given a cluster that ends as soon as its one task completes, and an observer that takes
    # its time with each report (a slow log, a loaded machine)
    work_api.end_when_idle = True
    task = work_api.add_task(agent_id="worker")
    reports: list[TaskReport] = []

    def slow_observer(report: TaskReport) -> None:
        time.sleep(1.5)
        reports.append(report)

    client = WorkClient(url=work_api.url, key="test-key", backoff=FAST, finish_backoff=FAST)
    runner = Runner(
        client=client,
        provider=scripted({"worker": [{"result": {"summary": "done"}}]}),
        settings=RunnerSettings(
            worker="test-runner", cluster="c1", exit_when_done=True, wait=0.2, watch_interval=0.05
        ),
        observer=slow_observer,
    )
    try:
        # when it runs until its cluster has ended (seen within 0.05 s of the completion)
        status = runner.run()
    finally:
        client.close()

    # then it waited for the task's report before exiting
    assert status == 0
    assert work_api.tasks[task].state == "completed"
    assert [(report.task_id, report.status) for report in reports] == [(task, "completed")]
