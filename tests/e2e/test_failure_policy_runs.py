"""zeroshot's failure policy end to end: a live server and the real runner CLI with scripted
agents (SPEC §7.3, §7.6). Every path ends the cluster or moves it on, and a runner started
with ``--exit-when-done`` exits with it.

zeroshot: src/agent/agent-lifecycle.js:756 (handleFinalFailure: the rejection at :795, hook
failure at :835, AGENT_ERROR at :923), :578 (hookMaxRetries = 3),
src/agent/critical-agent-policy.ts:11 (isCriticalAgent), src/agent/agent-task-executor.js:3462
(a validator's schema mismatch throws).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.interfaces import MessageFilter, cluster_create, cluster_get, message_query
from ledger.keys import api_key_create
from runs.models import Task
from runs.services import cluster_start
from tests.live_server import REPO, LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

RUNNER_EXIT_S = 60
REJECTED = "return message.content?.data?.approved === false;"
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "summary": {"type": "string"}},
    "required": ["approved", "summary"],
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path, env={"ZEROSHOT_RETRY_BASE_SECONDS": "0.1"}) as live:
        yield live


def worker(**extra: Any) -> dict[str, Any]:
    return {
        "id": "worker",
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [
            {"topic": "ISSUE_OPENED"},
            {"topic": "VALIDATION_RESULT", "logic": {"engine": "javascript", "script": REJECTED}},
        ],
        "hooks": {
            "onComplete": {
                "action": "publish_message",
                "config": {"topic": "IMPLEMENTATION_READY", "content": {"text": "ready"}},
            }
        },
        **extra,
    }


def validator(**extra: Any) -> dict[str, Any]:
    return {
        "id": "validator",
        "role": "validator",
        "prompt": "Check.",
        "jsonSchema": VERDICT_SCHEMA,
        "triggers": [{"topic": "IMPLEMENTATION_READY"}],
        "hooks": {
            "onComplete": {
                "action": "publish_message",
                "config": {
                    "topic": "VALIDATION_RESULT",
                    "content": {
                        "text": "{{result.summary}}",
                        "data": {"approved": "{{result.approved}}"},
                    },
                },
            }
        },
        **extra,
    }


def started(*agents: dict[str, Any]) -> str:
    cluster_id = cluster_create(cluster_id="policy", config={"agents": list(agents)}).id
    cluster_start(cluster_id=cluster_id, issue={"text": "Add a login button"})
    return cluster_id


def runner(
    server: LiveServer, cluster_id: str, script: dict[str, Any], *extra: str
) -> subprocess.Popen[bytes]:
    """The runner CLI with the scripted provider, for one cluster."""
    path = server.data_dir / f"script-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(script))
    _, key = api_key_create(name="runner", cluster_id=cluster_id)
    log = (server.data_dir / f"runner-{time.monotonic_ns()}.log").open("wb")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zeroshot_runner",
            "--url",
            server.url,
            "--cluster",
            cluster_id,
            "--provider",
            "scripted",
            "--script",
            str(path),
            "--wait",
            "1",
            *extra,
        ],
        env={**os.environ, "ZEROSHOT_WEB_KEY": key},
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def exits(process: subprocess.Popen[bytes], server: LiveServer) -> int:
    """The runner's exit status; it must exit on its own once its cluster has ended."""
    try:
        return process.wait(timeout=RUNNER_EXIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError("the runner did not exit\n" + server.log_tail()) from None


def wait_for(condition: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def messages(cluster_id: str, topic: str) -> list[Any]:
    return message_query(cluster_id=cluster_id, where=MessageFilter(topic=topic), limit=None)


def ok(summary: str) -> dict[str, Any]:
    return {"result": {"summary": summary, "result": summary}}


def test_a_worker_out_of_retries_fails_the_cluster(server: LiveServer) -> None:
    cluster_id = started(worker(maxRetries=1), validator())
    script = {"worker": [{"fail": {"error": "provider down", "retryable": True}}]}
    process = runner(server, cluster_id, script, "--exit-when-done")
    assert exits(process, server) == 0
    assert cluster_get(cluster_id=cluster_id).state == "failed"
    [failed] = messages(cluster_id, "CLUSTER_FAILED")
    assert (failed.sender, failed.data["reason"]) == ("worker", "critical_agent_failed")
    assert Task.objects.get().attempts == 2


def test_a_crashed_validator_rejects_and_the_worker_runs_again(server: LiveServer) -> None:
    cluster_id = started(worker(), validator(maxRetries=0))
    script = {
        "worker": [ok("first try"), ok("second try")],
        "validator": [
            {"fail": {"error": "validator process died", "retryable": True}},
            {"result": {"approved": True, "summary": "good"}},
        ],
    }
    process = runner(server, cluster_id, script, "--exit-when-done")
    assert exits(process, server) == 0
    assert cluster_get(cluster_id=cluster_id).state == "completed", server.log_tail()
    verdicts = messages(cluster_id, "VALIDATION_RESULT")
    assert [(m.data["approved"], m.data.get("crashedAfterRetries")) for m in verdicts] == [
        (False, True),
        (True, None),
    ]
    runs = list(Task.objects.order_by("created_at").values_list("agent_id", "state"))
    assert runs == [
        ("worker", "completed"),
        ("validator", "failed"),
        ("worker", "completed"),
        ("validator", "completed"),
    ]


def test_a_validator_answer_without_approved_never_reaches_its_worker(
    server: LiveServer,
) -> None:
    cluster_id = started(worker(), validator(maxRetries=1))
    script = {
        "worker": [ok("first try"), ok("second try")],
        "validator": [
            {"result": {"summary": "looks fine"}},
            {"result": {"approved": True, "summary": "good"}},
        ],
    }
    process = runner(server, cluster_id, script, "--exit-when-done")
    assert exits(process, server) == 0
    assert cluster_get(cluster_id=cluster_id).state == "completed", server.log_tail()
    verdicts = messages(cluster_id, "VALIDATION_RESULT")
    # never approved: null — the answer without a verdict became the crash's rejection
    assert [m.data["approved"] for m in verdicts] == [False, True]
    assert verdicts[0].data["crashedAfterRetries"] is True


def test_a_hook_failing_three_times_fails_the_cluster(server: LiveServer) -> None:
    broken = worker()
    broken["hooks"]["onComplete"]["logic"] = {
        "engine": "javascript",
        "script": "throw new Error('the hook cannot build its message');",
    }
    cluster_id = started(broken, validator())
    process = runner(server, cluster_id, {"worker": [ok("done")]}, "--exit-when-done")
    assert exits(process, server) == 0
    assert cluster_get(cluster_id=cluster_id).state == "failed"
    [failed] = messages(cluster_id, "CLUSTER_FAILED")
    assert failed.data["reason"] == "on_complete_hook_failed"
    assert failed.data["hookRetries"] == 3
    assert messages(cluster_id, "IMPLEMENTATION_READY") == []


def test_a_lease_expiring_max_retries_plus_one_times_fails_for_good(server: LiveServer) -> None:
    cluster_id = started(worker(maxRetries=1), validator())
    slow = {"worker": [{"delay": 120, "output": ["thinking"]}]}
    # given runners that die holding the task, each time its lease (5 s) is current
    for attempt in (1, 2):
        process = runner(server, cluster_id, slow, "--lease", "5")
        wait_for(lambda a=attempt: Task.objects.filter(state="claimed", attempts=a).exists())
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    # when a runner claims after the second lease ran out
    last = runner(server, cluster_id, slow, "--exit-when-done")
    # then the task failed for good, the cluster with it, and that runner exits
    assert exits(last, server) == 0
    task = Task.objects.get()
    assert (task.state, task.attempts) == ("failed", 2)
    [error] = messages(cluster_id, "AGENT_ERROR")
    assert (error.data["phase"], error.data["retryBudgetExhausted"]) == ("lease", True)
    assert cluster_get(cluster_id=cluster_id).state == "failed"
