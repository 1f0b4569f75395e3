"""Reads of tasks: one, a cluster's page of them, and each agent's current state."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Q, Subquery, TextField
from django.db.models.functions import Cast, Length, Substr

from ledger.interfaces import (
    ClusterRecord,
    ClusterState,
    NotFound,
    Topic,
    message_latest_by_cluster,
    now_ms,
)
from runs import statements
from runs.models import OPEN_STATES, BufferedTrigger, Runner, Task, TaskState
from runs.records import RunnerRecord, TaskRecord, states_matching

DEFAULT_PAGE = 50
# The characters of each result a list of tasks shows.
RESULT_PREVIEW_CHARS = 200
MAX_PAGE = 500


def task_record(task: Task, *, summary: bool = False) -> TaskRecord:
    """Detach a task from the ORM; a summary's task was read without its result
    (``task_list``)."""
    return TaskRecord(
        id=task.id,
        cluster_id=task.cluster_id,
        agent_id=task.agent_id,
        role=task.role,
        iteration=task.iteration,
        state=task.state,
        trigger_message_id=task.trigger_message_id,
        trigger_topic=task.trigger_topic,
        trigger_sequence=task.trigger_sequence,
        build_id=task.build_id,
        attempts=task.attempts,
        lease_id=task.lease_id,
        lease_expires_at=task.lease_expires_at,
        worker=task.worker,
        created_at=task.created_at,
        available_at=task.available_at,
        claimed_at=task.claimed_at,
        finished_at=task.finished_at,
        result=None if summary else task.result,
        error=task.error,
        usage=task.usage,
        result_chars=getattr(task, "result_chars", None),
        result_preview=getattr(task, "result_preview", None),
        summary=summary,
        trigger_sender=task.trigger_sender,
    )


def task_get(*, task_id: str) -> TaskRecord:
    """One task, or ``NotFound``."""
    task = Task.objects.filter(pk=task_id).first()
    if task is None:
        raise NotFound(f"task {task_id!r} does not exist", details={"task_id": task_id})
    return task_record(task)


def task_list(
    *,
    cluster_id: str,
    agent_id: str | None = None,
    state: str | None = None,
    before: str | None = None,
    limit: int = DEFAULT_PAGE,
) -> list[TaskRecord]:
    """A cluster's tasks, newest first (one query); ``before`` is the last task id of a page."""
    tasks = Task.objects.filter(cluster_id=cluster_id)
    if agent_id:
        tasks = tasks.filter(agent_id=agent_id)
    if state:
        tasks = tasks.filter(state__in=states_matching(state, TaskState.values))
    if before:
        # After the anchor in the page's order (-created_at, -id): tasks made in the same
        # millisecond are told apart by their ids, never shown twice.
        anchor = Subquery(
            Task.objects.filter(pk=before, cluster_id=cluster_id).values("created_at")[:1]
        )
        tasks = tasks.filter(Q(created_at__lt=anchor) | Q(created_at=anchor, id__lt=before))
    # A result may be a mebibyte: a page carries its size and first characters, never it whole.
    as_text = Cast("result", TextField())
    ordered = (
        tasks.defer("result")
        .annotate(
            result_chars=Length(as_text), result_preview=Substr(as_text, 1, RESULT_PREVIEW_CHARS)
        )
        .order_by("-created_at", "-id")[:limit]
    )
    return [task_record(t, summary=True) for t in ordered]


@dataclass(frozen=True, slots=True)
class AgentActivity:
    """What one agent of a cluster is doing: its current task and what waits behind it."""

    agent_id: str
    state: str  # idle, queued, running, failed
    current: TaskRecord | None
    buffered: int
    completed: int
    dropped: int


