"""Queuing tasks for triggered agents, the buffers of busy agents' triggers, and cancelling
what a cluster's end leaves open."""

from __future__ import annotations

import secrets
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Protocol

from django.db.models import Count

from context.agents import AgentSpec
from ledger import interfaces as ledger
from ledger.interfaces import ClusterWriter, MessageDraft, Topic
from runs import lifecycle
from runs.models import BufferedTrigger, Task, TaskState
from runs.states import TaskEvent, tasks_move

# Triggers kept while an agent is busy (SPEC §7.3); past it the oldest waiting one is dropped.
BUFFER_LIMIT = 200


class TriggerRef(Protocol):
    """The message that triggers a task: a ``MessageRecord`` or what a buffer row keeps of it."""

    @property
    def id(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def sequence(self) -> int: ...


def task_queue(*, writer: ClusterWriter, agent: AgentSpec, message: TriggerRef) -> int:
    """Queue a task for ``agent`` triggered by ``message``; 1 when queued, 0 when not.

    Runs inside the pipeline's transaction. A message that already queued this agent's task is
    not queued again; past ``maxIterations`` the cluster fails instead (SPEC §7.3). The trigger
    stage queues a task only for an idle agent: a busy one's triggers wait in its buffer.
    """
    agent_id = agent.id
    tasks = Task.objects.filter(cluster_id=writer.cluster_id, agent_id=agent_id)
    if tasks.filter(trigger_message_id=message.id).exists():
        return 0
    iteration = tasks.count() + 1
    limit = agent.limits.max_iterations
    if iteration > limit:
        _fail_cluster(writer, agent=agent, iteration=iteration, limit=limit)
        return 0
    now = ledger.now_ms()
    Task.objects.create(
        id=f"task_{secrets.token_hex(16)}",
        cluster_id=writer.cluster_id,
        agent_id=agent_id,
        role=agent.role,
        provider=(agent.provider or "")[:64],
        iteration=iteration,
        state=TaskState.QUEUED,
        trigger_message_id=message.id,
        trigger_topic=message.topic,
        trigger_sequence=message.sequence,
        created_at=now,
        available_at=now,
    )
    return 1


# --- the trigger buffer (SPEC §7.1, §7.3; docs/decisions/0130) ---------------------------------


@dataclass(frozen=True, slots=True)
class Buffered:
    """A message waiting in an agent's buffer; ``row`` is None until the pipeline stores it."""

    agent_id: str
    id: str
    topic: str
    sequence: int
    row: int | None = None


@dataclass
class AgentTurns:
    """Where each agent of a cluster stands for its triggers, as of the pipeline's cursor.

    ``busy``: the agent's tasks that have not ended for its triggers (queued, claimed, or ended
    after the cursor); ``runs``: how many tasks it has had (``agent.iteration``); ``buffered``:
    the messages waiting for it, oldest first.
    """

    busy: dict[str, set[str]] = field(default_factory=dict)
    runs: Counter[str] = field(default_factory=Counter)
    buffered: dict[str, deque[Buffered]] = field(default_factory=dict)


def agent_turns(*, cluster_id: str) -> AgentTurns:
    """Each agent's turn as the trigger stage left it (three indexed queries)."""
    turns = AgentTurns()
    tasks = Task.objects.filter(cluster_id=cluster_id)
    unsettled = tasks.filter(settled_sequence__isnull=True).exclude(
        state__in=(TaskState.CANCELLED, TaskState.DROPPED)
    )
    for agent_id, task_id in unsettled.values_list("agent_id", "id"):
        turns.busy.setdefault(agent_id, set()).add(task_id)
    counts = tasks.values("agent_id").annotate(n=Count("id")).values_list("agent_id", "n")
    turns.runs.update(dict(counts))
    waiting = BufferedTrigger.objects.filter(cluster_id=cluster_id, dropped=False).order_by(
        "agent_id", "message_sequence"
    )
    for row in waiting.values_list("agent_id", "message_id", "topic", "message_sequence", "id"):
        agent_id, message_id, topic, sequence, row_id = row
        turns.buffered.setdefault(agent_id, deque()).append(
            Buffered(agent_id=agent_id, id=message_id, topic=topic, sequence=sequence, row=row_id)
        )
    return turns


@dataclass
class BufferWrites:
    """What a batch does to the buffers and to the ends of tasks, written with its cursor."""

    stored: list[Buffered] = field(default_factory=list)  # new rows, waiting
    stored_dropped: list[Buffered] = field(default_factory=list)  # new rows dropped at once
    judged: list[int] = field(default_factory=list)  # stored rows whose logic ran
    dropped: list[int] = field(default_factory=list)  # stored rows let go
    settled: dict[str, int] = field(default_factory=dict)  # task id -> ending sequence

    def __bool__(self) -> bool:
        return bool(
            self.stored or self.stored_dropped or self.judged or self.dropped or self.settled
        )

    def apply(self, *, cluster_id: str, running: bool) -> None:
        """Store, drop and delete buffer rows, and mark the tasks that ended (a few queries)."""
        for task_id, sequence in self.settled.items():
            Task.objects.filter(pk=task_id, settled_sequence__isnull=True).update(
                settled_sequence=sequence
            )
        if not running:
            return  # tasks_cancel cleared the buffers: nothing waits in a cluster that ended
        if self.judged:
            BufferedTrigger.objects.filter(cluster_id=cluster_id, pk__in=self.judged).delete()
        if self.dropped:
            BufferedTrigger.objects.filter(cluster_id=cluster_id, pk__in=self.dropped).update(
                dropped=True
            )
        now = ledger.now_ms()
        rows = [
            BufferedTrigger(
                cluster_id=cluster_id,
                agent_id=b.agent_id,
                message_id=b.id,
                message_sequence=b.sequence,
                topic=b.topic,
                buffered_at=now,
                dropped=dropped,
            )
            for stored, dropped in ((self.stored, False), (self.stored_dropped, True))
            for b in stored
        ]
        if rows:
            BufferedTrigger.objects.bulk_create(rows, ignore_conflicts=True)


def buffer_push(turns: AgentTurns, writes: BufferWrites, entry: Buffered) -> None:
    """Keep ``entry`` at the end of its agent's buffer; past ``BUFFER_LIMIT`` the oldest waiting
    one is dropped and counted (zeroshot's ``bufferMessage``)."""
    waiting = turns.buffered.setdefault(entry.agent_id, deque())
    while len(waiting) >= BUFFER_LIMIT:
        oldest = waiting.popleft()
        if oldest.row is not None:
            writes.dropped.append(oldest.row)
        else:
            writes.stored.remove(oldest)
            writes.stored_dropped.append(oldest)
    waiting.append(entry)
    writes.stored.append(entry)


def buffer_pop(turns: AgentTurns, writes: BufferWrites, agent_id: str) -> Buffered | None:
    """The oldest message waiting for ``agent_id``, taken out to be judged."""
    waiting = turns.buffered.get(agent_id)
    if not waiting:
        return None
    entry = waiting.popleft()
    if entry.row is not None:
        writes.judged.append(entry.row)
    else:
        writes.stored.remove(entry)
    return entry


def tasks_cancel(*, cluster_id: str, reason: str) -> int:
    """Cancel every open task of a cluster (it stopped, completed or failed), and let go of the
    triggers its agents' buffers held: none of them will be judged."""
    tasks = Task.objects.filter(cluster_id=cluster_id)
    BufferedTrigger.objects.filter(cluster_id=cluster_id).delete()
    return tasks_move(tasks, TaskEvent.CANCEL, now=ledger.now_ms(), error=reason)


def _fail_cluster(writer: ClusterWriter, *, agent: AgentSpec, iteration: int, limit: int) -> None:
    """``MAX_ITERATIONS_REACHED`` and ``CLUSTER_FAILED``: the agent would run once too often."""
    agent_id, role = agent.id, agent.role
    reached = MessageDraft(
        topic=lifecycle.LIFECYCLE,
        sender=agent_id,
        content={
            "text": f"{agent_id}: MAX_ITERATIONS_REACHED",
            "data": {
                "event": "MAX_ITERATIONS_REACHED",
                "agent": agent_id,
                "role": role,
                "iteration": iteration,
                "maxIterations": limit,
            },
        },
    )
    failed = MessageDraft(
        topic=Topic.CLUSTER_FAILED,
        sender="system",
        content={
            "text": f"Cluster failed: {agent_id} reached its {limit} iterations",
            "data": {"reason": "max_iterations", "agent": agent_id, "maxIterations": limit},
        },
    )
    writer.append([reached, failed], now=ledger.now_ms())
