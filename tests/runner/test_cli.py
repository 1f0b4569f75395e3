"""``python -m zeroshot_runner`` as a real process: signals, a whole cluster, usage errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runner.helpers import agent_script, pids_in, running, wait_until
from tests.runner.work_api_fake import FakeWorkApi
from zeroshot_runner.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]


def start_runner(fake: FakeWorkApi, *options: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "ZEROSHOT_WEB_KEY": fake.key}
    return subprocess.Popen(
        [sys.executable, "-m", "zeroshot_runner", "--url", fake.url, "--wait", "1", *options],
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_fails_the_task_in_hand_at_once_and_leaves_no_process(
    work_api: FakeWorkApi, tmp_path: Path, signum: signal.Signals
) -> None:
    # given a runner whose agent (and the agent's child) would work for a minute
    pids = tmp_path / "pids"
    task_id = work_api.add_task()
    command = agent_script(
        tmp_path,
        f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        record_pids({str(pids)!r}, os.getpid(), child.pid)
        time.sleep(60)
        """,
    )
    runner = start_runner(
        work_api, "--provider", "command", "--command", command, "--kill-grace", "1"
    )
    try:
        assert wait_until(lambda: len(pids_in(pids)) == 2, timeout=20)

        # when the runner is signalled
        signalled = time.monotonic()
        runner.send_signal(signum)

        # then the task is failed as retryable at once, not left to its 60 s lease
        assert work_api.wait_for(lambda: bool(work_api.tasks[task_id].fails))
        assert time.monotonic() - signalled < 10
        (fail,) = work_api.tasks[task_id].fails
        assert fail["retryable"] is True
        assert work_api.tasks[task_id].state == "queued"
        # and the runner exits cleanly, leaving no agent process behind
        assert runner.wait(timeout=15) == 0
    finally:
        if runner.poll() is None:
            runner.kill()
        runner.communicate()
    assert work_api.seen("/complete") == []
    assert not any(running(pid) for pid in pids_in(pids))


def test_a_runner_works_a_cluster_until_it_ends_then_exits(
    work_api: FakeWorkApi, tmp_path: Path
) -> None:
    # given a cluster of a worker and a validator that rejects once
    work_api.end_when_idle = True
    ids = [
        work_api.add_task(agent_id="worker", iteration=1),
        work_api.add_task(agent_id="validator", role="validator", iteration=1),
        work_api.add_task(agent_id="validator", role="validator", iteration=2),
    ]
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "worker": [{"result": {"summary": "done"}, "output": ["working"]}],
                "validator": [{"result": {"approved": False}}, {"result": {"approved": True}}],
            }
        )
    )

    # when a runner with two slots works it
    runner = start_runner(
        work_api,
        "--provider",
        "scripted",
        "--script",
        str(script),
        "--cluster",
        "c1",
        "--exit-when-done",
        "--concurrency",
        "2",
    )
    try:
        status = runner.wait(timeout=30)
    finally:
        if runner.poll() is None:
            runner.kill()
        _, log = runner.communicate()

    # then it exits by itself once the cluster has ended, every task completed
    assert status == 0, log
    assert [work_api.tasks[i].result for i in ids] == [
        {"summary": "done"},
        {"approved": False},
        {"approved": True},
    ]
    assert "cluster c1 is completed" in log


def test_the_runner_imports_nothing_of_django_or_the_server() -> None:
    probe = (
        "import sys, zeroshot_runner.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'django', 'ninja', 'channels', 'ledger', 'context', 'zeroshot_web'}))"
    )

    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--provider", "scripted", "--script", "x.json"], "an API key is needed"),
        (["--key", "k", "--provider", "command"], "--provider command needs --command"),
        (["--key", "k", "--provider", "scripted"], "--provider scripted needs --script"),
        (["--key", "k", "--provider", "openai", "--exit-when-done"], "needs --cluster"),
        (["--key", "k", "--provider", "openai", "--wait", "31"], "must be at most 30"),
        (["--key", "k", "--provider", "openai", "--concurrency", "0"], "must be 1 or more"),
        (["--key", "k", "--provider", "openai", "--lease", "inf"], "more than 0"),
        (["--key", "k", "--provider", "claude,nope"], "unknown provider nope"),
        (["--key", "k", "--provider", "claude,claude"], "named twice"),
        (["--key", "k", "--provider", "codex", "--workspace", "worktree"], "needs --repo"),
        (["--key", "k", "--provider", "codex", "--repo", "."], "go with --workspace worktree"),
        (
            ["--key", "k", "--provider", "codex", "--workspace", "worktree", "--repo", "/"],
            "is not a git repository",
        ),
    ],
)
def test_usage_errors_exit_with_status_2_and_say_why(
    arguments: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("ZEROSHOT_WEB_KEY", raising=False)

    with pytest.raises(SystemExit) as raised:
        main(arguments)

    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_a_malformed_script_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "script.json"
    script.write_text('{"worker": [{"delay": "slow"}]}')

    with pytest.raises(SystemExit) as raised:
        main(["--key", "k", "--provider", "scripted", "--script", str(script)])

    assert raised.value.code == 2
    assert "worker[0].delay" in capsys.readouterr().err


def test_a_runner_names_itself_host_and_pid_by_default() -> None:
    assert build_parser().parse_args(["--provider", "codex"]).worker == (
        f"{socket.gethostname()}:{os.getpid()}"
    )


@pytest.mark.parametrize(
    ("options", "labels", "providers"),
    [
        # a runner of the demo pool, of one provider: it runs any agent, so asks for any
        (["--label", "pool=demo", "--provider", "scripted"], {"pool": "demo"}, None),
        # a runner of two pools' labels and two providers asks for both
        (
            ["--label", "pool=gpu", "--label", "team=a", "--provider", "claude,codex"],
            {"pool": "gpu", "team": "a"},
            ["claude", "codex"],
        ),
        # no labels: no labels sent
        (["--provider", "scripted"], None, None),
    ],
)
def test_a_runners_claims_carry_its_labels_and_providers(
    work_api: FakeWorkApi,
    tmp_path: Path,
    options: list[str],
    labels: dict[str, str] | None,
    providers: list[str] | None,
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"*": [{"result": {"summary": "ok"}}]}))
    if "scripted" in options:
        options = [*options, "--script", str(script)]
    runner = start_runner(work_api, "--worker", "box:9", *options)
    try:
        assert wait_until(lambda: bool(work_api.seen("/tasks/claim")), timeout=20)
    finally:
        runner.terminate()
        runner.communicate(timeout=20)
    body = work_api.seen("/tasks/claim")[0].body
    assert body["worker"] == "box:9"
    assert body.get("labels") == labels
    assert body.get("providers") == providers


def test_a_label_must_be_key_equals_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["--key", "k", "--provider", "codex", "--label", "pool"])
    assert raised.value.code == 2
    assert "'pool' is not KEY=VALUE" in capsys.readouterr().err