def agent_activity(*, cluster_id: str, agent_ids: list[str]) -> dict[str, AgentActivity]:
    """Each agent's state from its tasks, and the triggers its buffer holds or dropped (three
    prebuilt statements, ``runs.statements``; none for a cluster without agents).

    The finished tasks are counted in the database, per agent and state with the newest one's
    time, on ``task_agent_queue`` (cluster, agent, state, created_at: it covers the query), as
    ``runs.fleet.agents_at_a_glance`` reads them: a few rows per agent leave it, however many
    tasks the cluster ran. An agent whose newest finished task failed is failed; finished
    tasks of one millisecond count as failed when one of them failed.
    """
    if not agent_ids:
        return {}
    by_agent: dict[str, list[Task]] = {}
    for task in statements.open_tasks(cluster_id):
        by_agent.setdefault(task.agent_id, []).append(task)
    finished: dict[tuple[str, str], int] = {}
    newest_finished: dict[str, tuple[int, str]] = {}
    for agent, state, n, newest in statements.finished_counts(cluster_id):
        finished[(agent, state)] = n
        newest_finished[agent] = max(newest_finished.get(agent, (-1, "")), (newest, state))
    waiting: Counter[tuple[str, bool]] = Counter()
    for agent, dropped, n in statements.buffered_counts(cluster_id):
        waiting[(agent, dropped)] += n
    activity = {}
    for agent_id in agent_ids:
        tasks = by_agent.get(agent_id, [])
        claimed = next((t for t in tasks if t.state == TaskState.CLAIMED), None)
        current = claimed or (tasks[0] if tasks else None)
        if claimed is not None:
            state = "running"
        elif tasks:
            state = "queued"
        elif newest_finished.get(agent_id, (0, ""))[1] == TaskState.FAILED:
            state = "failed"
        else:
            state = "idle"
        activity[agent_id] = AgentActivity(
            agent_id=agent_id,
            state=state,
            current=task_record(current) if current is not None else None,
            # Tasks queued behind the current one only predate the buffer (docs/decisions/0130).
            buffered=max(0, len(tasks) - 1) + waiting[(agent_id, False)],
            completed=finished.get((agent_id, TaskState.COMPLETED), 0),
            dropped=finished.get((agent_id, TaskState.DROPPED), 0) + waiting[(agent_id, True)],
        )
    return activity


@dataclass(frozen=True, slots=True)
class WaitingTrigger:
    """A message waiting in a busy agent's trigger buffer, judged when its task ends."""

    agent_id: str
    message_id: str
    topic: str
    sequence: int
    buffered_at: int


# Waiting triggers a page lists at most (an agent holds up to 200).
WAITING_SHOWN = 200


def triggers_waiting(
    *, cluster_id: str, agent_id: str | None = None, limit: int = WAITING_SHOWN
) -> list[WaitingTrigger]:
    """The triggers the agents' buffers hold, each agent's next to be judged first (one query
    on ``trigger_buffer_order``); dropped ones are counted by ``agent_activity``, not listed."""
    rows = BufferedTrigger.objects.filter(cluster_id=cluster_id, dropped=False)
    if agent_id:
        rows = rows.filter(agent_id=agent_id)
    fields = ("agent_id", "message_id", "topic", "message_sequence", "buffered_at")
    return [
        WaitingTrigger(*row)
        for row in rows.order_by("agent_id", "message_sequence").values_list(*fields)[:limit]
    ]


# Runners listed at most: a fleet is tens of runners; each restart names a new one (host:pid).
RUNNERS_MAX = 500


def runners_seen(*, since: int | None = None, limit: int = RUNNERS_MAX) -> list[RunnerRecord]:
    """The runners that claimed, most recently seen first (``runner_last_seen``), seen at or
    after ``since`` (ms) when given; each with the tasks it holds now (one grouped count over
    the claimed tasks, which ``task_lease_expiry`` leads with)."""
    rows = Runner.objects.order_by("-last_seen_at", "name")
    if since is not None:
        rows = rows.filter(last_seen_at__gte=since)
    runners = list(rows[: max(1, min(limit, RUNNERS_MAX))])
    names = [r.name for r in runners]
    holding = dict(
        Task.objects.filter(state=TaskState.CLAIMED, worker__in=names)
        .values("worker")
        .annotate(n=Count("pk"))
        .values_list("worker", "n")
    )
    return [
        RunnerRecord(
            name=r.name,
            first_seen_at=r.first_seen_at,
            last_seen_at=r.last_seen_at,
            labels=_string_map(r.labels),
            providers=tuple(p for p in r.providers if isinstance(p, str))
            if isinstance(r.providers, list)
            else (),
            holding=holding.get(r.name, 0),
            claimed=r.claimed,
            completed=r.completed,
            failed=r.failed,
        )
        for r in runners
    ]


