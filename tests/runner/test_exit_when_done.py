"""``--exit-when-done``: the runner exits within a second of its cluster's end, however it ended,
even while its claims long-poll and its agents still work."""

from __future__ import annotations

import time

import pytest

from tests.runner.helpers import wait_until
from tests.runner.test_worker import runner_on, scripted
from tests.runner.work_api_fake import FakeWorkApi


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
