"""Queuing tasks for triggered agents, and cancelling what a cluster's end leaves open."""

from __future__ import annotations

import secrets

from context.agents import AgentSpec
from ledger import interfaces as ledger
from ledger.interfaces import ClusterWriter, MessageDraft, MessageRecord, Topic
from runs import lifecycle
from runs.models import Task, TaskState
from runs.states import TaskEvent, task_move, tasks_move

# Triggers kept while an agent is busy (SPEC §7.3); past it the oldest waiting one is dropped.
BUFFER_LIMIT = 200


def task_queue(*, writer: ClusterWriter, agent: AgentSpec, message: MessageRecord) -> int:
    """Queue a task for ``agent`` triggered by ``message``; 1 when queued, 0 when not.

    Runs inside the pipeline's transaction. A message that already queued this agent's task is
    not queued again; past ``maxIterations`` the cluster fails instead (SPEC §7.3).
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
    waiting = tasks.filter(state=TaskState.QUEUED).order_by("created_at", "id")
    if waiting.count() >= BUFFER_LIMIT:
        oldest = waiting.first()
        assert oldest is not None
        task_move(
            oldest,
            TaskEvent.DROP,
            now=ledger.now_ms(),
            error=f"dropped: {BUFFER_LIMIT} newer triggers were waiting",
        )
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
        trigger_sender=message.sender[:128],
        created_at=now,
        available_at=now,
    )
    return 1


def tasks_cancel(*, cluster_id: str, reason: str) -> int:
    """Cancel every open task of a cluster (it stopped, completed or failed)."""
    tasks = Task.objects.filter(cluster_id=cluster_id)
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
