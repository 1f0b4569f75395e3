"""A real runner process serving two named providers, each agent's ``provider`` picking its CLI,
in a worktree of its cluster's own, exiting when the cluster has ended."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.runner.cli_fakes import calls_in, install_fake_cli, path_with
from tests.runner.work_api_fake import FakeWorkApi

REPO = Path(__file__).resolve().parents[2]
ANSWER = '{"summary": "done", "result": "ok"}'


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_each_agent_runs_on_its_provider_in_the_clusters_worktree(
    work_api: FakeWorkApi, tmp_path: Path
) -> None:
    # given a repository, fake claude and codex CLIs, and a cluster whose agents name them
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "-c", "user.name=T", "-c", "user.email=t@e.st", "commit", "--allow-empty", "-qm", "b")
    bin_dir = tmp_path / "bin"
    install_fake_cli(bin_dir, "claude", [ANSWER], tmp_path / "claude.calls")
    install_fake_cli(bin_dir, "codex", [ANSWER], tmp_path / "codex.calls")
    work_api.end_when_idle = True
    planner = work_api.add_task(agent_id="planner", role="planner", provider="codex")
    worker = work_api.add_task(agent_id="worker", provider="claude", modelLevel="level3")

    # when a runner serves both providers until the cluster ends
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zeroshot_runner",
            "--url",
            work_api.url,
            "--wait",
            "1",
            "--provider",
            "claude,codex",
            "--cluster",
            "c1",
            "--exit-when-done",
            "--concurrency",
            "2",
            "--workspace",
            "worktree",
            "--repo",
            str(repo),
            "--worktrees",
            str(tmp_path / "worktrees"),
        ],
        cwd=REPO,
        env={**os.environ, "ZEROSHOT_WEB_KEY": work_api.key, "PATH": path_with(bin_dir)},
        capture_output=True,
        text=True,
        timeout=60,
    )

    # then each agent ran on its own CLI, inside the cluster's worktree
    assert done.returncode == 0, done.stderr
    assert work_api.tasks[planner].state == "completed"
    assert work_api.tasks[worker].state == "completed"
    (codex_call,) = calls_in(tmp_path / "codex.calls")
    (claude_call,) = calls_in(tmp_path / "claude.calls")
    worktree = str(tmp_path / "worktrees" / "c1")
    assert codex_call["cwd"] == worktree
    assert claude_call["cwd"] == worktree
    assert "opus" in claude_call["argv"]
    assert "[zeroshot-runner] claude: model opus, level3" in work_api.tasks[worker].lines
    # and the worktree is gone, its branch reported to the cluster
    assert not Path(worktree).exists()
    ((cluster, message),) = work_api.messages
    assert cluster == "c1"
    assert message["content"]["data"]["branch"] == "zeroshot/c1"
    assert message["content"]["data"]["commit"] == git(repo, "rev-parse", "zeroshot/c1")
