"""The runner's loop: N slots, each claiming a task, running it through the provider, and
completing or failing it, while a pump per task heartbeats and streams its output.

A watcher thread reads cluster states: with ``exit_when_done`` the runner's cluster every
``watch_interval`` (so the runner exits within a second of its end, however it ended, and
stops the agents still working for it), and every ``workspace_check`` the clusters whose
worktree no task uses right now: an ended one's worktree is removed, its branch and head commit
published on the cluster as a ``WORKSPACE_BRANCH`` message.

Shutdown (``request_stop``, from SIGINT/SIGTERM): no slot claims again; every running agent is
told to stop; each claimed task is failed as retryable at once (so the server hands it to
another worker without waiting for the lease); claims still long-polling are waited for, and a
task they bring back is failed the same way without being started. One task is reported to
the server at most once: complete or fail, never both, and nothing after a 409.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from zeroshot_runner.backoff import Backoff
from zeroshot_runner.client import ApiError, Unavailable, WorkClient
from zeroshot_runner.providers.base import Job, Provider
from zeroshot_runner.records import Claim, Failed, Outcome, ProtocolError
from zeroshot_runner.taskrun import TaskRun
from zeroshot_runner.workspace import ClosedWorkspace, NoWorkspaces, WorkspaceError, Workspaces

log = logging.getLogger(__name__)

# A cluster in one of these states may still hand out work (SPEC §1.2).
ACTIVE_CLUSTER_STATES = frozenset({"initializing", "running", "stopping"})
# How often the main thread looks at stop requests and the slots.
_TICK = 0.05
# The wait between claims while the server is unreachable grows up to this.
_CLAIM_BACKOFF = Backoff(attempts=1, base=1.0, cap=30.0)
# The message that tells a cluster where its work is once its worktree is removed.
WORKSPACE_TOPIC = "WORKSPACE_BRANCH"


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    """What to claim and how to pace the work."""

    worker: str
    cluster: str | None = None
    agents: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    concurrency: int = 1
    wait: float = 10.0
    lease: float = 60.0
    exit_when_done: bool = False
    batch_interval: float = 0.5
    batch_lines: int = 50
    # How long a stopping runner waits for its agents to end before failing their tasks itself.
    stop_grace: float = 10.0
    # With exit_when_done: how often the cluster's state is read.
    watch_interval: float = 0.4
    # How often a cluster whose worktree no task uses is asked whether it has ended.
    workspace_check: float = 2.0
    # Runner pools (issue 19): sent with each claim once the server filters on them.
    claim_labels: tuple[tuple[str, str], ...] = ()
    claim_providers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TaskReport:
    """How one claimed task went; times are ``time.monotonic()`` readings."""

    task_id: str
    agent_id: str
    iteration: int
    # completed | failed | released (claimed while stopping, never started) | lost (409) |
    # unreported (the server stayed unreachable)
    status: str
    error: str | None
    # Output repairs: how often the agent was asked again for a usable answer.
    repairs: int
    claim_sent: float
    claimed: float
    provider_started: float
    provider_ended: float
    finished: float


class Runner:
    """Claims and runs tasks until stopped, or until its cluster has ended."""

    def __init__(
        self,
        *,
        client: WorkClient,
        provider: Provider,
        settings: RunnerSettings,
        observer: Callable[[TaskReport], None] | None = None,
        workspaces: Workspaces | None = None,
    ) -> None:
        self.client = client
        self.provider = provider
        self.settings = settings
        self.observer = observer
        self.workspaces: Workspaces = workspaces or NoWorkspaces()
        # Every worktree removed, in order (what was reported to the clusters).
        self.closed_workspaces: list[ClosedWorkspace] = []
        self.fatal: str | None = None
        # Plain flags: a signal handler may set them while the main thread holds any lock.
        self._stop_requested = False
        self._exit_now = False
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._runs: set[TaskRun] = set()
        self._polling = 0
        # Tasks claimed whose report (to the server, then to the observer) is not out yet: the
        # runner does not end on its cluster's end while one is.
        self._in_hand = 0
        self._watching_ends = threading.Event()

    def request_stop(self) -> None:
        """Stop claiming and fail the tasks in hand; a second call also stops waiting for claims.

        Safe to call from a signal handler.
        """
        if self._stop_requested:
            self._exit_now = True
        self._stop_requested = True

    def run(self) -> int:
        """Work until stopped or done; 0 on a clean end, 1 when the server refused the runner or
        a slot crashed (so that a supervisor restarts it)."""
        if self.settings.exit_when_done:
            self._check_cluster_ended()
        slots = [
            threading.Thread(target=self._guarded_slot, name=f"slot-{n}", daemon=True)
            for n in range(1, self.settings.concurrency + 1)
        ]
        for slot in slots:
            slot.start()
        watcher = threading.Thread(target=self._watch, name="watcher", daemon=True)
        watcher.start()
        grace_ends: float | None = None
        while not self._exit_now:
            alive = [slot for slot in slots if slot.is_alive()]
            if not alive:
                break
            if self._done.is_set():
                with self._lock:
                    in_hand = self._in_hand
                # Claims still polling an ended cluster bring nothing back: not waited for.
                if not in_hand:
                    break
            if self._stop_requested and not self._stopping.is_set():
                self._begin_stop()
            if self._stopping.is_set() and grace_ends is None:
                grace_ends = time.monotonic() + self.settings.stop_grace
            if grace_ends is not None and time.monotonic() >= grace_ends:
                self._fail_runs_left("the runner stopped before the task finished")
                # A slot whose agent ignores the stop (a request in flight) is not waited for:
                # its task is reported. Slots still polling a claim are.
                with self._lock:
                    abandoned = sum(1 for run in self._runs if run.reported)
                if abandoned == len(alive):
                    break
            time.sleep(_TICK)
        self._watching_ends.set()
        self._fail_runs_left("the runner stopped before the task finished")
        watcher.join(self.settings.wait + 5.0)
        self._close_ended_workspaces()
        if self.fatal is not None:
            log.error("%s", self.fatal)
            return 1
        return 0

    def _begin_stop(self) -> None:
        with self._lock:
            self._stopping.set()
            runs = list(self._runs)
            polling = self._polling
        for run in runs:
            run.stop.set()
        waiting = (
            f"; {polling} pending claim(s) answer within {self.settings.wait:g} s "
            "(signal again to exit without them)"
            if polling
            else ""
        )
        log.info("stopping: failing %d task(s) in hand as retryable%s", len(runs), waiting)

    def _fail_runs_left(self, error: str) -> None:
        with self._lock:
            runs = list(self._runs)
        for run in runs:
            run.stop.set()
            run.finish_unless_busy(Failed(error=error, retryable=True))

    def _give_up(self, message: str) -> None:
        self.fatal = message
        self._stop_requested = True

    def _guarded_slot(self) -> None:
        try:
            self._slot()
        except BaseException as error:
            # A bug, or input nothing foresaw: the runner ends with status 1 instead of working
            # on with a slot less and exiting 0.
            log.exception("a slot crashed")
            self._give_up(f"a slot crashed: {error!r}")

    def _slot(self) -> None:
        failures = 0
        while not (self._stopping.is_set() or self._done.is_set() or self._stop_requested):
            claim_sent = time.monotonic()
            try:
                claim = self._claim()
            except (Unavailable, ApiError) as error:
                if isinstance(error, ApiError) and error.status < 500:
                    # 401, 403, 404, 422: a wrong key, cluster or filter; asking again won't help.
                    self._give_up(f"the server refused to hand out tasks: {error}")
                    return
                delay = _CLAIM_BACKOFF.delay(min(failures, 10))
                failures += 1
                log.warning("claim failed: %s; asking again in %.1f s", error, delay)
                self._stopping.wait(delay)
                continue
            except ProtocolError as error:
                self._give_up(f"cannot read the server's claim answer: {error}")
                return
            except RuntimeError:
                # The runner left this claim polling an ended cluster and closed its client.
                if self._done.is_set():
                    return
                raise
            failures = 0
            if claim is None:
                self._check_cluster_ended()
                continue
            try:
                self._execute(claim, claim_sent=claim_sent, claimed=time.monotonic())
            finally:
                with self._lock:
                    self._in_hand -= 1

    def _claim(self) -> Claim | None:
        with self._lock:
            self._polling += 1
        claim = None
        try:
            claim = self.client.claim(
                worker=self.settings.worker,
                wait=self.settings.wait,
                lease=self.settings.lease,
                cluster=self.settings.cluster,
                agents=self.settings.agents,
                roles=self.settings.roles,
                labels=dict(self.settings.claim_labels),
                providers=self.settings.claim_providers,
                interrupt=self._stopping,
            )
            return claim
        finally:
            with self._lock:
                self._polling -= 1
                # In hand from the moment it is claimed, so that one brought back just as
                # the cluster ends is still reported (released) before the runner exits.
                if claim is not None:
                    self._in_hand += 1

    def _check_cluster_ended(self) -> None:
        cluster = self.settings.cluster
        if not self.settings.exit_when_done or cluster is None:
            return
        try:
            state = self.client.cluster_state(cluster)
        except Unavailable as error:
            log.warning("cannot read the state of cluster %s: %s", cluster, error)
            return
        except (ApiError, ProtocolError) as error:
            self._give_up(f"cannot read the state of cluster {cluster}: {error}")
            return
        if state not in ACTIVE_CLUSTER_STATES and not self._done.is_set():
            log.info("cluster %s is %s: stopping its agents and exiting", cluster, state)
            self._done.set()
            # The cluster's end made the tasks in hand moot: their agents are stopped.
            with self._lock:
                runs = list(self._runs)
            for run in runs:
                run.stop.set()

    def _watch(self) -> None:
        """Read cluster states in the background (see the module's docstring)."""
        next_workspace_check = time.monotonic() + self.settings.workspace_check
        while not self._watching_ends.wait(self.settings.watch_interval):
            if self.settings.exit_when_done and not self._done.is_set():
                self._check_cluster_ended()
            if time.monotonic() >= next_workspace_check:
                next_workspace_check = time.monotonic() + self.settings.workspace_check
                self._close_ended_workspaces()

    def _close_ended_workspaces(self) -> None:
        for cluster in self.workspaces.open_clusters():
            try:
                state = self.client.cluster_state(cluster)
            except ApiError as error:
                if error.status != 404:
                    log.warning("cannot read the state of cluster %s: %s", cluster, error)
                    continue
                # A deleted cluster has ended too: its work is kept on the branch.
                state = "deleted"
            except (Unavailable, ProtocolError) as error:
                log.warning("cannot read the state of cluster %s: %s", cluster, error)
                continue
            if state in ACTIVE_CLUSTER_STATES:
                continue
            try:
                closed = self.workspaces.close(cluster)
            except WorkspaceError as error:
                log.error("cluster %s: its worktree could not be removed: %s", cluster, error)
                continue
            if closed is not None:
                self.closed_workspaces.append(closed)
                self._report_branch(closed)

    def _report_branch(self, closed: ClosedWorkspace) -> None:
        short = closed.commit[:12]
        try:
            self.client.publish(
                closed.cluster_id,
                {
                    "topic": WORKSPACE_TOPIC,
                    "sender": self.settings.worker[:128] or "runner",
                    "content": {
                        "text": f"The work of cluster {closed.cluster_id} is on branch "
                        f"{closed.branch} at {short}",
                        "data": {
                            "branch": closed.branch,
                            "commit": closed.commit,
                            "worker": self.settings.worker,
                            "committedLeftovers": closed.committed_leftovers,
                        },
                    },
                    "idempotency_key": f"workspace-branch:{closed.branch}:{closed.commit}",
                },
            )
        except (Unavailable, ApiError) as error:
            log.warning(
                "cluster %s: branch %s at %s not reported: %s",
                closed.cluster_id,
                closed.branch,
                short,
                error,
            )

    def _execute(self, claim: Claim, *, claim_sent: float, claimed: float) -> None:
        run = TaskRun(
            claim,
            client=self.client,
            lease=self.settings.lease,
            batch_interval=self.settings.batch_interval,
            batch_lines=self.settings.batch_lines,
        )
        with self._lock:
            # Checked under the lock that _begin_stop sets the event under: a task claimed
            # while the runner stops, or after its cluster ended, is never started.
            stopping = self._stopping.is_set() or self._done.is_set()
            if not stopping:
                self._runs.add(run)
        if stopping:
            status = run.finish(
                Failed(error="the runner stopped before starting the task", retryable=True)
            )
            self._report(
                run,
                "released" if status == "failed" else status,
                run.error_sent,
                claim_sent,
                claimed,
                claimed,
                claimed,
            )
            return
        log.info("task %s: agent %s, iteration %d", claim.task_id, claim.agent_id, claim.iteration)
        run.start_pump()
        provider_started = time.monotonic()
        outcome = self._run_in_workspace(claim, run)
        provider_ended = time.monotonic()
        if isinstance(outcome, Failed) and self._stopping.is_set():
            outcome = Failed(error=outcome.error, retryable=True)
        status = run.finish(outcome)
        with self._lock:
            self._runs.discard(run)
        failure = run.error_sent or (outcome.error if isinstance(outcome, Failed) else None)
        self._report(
            run,
            status,
            failure,
            claim_sent,
            claimed,
            provider_started,
            provider_ended,
            repairs=outcome.repairs,
        )

    def _run_in_workspace(self, claim: Claim, run: TaskRun) -> Outcome:
        try:
            workdir = self.workspaces.enter(claim.cluster_id)
        except WorkspaceError as error:
            log.error("task %s: %s", claim.task_id, error)
            return Failed(
                error=f"the cluster's workspace could not be made: {error}", retryable=True
            )
        try:
            return self.provider.run(
                Job(claim=claim, emit=run.emit, stop=run.stop, workdir=workdir)
            )
        except Exception as error:  # a provider bug must not take the slot down with it
            log.exception("task %s: the provider failed", claim.task_id)
            return Failed(error=f"the provider failed: {error!r}", retryable=True)
        finally:
            self.workspaces.leave(claim.cluster_id)

    def _report(
        self,
        run: TaskRun,
        status: str,
        error: str | None,
        claim_sent: float,
        claimed: float,
        provider_started: float,
        provider_ended: float,
        *,
        repairs: int = 0,
    ) -> None:
        finished = time.monotonic()
        claim = run.claim
        took = finished - claimed
        if status == "completed":
            log.info("task %s: completed in %.2f s", claim.task_id, took)
        else:
            log.warning("task %s: %s after %.2f s: %s", claim.task_id, status, took, error)
        if self.observer is not None:
            self.observer(
                TaskReport(
                    task_id=claim.task_id,
                    agent_id=claim.agent_id,
                    iteration=claim.iteration,
                    status=status,
                    error=error,
                    repairs=repairs,
                    claim_sent=claim_sent,
                    claimed=claimed,
                    provider_started=provider_started,
                    provider_ended=provider_ended,
                    finished=finished,
                )
            )
