"""Where a cluster's agents run: the runner's own directory (``--workspace none``), or a git
worktree of the cluster's own (``--workspace worktree --repo PATH [--base REF]``), as zeroshot
runs each cluster in its own worktree.

A worktree is made on the first task of its cluster, on a branch named after it
(``zeroshot/<cluster>``) from ``--base`` (default: the repository's ``HEAD``); every agent of
that cluster runs inside it, so two clusters never see each other's files. Once the cluster
has ended and none of its agents runs here any more, what the agents left uncommitted is
committed on the branch, the worktree is removed and the branch kept: ``close`` hands back the
branch and its head commit for the runner to report. A runner restarted while its cluster runs
finds the worktree (or the branch) again and goes on with it.
"""

from __future__ import annotations

import logging
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

BRANCH_PREFIX = "zeroshot/"
# Who commits what the agents left uncommitted, when the repository names nobody.
_IDENTITY = ("-c", "user.name=zeroshot-runner", "-c", "user.email=runner@zeroshot.invalid")
_GIT_TIMEOUT = 120.0


class WorkspaceError(Exception):
    """A cluster's workspace could not be made or removed."""


@dataclass(frozen=True, slots=True)
class ClosedWorkspace:
    """A removed worktree: the branch that keeps the cluster's work, and its head commit."""

    cluster_id: str
    branch: str
    commit: str
    # Whether the runner committed changes the agents had left uncommitted.
    committed_leftovers: bool


class Workspaces(Protocol):
    """Hands each task the directory its agent runs in."""

    def enter(self, cluster_id: str | None) -> Path | None:
        """The directory for one task of ``cluster_id`` (``None``: the runner's own)."""
        ...

    def leave(self, cluster_id: str | None) -> None:
        """That task has ended."""
        ...

    def open_clusters(self) -> list[str]:
        """Clusters with a workspace no task uses right now."""
        ...

    def close(self, cluster_id: str) -> ClosedWorkspace | None:
        """Remove the cluster's workspace unless a task uses it again (then ``None``)."""
        ...


class NoWorkspaces:
    """``--workspace none``: every agent runs in the runner's own directory."""

    def enter(self, cluster_id: str | None) -> Path | None:
        return None

    def leave(self, cluster_id: str | None) -> None:
        pass

    def open_clusters(self) -> list[str]:
        return []

    def close(self, cluster_id: str) -> ClosedWorkspace | None:
        return None


class WorktreeWorkspaces:
    """``--workspace worktree``: one git worktree and branch per cluster."""

    def __init__(self, *, repo: Path, root: Path, base: str | None = None) -> None:
        self.repo = repo.resolve()
        self.root = root
        self.base = base or "HEAD"
        self._lock = threading.Lock()
        self._users: dict[str, int] = {}
        # One cluster's worktree is made, or removed, by one thread at a time.
        self._cluster_locks: dict[str, threading.Lock] = {}
        top = _git(self.repo, "rev-parse", "--show-toplevel", check=False)
        if top.returncode != 0:
            raise WorkspaceError(f"{repo} is not a git repository: {top.stderr.strip()}")
        base_check = _git(
            self.repo, "rev-parse", "--verify", "--quiet", f"{self.base}^{{commit}}", check=False
        )
        if base_check.returncode != 0:
            raise WorkspaceError(f"--base {self.base}: no such commit in {repo}")

    def branch_for(self, cluster_id: str) -> str:
        """The branch of the cluster's work."""
        return BRANCH_PREFIX + _ref_safe(cluster_id)

    def path_for(self, cluster_id: str) -> Path:
        """The cluster's worktree."""
        return self.root / _ref_safe(cluster_id)

    def enter(self, cluster_id: str | None) -> Path | None:
        if cluster_id is None:
            return None
        with self._lock:
            self._users[cluster_id] = self._users.get(cluster_id, 0) + 1
            cluster_lock = self._cluster_locks.setdefault(cluster_id, threading.Lock())
        try:
            with cluster_lock:
                return self._ensure(cluster_id)
        except BaseException:
            self.leave(cluster_id)
            raise

    def leave(self, cluster_id: str | None) -> None:
        if cluster_id is None:
            return
        with self._lock:
            self._users[cluster_id] = self._users.get(cluster_id, 1) - 1

    def open_clusters(self) -> list[str]:
        with self._lock:
            return [cluster for cluster, users in self._users.items() if users <= 0]

    def close(self, cluster_id: str) -> ClosedWorkspace | None:
        with self._lock:
            if self._users.get(cluster_id, 0) > 0:
                return None
            cluster_lock = self._cluster_locks.setdefault(cluster_id, threading.Lock())
        with cluster_lock:
            with self._lock:
                if self._users.get(cluster_id, 0) > 0:
                    return None
            closed = self._remove(cluster_id)
            with self._lock:
                if self._users.get(cluster_id, 0) <= 0:
                    self._users.pop(cluster_id, None)
            return closed

    def _ensure(self, cluster_id: str) -> Path:
        path = self.path_for(cluster_id)
        branch = self.branch_for(cluster_id)
        if (path / ".git").exists():
            return path
        self.root.mkdir(parents=True, exist_ok=True)
        # A worktree removed by hand leaves its record behind; git refuses to reuse the path.
        _git(self.repo, "worktree", "prune", check=False)
        known = _git(
            self.repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False
        )
        if known.returncode == 0:
            _git(self.repo, "worktree", "add", "--quiet", str(path), branch)
        else:
            _git(self.repo, "worktree", "add", "--quiet", "-b", branch, str(path), self.base)
        log.info("cluster %s: worktree %s on branch %s", cluster_id, path, branch)
        return path

    def _remove(self, cluster_id: str) -> ClosedWorkspace | None:
        path = self.path_for(cluster_id)
        branch = self.branch_for(cluster_id)
        if not (path / ".git").exists():
            return None
        _git(path, "add", "--all")
        leftovers = _git(path, "diff", "--cached", "--quiet", check=False).returncode != 0
        if leftovers:
            named = _git(path, "config", "user.email", check=False).stdout.strip()
            identity = () if named else _IDENTITY
            _git(
                path,
                *identity,
                "commit",
                "--quiet",
                "--no-verify",
                "-m",
                f"zeroshot: work of cluster {cluster_id} left uncommitted by its agents",
            )
        commit = _git(path, "rev-parse", "HEAD").stdout.strip()
        _git(self.repo, "worktree", "remove", "--force", str(path))
        log.info("cluster %s: worktree removed; branch %s at %s", cluster_id, branch, commit)
        return ClosedWorkspace(
            cluster_id=cluster_id, branch=branch, commit=commit, committed_leftovers=leftovers
        )


def _ref_safe(cluster_id: str) -> str:
    # Cluster ids are [A-Za-z0-9][A-Za-z0-9_.-]*; git refuses "..", a trailing "." or ".lock".
    name = re.sub(r"\.{2,}", "-", cluster_id)
    name = re.sub(r"(\.lock)+$", "-lock", name).rstrip(".")
    return name or "cluster"


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise WorkspaceError(f"git {' '.join(args)}: {error}") from error
    if check and done.returncode != 0:
        raise WorkspaceError(f"git {' '.join(args)} in {cwd}: {done.stderr.strip()}")
    return done
