"""Clusters run end to end by real processes: the server (the image's command) and runners with
CLI agents (SPEC §7.6)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from context.services.templates import cluster_create_from_template, templates_load_builtin
from ledger.interfaces import MessageFilter, cluster_create, cluster_get, message_query
from ledger.keys import api_key_create
from runs.models import Task
from runs.services import cluster_start
from tests.live_server import REPO, LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

# The "agent": reads its prompt on stdin, answers by its id and iteration, as a CLI agent would.
AGENT = textwrap.dedent(
    """
    import json, os, sys, time
    prompt = sys.stdin.read()
    agent = os.environ["ZEROSHOT_AGENT_ID"]
    iteration = int(os.environ["ZEROSHOT_ITERATION"])
    pause = os.environ.get("AGENT_PAUSE_" + agent.replace("-", "_").upper())
    if pause and iteration == 1:
        open(os.environ["AGENT_PIDFILE"], "w").write(str(os.getpid()))
        time.sleep(float(pause))
    print("reading the prompt:", len(prompt), "chars")
    if agent == "planner":
        result = {"plan": "Add the button", "summary": "a login button",
                  "acceptanceCriteria": [{"id": "AC1", "criterion": "a button"}],
                  "filesAffected": ["login.html"]}
    elif agent == "worker":
        result = {"summary": f"try {iteration}",
                  "completionStatus": {"canValidate": True, "percentComplete": 100}}
    else:
        approved = iteration > 1
        result = {"approved": approved, "summary": "ok" if approved else "no",
                  "errors": [] if approved else ["Missing tests"], "criteriaResults": []}
    print(json.dumps({**result, "usage": {"input_tokens": len(prompt) // 4, "output_tokens": 20}}))
    """
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path, env={"ZEROSHOT_RETRY_BASE_SECONDS": "0.2"}) as live:
        yield live


@pytest.fixture
def agent_script(tmp_path: Path) -> Path:
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return path


def runner(
    server: LiveServer,
    agent_script: Path,
    cluster_id: str,
    *extra: str,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """A runner process with the command provider, for one cluster."""
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
            "command",
            "--command",
            f"{sys.executable} {agent_script}",
            "--wait",
            "2",
            "--kill-grace",
            "1",
            *extra,
        ],
        env={**os.environ, "ZEROSHOT_WEB_KEY": key, **(env or {})},
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def wait_for(condition: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def stop_all(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def started(template: str, params: dict[str, object] | None = None) -> str:
    templates_load_builtin()
    cluster_id = cluster_create_from_template(template_name=template, params=params or {}).id
    cluster_start(cluster_id=cluster_id, issue={"title": "Login", "text": "Add a login button"})
    return cluster_id


def test_two_runners_complete_a_worker_validator_cluster(
    server: LiveServer, agent_script: Path
) -> None:
    # given a started worker-validator cluster and two runners
    cluster_id = started("worker-validator")
    runners = [runner(server, agent_script, cluster_id, "--exit-when-done") for _ in range(2)]
    try:
        # when they work until the cluster ends
        for process in runners:
            process.wait(timeout=90)
    finally:
        stop_all(*runners)
    # then the validator rejected once and approved the second time, and the cluster completed
    assert [p.returncode for p in runners] == [0, 0], server.log_tail()
    assert cluster_get(cluster_id=cluster_id).state == "completed"
    verdicts = message_query(
        cluster_id=cluster_id, where=MessageFilter(topic="VALIDATION_RESULT"), limit=None
    )
    assert [m.data["approved"] for m in verdicts] == [False, True]
    tasks = list(Task.objects.order_by("created_at").values_list("agent_id", "iteration", "state"))
    assert tasks == [
        ("worker", 1, "completed"),
        ("validator", 1, "completed"),
        ("worker", 2, "completed"),
        ("validator", 2, "completed"),
    ]
    usage = message_query(cluster_id=cluster_id, where=MessageFilter(topic="TOKEN_USAGE"))
    assert len(usage) == 4
    assert all(m.data["inputTokens"] > 0 for m in usage)
    outputs = message_query(cluster_id=cluster_id, where=MessageFilter(topic="AGENT_OUTPUT"))
    assert any("reading the prompt" in (m.text or "") for m in outputs)
    assert all(t.build_id for t in Task.objects.all())


def test_two_runners_complete_a_planner_worker_validators_cluster(
    server: LiveServer, agent_script: Path
) -> None:
    cluster_id = started("planner-worker-validators")
    runners = [
        runner(server, agent_script, cluster_id, "--exit-when-done", "--concurrency", "2")
        for _ in range(2)
    ]
    try:
        for process in runners:
            process.wait(timeout=120)
    finally:
        stop_all(*runners)
    assert cluster_get(cluster_id=cluster_id).state == "completed", server.log_tail()
    agents = list(Task.objects.order_by("created_at").values_list("agent_id", flat=True))
    assert agents[:2] == ["planner", "worker"]
    assert set(agents) == {"planner", "worker", "validator-requirements", "validator-code"}
    assert set(Task.objects.values_list("state", flat=True)) == {"completed"}


def one_worker_cluster(**agent: object) -> str:
    worker = {
        "id": "worker",
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": "ISSUE_OPENED"}],
        **agent,
    }
    cluster_id = cluster_create(cluster_id="solo", config={"agents": [worker]}).id
    cluster_start(cluster_id=cluster_id, issue={"text": "Do it"})
    return cluster_id


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_runner_that_dies_mid_task_loses_nothing(
    server: LiveServer, agent_script: Path, tmp_path: Path, how: str
) -> None:
    # given a runner whose agent is in the middle of its task
    cluster_id = one_worker_cluster()
    pidfile = tmp_path / "agent.pid"
    env = {"AGENT_PAUSE_WORKER": "30", "AGENT_PIDFILE": str(pidfile)}
    first = runner(server, agent_script, cluster_id, "--lease", "5", env=env)
    wait_for(pidfile.exists)
    task = Task.objects.get()
    assert task.state == "claimed"
    # when the runner is killed (or told to stop) and another one takes over
    first.send_signal(getattr(signal, how))
    first.wait(timeout=30)
    if how == "SIGTERM":
        # a stopping runner hands its task back at once, and its agent is gone
        wait_for(lambda: Task.objects.get().state == "queued", timeout=15)
        assert not _alive(int(pidfile.read_text()))
    second = runner(server, agent_script, cluster_id, "--exit-when-done")
    try:
        wait_for(lambda: Task.objects.get().state == "completed", timeout=60)
    finally:
        stop_all(second)
        if how == "SIGKILL":
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    # then the task was taken again and completed once
    task = Task.objects.get()
    assert task.attempts == 2
    done = message_query(cluster_id=cluster_id, where=MessageFilter(topic="AGENT_LIFECYCLE"))
    assert [m.data["event"] for m in done].count("TASK_COMPLETED") == 1
    expected = "RETRY_SCHEDULED" if how == "SIGTERM" else "TASK_STARTED"
    assert [m.data["event"] for m in done][1] == expected


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_an_agent_that_exits_1_fails_its_task_with_a_readable_error(
    server: LiveServer, tmp_path: Path
) -> None:
    cluster_id = one_worker_cluster(maxRetries=0)
    broken = tmp_path / "broken.py"
    broken.write_text(
        "import sys\nprint('no json here')\nsys.stderr.write('disk full\\n')\nsys.exit(1)\n"
    )
    process = runner(server, broken, cluster_id)
    try:
        wait_for(lambda: Task.objects.get().state == "failed", timeout=30)
    finally:
        stop_all(process)
    [error] = message_query(cluster_id=cluster_id, where=MessageFilter(topic="AGENT_ERROR"))
    assert "exit" in error.data["error"]
    assert "disk full" in error.data["error"]
    assert "disk full" in Task.objects.get().error
