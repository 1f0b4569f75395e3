"""A real server and a runner with a named provider (a fake ``claude`` on PATH) working a
cluster in a git worktree of its own, the branch reported on the cluster's ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from context.services.templates import cluster_create_from_template, templates_load_builtin
from ledger.interfaces import MessageFilter, cluster_get, message_query
from ledger.keys import api_key_create
from runs.models import Task
from runs.services import cluster_start
from tests.live_server import REPO, LiveServer
from tests.runner.cli_fakes import calls_in, install_fake_cli, path_with

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = {"summary": "added", "completionStatus": {"canValidate": True, "percentComplete": 100}}
VALIDATOR = {"approved": True, "summary": "ok", "errors": [], "criteriaResults": []}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path, env={"ZEROSHOT_RETRY_BASE_SECONDS": "0.2"}) as live:
        yield live


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_claude_runner_works_a_cluster_in_its_worktree_and_reports_the_branch(
    server: LiveServer, tmp_path: Path
) -> None:
    # given a started worker-validator cluster, a repository and a fake claude CLI
    templates_load_builtin()
    cluster_id = cluster_create_from_template(template_name="worker-validator", params={}).id
    cluster_start(cluster_id=cluster_id, issue={"title": "Login", "text": "Add a login button"})
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "-c", "user.name=T", "-c", "user.email=t@e.st", "commit", "--allow-empty", "-qm", "b")
    bin_dir = tmp_path / "bin"
    calls = tmp_path / "claude.calls"
    install_fake_cli(bin_dir, "claude", [json.dumps(WORKER), json.dumps(VALIDATOR)], calls)
    _, key = api_key_create(name="runner", cluster_id=cluster_id)
    worktrees = tmp_path / "worktrees"

    # when a runner with the claude provider works it until it ends
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zeroshot_runner",
            "--url",
            server.url,
            "--cluster",
            cluster_id,
            "--exit-when-done",
            "--provider",
            "claude",
            "--workspace",
            "worktree",
            "--repo",
            str(repo),
            "--worktrees",
            str(worktrees),
            "--wait",
            "2",
        ],
        env={**os.environ, "ZEROSHOT_WEB_KEY": key, "PATH": path_with(bin_dir)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )

    # then the cluster completed, every agent ran in the cluster's worktree
    assert done.returncode == 0, done.stderr[-3000:] + server.log_tail()
    assert cluster_get(cluster_id=cluster_id).state == "completed"
    assert time.monotonic() - started < 60
    states = list(Task.objects.order_by("created_at").values_list("agent_id", "state"))
    assert states == [("worker", "completed"), ("validator", "completed")]
    assert {call["cwd"] for call in calls_in(calls)} == {str(worktrees / cluster_id)}
    # and the streamed lines reached the task's output
    outputs = message_query(cluster_id=cluster_id, where=MessageFilter(topic="AGENT_OUTPUT"))
    assert any("[zeroshot-runner] claude: model" in (m.text or "") for m in outputs)
    # and the worktree is gone, its branch named on the ledger
    assert not (worktrees / cluster_id).exists()
    (branch,) = message_query(
        cluster_id=cluster_id, where=MessageFilter(topic="WORKSPACE_BRANCH"), limit=None
    )
    assert branch.data["branch"] == f"zeroshot/{cluster_id}"
    assert branch.data["commit"] == git(repo, "rev-parse", f"zeroshot/{cluster_id}")
