"""``--workspace worktree``: a git worktree and branch per cluster, with a real repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.runner.helpers import agent_script, wait_until
from tests.runner.test_worker import runner_on
from tests.runner.work_api_fake import FakeWorkApi
from zeroshot_runner.providers.command import CommandProvider
from zeroshot_runner.workspace import WorkspaceError, WorktreeWorkspaces

CLUSTERS = ("alpha-1", "beta-2")
# The worker writes the shared file, waits until every worker has written, and checks that
# the file is still its own; the validator reads it.
AGENT = """
    import json, os, pathlib, sys, time
    sys.stdin.read()
    cluster = os.environ["ZEROSHOT_CLUSTER_ID"]
    shared = pathlib.Path("shared.txt")
    if os.environ["ZEROSHOT_AGENT_ROLE"] == "worker":
        shared.write_text(f"work of {{cluster}}\\n")
        gate = pathlib.Path({gate!r})
        (gate / cluster).touch()
        deadline = time.monotonic() + 20
        while len(list(gate.iterdir())) < {workers} and time.monotonic() < deadline:
            time.sleep(0.01)
        mine = shared.read_text() == f"work of {{cluster}}\\n"
        print(json.dumps({{"summary": "wrote", "still_mine": mine}}))
    else:
        print(json.dumps({{"seen": shared.read_text(), "cwd": os.getcwd()}}))
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "--quiet", "--initial-branch=main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.com")
    (path / "shared.txt").write_text("base\n")
    (path / "README.md").write_text("# Demo\n")
    git(path, "add", "--all")
    git(path, "commit", "--quiet", "-m", "base")
    return path


def test_two_clusters_on_one_runner_each_work_in_their_own_worktree_and_branch(
    work_api: FakeWorkApi, repo: Path, tmp_path: Path
) -> None:
    # given two running clusters and a runner with four slots, a worktree per cluster
    for cluster in CLUSTERS:
        work_api.cluster_states[cluster] = "running"
    gate = tmp_path / "gate"
    gate.mkdir()
    provider = CommandProvider(
        command=agent_script(tmp_path, AGENT.format(gate=str(gate), workers=len(CLUSTERS))),
        default_timeout=30.0,
        kill_grace=0.5,
    )
    root = tmp_path / "worktrees"
    workspaces = WorktreeWorkspaces(repo=repo, root=root)
    base = git(repo, "rev-parse", "HEAD")

    with runner_on(
        work_api, provider, concurrency=4, workspaces=workspaces, workspace_check=0.1
    ) as runner:
        # when each cluster's worker writes the same file, at the same time
        workers = {c: work_api.add_task(agent_id="worker", cluster=c) for c in CLUSTERS}
        assert wait_until(
            lambda: all(work_api.tasks[t].state == "completed" for t in workers.values())
        )
        # and then each cluster's validator reads it
        validators = {
            c: work_api.add_task(agent_id="validator", role="validator", cluster=c)
            for c in CLUSTERS
        }
        assert wait_until(
            lambda: all(work_api.tasks[t].state == "completed" for t in validators.values())
        )
        # and both clusters end
        for cluster in CLUSTERS:
            work_api.cluster_states[cluster] = "completed"
        assert wait_until(lambda: len(work_api.messages) == len(CLUSTERS))
        runner.stop()

    for cluster in CLUSTERS:
        branch = f"zeroshot/{cluster}"
        # then neither worker ever saw the other's file, and each validator saw its worker's
        assert work_api.tasks[workers[cluster]].result["still_mine"] is True
        seen = work_api.tasks[validators[cluster]].result
        assert seen["seen"] == f"work of {cluster}\n"
        assert seen["cwd"] == str(root / cluster)
        # and the branch holds only its own change, on top of the base
        assert git(repo, "show", f"{branch}:shared.txt") == f"work of {cluster}"
        assert git(repo, "diff", "--name-only", base, branch) == "shared.txt"
        # and the cluster was told where its work is
        (message,) = [body for c, body in work_api.messages if c == cluster]
        assert message["topic"] == "WORKSPACE_BRANCH"
        assert message["sender"] == "test-runner"
        assert message["content"]["data"]["branch"] == branch
        assert message["content"]["data"]["commit"] == git(repo, "rev-parse", branch)
        assert message["content"]["data"]["committedLeftovers"] is True
        assert message["idempotency_key"]
    # and both worktrees are gone; the repository's own checkout was never touched
    assert not (root / CLUSTERS[0]).exists()
    assert not (root / CLUSTERS[1]).exists()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert (repo / "shared.txt").read_text() == "base\n"
    assert git(repo, "status", "--porcelain") == ""
    assert sorted(w.cluster_id for w in runner.runner.closed_workspaces) == sorted(CLUSTERS)


def test_a_worktree_is_kept_while_its_cluster_runs_and_found_again(
    repo: Path, tmp_path: Path
) -> None:
    workspaces = WorktreeWorkspaces(repo=repo, root=tmp_path / "worktrees")
    path = workspaces.enter("gamma")
    assert path is not None
    (path / "note.txt").write_text("half done\n")
    workspaces.leave("gamma")

    # a runner started again goes on in the same worktree, with what was left there
    again = WorktreeWorkspaces(repo=repo, root=tmp_path / "worktrees")
    assert again.enter("gamma") == path
    assert (path / "note.txt").read_text() == "half done\n"
    # and a cluster in use is not closed
    assert again.close("gamma") is None
    again.leave("gamma")
    closed = again.close("gamma")
    assert closed is not None
    assert closed.branch == "zeroshot/gamma"
    assert git(repo, "show", "zeroshot/gamma:note.txt") == "half done"

    # a branch left from before gets a new worktree on it
    assert again.enter("gamma") == path
    assert (path / "note.txt").exists()


def test_a_path_that_is_not_a_repository_or_an_unknown_base_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError):
        WorktreeWorkspaces(repo=tmp_path, root=tmp_path / "w")


def test_an_unknown_base_is_refused(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError):
        WorktreeWorkspaces(repo=repo, root=tmp_path / "w", base="no-such-ref")


def test_a_deleted_clusters_worktree_is_removed_and_its_branch_kept(
    work_api: FakeWorkApi, repo: Path, tmp_path: Path
) -> None:
    work_api.cluster_states["doomed"] = "running"
    provider = CommandProvider(
        command=agent_script(tmp_path, 'import sys; sys.stdin.read(); print("{}")'),
        default_timeout=30.0,
    )
    workspaces = WorktreeWorkspaces(repo=repo, root=tmp_path / "worktrees")
    with runner_on(work_api, provider, workspaces=workspaces, workspace_check=0.1) as runner:
        task = work_api.add_task(cluster="doomed")
        assert wait_until(lambda: work_api.tasks[task].state == "completed")
        assert (tmp_path / "worktrees" / "doomed").exists()
        # when the cluster is deleted (the server answers 404)
        del work_api.cluster_states["doomed"]
        del work_api.tasks[task]
        assert wait_until(lambda: not (tmp_path / "worktrees" / "doomed").exists())
        runner.stop()
    assert git(repo, "rev-parse", "--verify", "zeroshot/doomed")
