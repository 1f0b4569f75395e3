"""Reads across clusters for the fleet page: agents at work, the queue, and what tokens cost.

Each read is one grouped query over an index of ``Task``, whatever the number of clusters: the
page never asks per cluster or per agent (docs/decisions/0140-fleet-page.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.db.models import Count, Max, Min, Q, Sum

from runs.models import OPEN_STATES, Task, TaskState, UsageDay
from runs.records import TaskRecord
from runs.selectors import task_record

DAY_MS = 86_400_000
# Days of usage the fleet page shows, today included.
USAGE_DAYS = 7
# Rows of usage at most (day x model x agent): past it the oldest are left out and counted.
USAGE_ROWS_MAX = 200
QUEUED_STATES = (TaskState.QUEUED, TaskState.EXPIRED)
FINISHED_STATES = (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED, TaskState.DROPPED)


@dataclass(frozen=True, slots=True)
class AgentGlance:
    """One agent of a cluster as the fleet page shows it."""

    agent_id: str
    state: str  # running, queued, failed, idle
    queued: int
    oldest_queued_at: int | None
    # The task it runs, else the oldest it waits for; "" with none open.
    current_task_id: str = ""


@dataclass(frozen=True, slots=True)
class ClusterAgents:
    """The agents of one cluster and its oldest task still waiting for a runner."""

    agents: tuple[AgentGlance, ...]
    oldest_queued_at: int | None
    oldest_queued_agent: str
    oldest_queued_task_id: str


def agents_at_a_glance(
    *, agents_by_cluster: Mapping[str, Sequence[str]]
) -> dict[str, ClusterAgents]:
    """Each agent's state in some clusters, from one grouped query over ``task_agent_queue``
    (cluster, agent, state, created_at: it covers the query, no table row is read), and the
    task each one runs or waits for (one more, over the open tasks only).

    The same reading as ``runs.selectors.agent_activity``: running with a claimed task, queued
    with a waiting one, failed when its newest finished task failed, else idle.
    """
    if not agents_by_cluster:
        return {}
    rows = (
        Task.objects.filter(cluster_id__in=list(agents_by_cluster))
        .values_list("cluster_id", "agent_id", "state")
        .annotate(n=Count("*"), oldest=Min("created_at"), newest=Max("created_at"))
        .order_by()
    )
    counts: dict[tuple[str, str], dict[str, tuple[int, int, int]]] = defaultdict(dict)
    for cluster_id, agent_id, state, n, oldest, newest in rows:
        counts[(cluster_id, agent_id)][state] = (n, oldest, newest)
    current = _current_tasks(list(agents_by_cluster))
    glance = {}
    for cluster_id, agent_ids in agents_by_cluster.items():
        agents = tuple(
            _agent(
                agent_id,
                counts.get((cluster_id, agent_id), {}),
                current.get((cluster_id, agent_id), ""),
            )
            for agent_id in agent_ids
        )
        waiting = [a for a in agents if a.oldest_queued_at is not None]
        oldest = min(waiting, key=lambda a: (a.oldest_queued_at, a.agent_id), default=None)
        glance[cluster_id] = ClusterAgents(
            agents=agents,
            oldest_queued_at=oldest.oldest_queued_at if oldest else None,
            oldest_queued_agent=oldest.agent_id if oldest else "",
            oldest_queued_task_id=oldest.current_task_id
            if oldest and oldest.state == "queued"
            else "",
        )
    return glance


# Open tasks read for their ids at most: one per agent is the rule, a buffer the exception.
OPEN_TASKS_MAX = 2000


def _current_tasks(cluster_ids: list[str]) -> dict[tuple[str, str], str]:
    """Each agent's claimed task, else its oldest open one (one query over
    ``task_agent_queue``, bounded)."""
    rows = (
        Task.objects.filter(cluster_id__in=cluster_ids, state__in=OPEN_STATES)
        .order_by("created_at", "id")
        .values_list("id", "cluster_id", "agent_id", "state")[:OPEN_TASKS_MAX]
    )
    current: dict[tuple[str, str], str] = {}
    for task_id, cluster_id, agent_id, state in rows:
        key = (cluster_id, agent_id)
        if state == TaskState.CLAIMED or key not in current:
            current[key] = task_id
    return current


def _agent(
    agent_id: str, by_state: Mapping[str, tuple[int, int, int]], current: str
) -> AgentGlance:
    queued = [by_state[s] for s in QUEUED_STATES if s in by_state]
    finished = [(by_state[s][2], s) for s in FINISHED_STATES if s in by_state]
    if TaskState.CLAIMED in by_state:
        state = "running"
    elif queued:
        state = "queued"
    elif finished and max(finished)[1] == TaskState.FAILED:
        state = "failed"
    else:
        state = "idle"
    return AgentGlance(
        agent_id=agent_id,
        state=state,
        queued=sum(n for n, _, _ in queued),
        oldest_queued_at=min((oldest for _, oldest, _ in queued), default=None),
        current_task_id=current,
    )


@dataclass(frozen=True, slots=True)
class QueueRow:
    """The open tasks of one agent id in one pool (a set of cluster labels)."""

    pool: tuple[tuple[str, str], ...]
    agent_id: str
    queued: int
    running: int
    clusters: int
    oldest_queued_at: int | None


def task_queue() -> list[QueueRow]:
    """The open tasks of every cluster by pool and agent, the longest waiting first: one
    grouped query over the open tasks (``task_lease_expiry``, state first), each joined to its
    cluster by primary key for its labels."""
    waiting = Q(state__in=QUEUED_STATES)
    rows = (
        Task.objects.filter(state__in=OPEN_STATES)
        .values_list("cluster__labels", "agent_id")
        .annotate(
            queued=Count("pk", filter=waiting),
            running=Count("pk", filter=Q(state=TaskState.CLAIMED)),
            oldest=Min("created_at", filter=waiting),
            clusters=Count("cluster_id", distinct=True),
        )
        .order_by()
    )
    groups: dict[tuple[tuple[tuple[str, str], ...], str], _QueueGroup] = {}
    # Two label sets that differ only in their keys' order are one pool.
    for labels, agent_id, queued, running, oldest, clusters in rows:
        group = groups.setdefault((_pool(labels), agent_id), _QueueGroup())
        group.queued += queued
        group.running += running
        group.clusters += clusters
        if oldest is not None and (group.oldest is None or oldest < group.oldest):
            group.oldest = oldest
    queue = [
        QueueRow(
            pool=pool,
            agent_id=agent_id,
            queued=g.queued,
            running=g.running,
            clusters=g.clusters,
            oldest_queued_at=g.oldest,
        )
        for (pool, agent_id), g in groups.items()
    ]
    never = 2**63
    return sorted(
        queue,
        key=lambda q: (
            q.oldest_queued_at if q.oldest_queued_at is not None else never,
            q.pool,
            q.agent_id,
        ),
    )


@dataclass
class _QueueGroup:
    queued: int = 0
    running: int = 0
    oldest: int | None = None
    clusters: int = 0


def _pool(labels: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(labels, dict):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


@dataclass(frozen=True, slots=True)
class UsageRow:
    """What one agent id on one model reported for the tasks it completed on one UTC day."""

    day: int  # days since the epoch
    model: str  # "" when the runner did not say
    agent_id: str
    tasks: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None

    @property
    def day_ms(self) -> int:
        return self.day * DAY_MS


@dataclass(frozen=True, slots=True)
class UsageByDay:
    """Reported usage of the last days: rows newest day first, and how many were left out."""

    rows: tuple[UsageRow, ...]
    since: int
    left_out: int = 0

    def totals(self) -> list[tuple[int, int, int, float | None]]:
        """Each day's (day ms, input tokens, output tokens, cost), newest first."""
        days: dict[int, list[float]] = {}
        cost_known: dict[int, bool] = {}
        for row in self.rows:
            day = days.setdefault(row.day_ms, [0, 0, 0.0])
            day[0] += row.input_tokens
            day[1] += row.output_tokens
            if row.cost_usd is not None:
                day[2] += row.cost_usd
                cost_known[row.day_ms] = True
        return [
            (ms, int(t[0]), int(t[1]), t[2] if cost_known.get(ms) else None)
            for ms, t in sorted(days.items(), reverse=True)
        ]


