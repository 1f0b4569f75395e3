"""Queuing tasks for triggered agents, the buffers of busy agents' triggers, and cancelling
what a cluster's end leaves open."""

from __future__ import annotations

import secrets
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Protocol

from context.agents import AgentSpec
from ledger import interfaces as ledger
from ledger.interfaces import ClusterWriter, MessageDraft, Topic
from runs import lifecycle, statements
from runs.models import BufferedTrigger, Task, TaskState
from runs.states import TaskEvent, tasks_move

_QUEUED = TaskState.QUEUED.value  # a plain string: database drivers adapt exact types
# Triggers kept while an agent is busy (SPEC §7.3); past it the oldest waiting one is dropped.
BUFFER_LIMIT = 200
# A batch reads this many agents' buffers one by one; the next agent's read takes all the rest.
BUFFERS_READ_ALONE = 3


class TriggerRef(Protocol):
    """The message that triggers a task: a ``MessageRecord`` or what a buffer row keeps of it."""

    @property
    def id(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def sequence(self) -> int: ...
    @property
    def sender(self) -> str: ...


def task_queue(*, writer: ClusterWriter, agent: AgentSpec, message: TriggerRef) -> int:
    """Queue a task for ``agent`` triggered by ``message``; 1 when queued, 0 when not.

    Runs inside the pipeline's transaction. A message that already queued this agent's task is
    not queued again; past ``maxIterations`` the cluster fails instead (SPEC §7.3). The trigger
    stage queues a task only for an idle agent: a busy one's triggers wait in its buffer.
    """
    agent_id = agent.id
    count, triggered = statements.agent_tasks_and_trigger(
        cluster_id=writer.cluster_id, agent_id=agent_id, message_id=message.id
    )
    if triggered:
        return 0
    iteration = count + 1
    limit = agent.limits.max_iterations
    if iteration > limit:
        _fail_cluster(writer, agent=agent, iteration=iteration, limit=limit)
        return 0
    now = ledger.now_ms()
    statements.task_insert(
        id=f"task_{secrets.token_hex(16)}",
        cluster_id=writer.cluster_id,
        agent_id=agent_id,
        role=agent.role,
        provider=(agent.provider or "")[:64],
        iteration=iteration,
        state=_QUEUED,
        trigger_message_id=message.id,
        trigger_topic=message.topic,
        trigger_sequence=message.sequence,
        trigger_sender=message.sender[:128],
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


class AgentTurns:
    """Where each agent of a cluster stands for its triggers, as of the pipeline's cursor.

    Read once per batch with one query: the tasks that hold an agent busy (an index of those
    alone, so it does not grow with the cluster's history); an agent is busy while any. How
    many tasks an agent has had (``iteration``, for its trigger logic) and the messages waiting
    in the buffers are read only when a batch needs them: an idle agent's trigger costs one
    query.
    """

    def __init__(self, *, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        self._open: dict[str, set[str]] = {}  # the busy tasks' ids, per agent
        for agent, open_id in statements.unsettled_tasks(cluster_id):
            self._open.setdefault(agent, set()).add(open_id)
        self._had: dict[str, int] = {}  # tasks before the batch, per agent asked about
        self._queued: Counter[str] = Counter()  # tasks the batch queues
        self._buffered: dict[str, deque[Buffered]] = {}  # the buffers read, per agent
        self._buffers_read = False  # every agent's buffer has been read

    def busy(self, agent_id: str) -> bool:
        return bool(self._open.get(agent_id)) or self._queued[agent_id] > 0

    def iteration(self, agent_id: str) -> int:
        """How many tasks the agent has had, those this batch queues included."""
        if agent_id not in self._had:
            self._had[agent_id] = statements.agent_iteration(
                cluster_id=self.cluster_id, agent_id=agent_id
            )
        return self._had[agent_id] + self._queued[agent_id]

    def queued(self, agent_id: str) -> None:
        """The batch queues a task for the agent: it is busy, and has one more task."""
        self._queued[agent_id] += 1

    def settle(self, agent_id: str, task_id: str) -> bool:
        """The task's end was offered; True when it was one of the agent's open tasks (a task
        the batch queues cannot end in it: it is not stored yet)."""
        ids = self._open.get(agent_id, set())
        if task_id not in ids:
            return False
        ids.discard(task_id)
        return True

    def buffered(self, agent_id: str) -> deque[Buffered]:
        """The messages waiting for the agent, oldest first.

        A batch usually touches the buffers of one or two agents (a task's end, a trigger for a
        busy agent): each is read alone, one seek of ``trigger_buffer_order``, not every
        agent's buffer of the cluster. A batch that touches more reads the rest at once."""
        if agent_id in self._buffered:
            return self._buffered[agent_id]
        if self._buffers_read:
            return self._buffered.setdefault(agent_id, deque())
        if len(self._buffered) < BUFFERS_READ_ALONE:
            rows = statements.buffered_triggers(self.cluster_id, agent_id=agent_id)
        else:
            # The buffers read before may have moved in memory: they are kept as they are.
            rows = [
                row
                for row in statements.buffered_triggers(self.cluster_id)
                if row[0] not in self._buffered
            ]
            self._buffers_read = True
        waiting = self._buffered.setdefault(agent_id, deque())
        for agent, message_id, topic, sequence, row_id in rows:
            entry = Buffered(
                agent_id=agent, id=message_id, topic=topic, sequence=sequence, row=row_id
            )
            self._buffered.setdefault(agent, deque()).append(entry)
        return waiting


def agent_turns(*, cluster_id: str) -> AgentTurns:
    """Each agent's turn as the trigger stage left it."""
    return AgentTurns(cluster_id=cluster_id)


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
            statements.task_settle(task_id=task_id, sequence=sequence)
        if not running:
            return  # tasks_cancel cleared the buffers: nothing waits in a cluster that ended
        if self.judged:
            statements.buffer_rows_delete(cluster_id=cluster_id, ids=self.judged)
        if self.dropped:
            statements.buffer_rows_drop(cluster_id=cluster_id, ids=self.dropped)
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
    waiting = turns.buffered(entry.agent_id)
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
    waiting = turns.buffered(agent_id)
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
                # The iterations run, as zeroshot's handleMaxIterations reports agent.iteration.
                "iteration": iteration - 1,
                "maxIterations": limit,
            },
        },
    )
    failed = MessageDraft(
        topic=Topic.CLUSTER_FAILED,
        sender=agent_id,
        receiver="system",
        content={
            "text": f"Cluster failed: {agent_id} reached its {limit} iterations",
            "data": {
                "reason": "max_iterations",
                "agent": agent_id,
                "iteration": iteration - 1,
                "maxIterations": limit,
            },
        },
    )
    writer.append([reached, failed], now=ledger.now_ms())