def runners_seen_count(*, since: int) -> int:
    """How many runners claimed at or after ``since`` (ms)."""
    return Runner.objects.filter(last_seen_at__gte=since).count()


def _string_map(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


# --- whether a cluster can still move (SPEC §7.3, last sentence) ---------------------------------

STALLED = "stalled"
REASON_MAX_CHARS = 300


@dataclass(frozen=True, slots=True)
class ClusterCondition:
    """A cluster's state as an operator should read it: ``stalled`` for a running cluster that
    can no longer move, with the reason a failed or stalled cluster shows."""

    state: str
    reason: str = ""
    # A stalled cluster: since when nothing has happened (ms).
    idle_since: int | None = None

    @property
    def stalled(self) -> bool:
        return self.state == STALLED

    def to_wire(self) -> dict[str, object]:
        return {
            "state": self.state,
            "stalled": self.stalled,
            "reason": self.reason or None,
            "idle_since": self.idle_since,
        }


def cluster_conditions(
    clusters: Sequence[ClusterRecord], *, now: int | None = None
) -> dict[str, ClusterCondition]:
    """Each cluster's condition, in at most two queries whatever the number of clusters.

    A running cluster with agents whose newest message is older than ``CLUSTER_STALL_SECONDS``
    and that holds no open task (queued, claimed, expired: read on the index
    ``task_cluster_state``) is stalled: every agent sits idle and nothing will wake one. A
    failed cluster gives the reason of its ``CLUSTER_FAILED``.
    """
    now = now_ms() if now is None else now
    quiet_before = now - int(settings.CLUSTER_STALL_SECONDS * 1000)
    quiet = {
        c.id: c.last_activity or c.created_at
        for c in clusters
        if c.state == ClusterState.RUNNING
        and c.agents
        and (c.last_activity or c.created_at) < quiet_before
    }
    busy: set[str] = set()
    if quiet:
        busy = set(
            Task.objects.filter(cluster_id__in=list(quiet), state__in=OPEN_STATES)
            .values_list("cluster_id", flat=True)
            .distinct()
        )
    failures = message_latest_by_cluster(
        cluster_ids=[c.id for c in clusters if c.state == ClusterState.FAILED],
        topic=Topic.CLUSTER_FAILED,
    )
    conditions: dict[str, ClusterCondition] = {}
    for cluster in clusters:
        if cluster.id in quiet and cluster.id not in busy:
            minutes = max(1, (now - quiet[cluster.id]) // 60_000)
            conditions[cluster.id] = ClusterCondition(
                state=STALLED,
                reason=(
                    f"every agent has sat idle for {minutes} min with nothing queued, claimed "
                    "or waiting: nothing will wake one"
                ),
                idle_since=quiet[cluster.id],
            )
        elif cluster.id in failures:
            conditions[cluster.id] = ClusterCondition(
                state=cluster.state,
                reason=_failure_reason(failures[cluster.id].data, failures[cluster.id].text),
            )
        else:
            conditions[cluster.id] = ClusterCondition(state=cluster.state)
    return conditions


def _failure_reason(data: object, text: str | None) -> str:
    """``reason: text`` of a ``CLUSTER_FAILED``, cut to ``REASON_MAX_CHARS``."""
    reason = data.get("reason") if isinstance(data, dict) else None
    parts = [str(part) for part in (reason, text) if part]
    joined = " — ".join(parts) or "the cluster failed without saying why"
    if len(joined) > REASON_MAX_CHARS:
        joined = joined[: REASON_MAX_CHARS - 1] + "…"
    return joined