def usage_by_day(*, now: int, days: int = USAGE_DAYS) -> UsageByDay:
    """Billed tokens and cost per UTC day, model and agent, as runners reported them when
    their tasks completed: one grouped query over the per-day sums (``usage_day_once``),
    never over the tasks themselves."""
    first_day = now // DAY_MS - (days - 1)
    rows = (
        UsageDay.objects.filter(day__gte=first_day)
        .values("day", "model", "agent_id")
        .annotate(
            n=Sum("tasks"),
            inputs=Sum("input_tokens"),
            outputs=Sum("output_tokens"),
            cost=Sum("cost_usd"),
        )
        .order_by("-day", "model", "agent_id")
    )
    shaped = [
        UsageRow(
            day=r["day"],
            model=r["model"],
            agent_id=r["agent_id"],
            tasks=r["n"],
            input_tokens=r["inputs"],
            output_tokens=r["outputs"],
            cost_usd=r["cost"],
        )
        for r in rows
    ]
    return UsageByDay(
        rows=tuple(shaped[:USAGE_ROWS_MAX]),
        since=first_day * DAY_MS,
        left_out=max(0, len(shaped) - USAGE_ROWS_MAX),
    )


@dataclass(frozen=True, slots=True)
class TaskTrace:
    """One task and the ids of the messages its completion published."""

    task: TaskRecord
    completion_ids: tuple[str, ...]


def task_trace_get(*, task_id: str) -> TaskTrace | None:
    """One task with what its completion published (one query), or None."""
    row = Task.objects.filter(pk=task_id).first()
    if row is None:
        return None
    ids = row.completion_messages if isinstance(row.completion_messages, list) else []
    return TaskTrace(task=task_record(row), completion_ids=tuple(str(i) for i in ids))
