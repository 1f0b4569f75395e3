"""Tasks through their life: claimed under a lease, heartbeats, output, completion, failure.

SPEC §7.3, §7.4. A claim takes the oldest claimable task in one short write transaction (on
PostgreSQL ``FOR UPDATE SKIP LOCKED``, on SQLite under its write lock), then records the
task's context build, its ``TASK_STARTED`` and the link between them in the ledger's write
transaction. Every later call carries the lease id; a lease that is no longer current is a
``Conflict`` (409), which is how a late worker learns it lost the task.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet

from context.services import (
    BuildOutcome,
    agent_config_get,
    agent_spec_get,
    build_usage_record,
    context_build,
)
from ledger import interfaces as ledger
from ledger.interfaces import (
    JSON,
    ClusterRecord,
    ClusterWriter,
    Conflict,
    Forbidden,
    InvalidInput,
    MessageDraft,
    MessageRecord,
    ServiceError,
)
from runs import lifecycle
from runs.hooks import completion_drafts
from runs.models import Task, TaskState
from runs.records import TaskRecord
from runs.selectors import task_record
from runs.signals import tasks_changed

DEFAULT_LEASE_SECONDS = 120
LEASE_BOUNDS = (5, 3600)
DEFAULT_MAX_RETRIES = 3
OUTPUT_MAX_LINES = 1000


@dataclass(frozen=True, slots=True)
class Claim:
    """A claimed task with everything its worker needs: the prompt and the agent's config."""

    task: TaskRecord
    prompt: str
    metrics: dict[str, JSON]
    agent: dict[str, JSON]

    def to_wire(self) -> dict[str, JSON]:
        task = self.task.to_wire(with_lease=True)
        task["lease_seconds"] = self.lease_seconds
        return {"task": task, "prompt": self.prompt, "metrics": self.metrics, "agent": self.agent}

    @property
    def lease_seconds(self) -> int:
        if self.task.lease_expires_at is None or self.task.claimed_at is None:
            return 0
        return (self.task.lease_expires_at - self.task.claimed_at) // 1000


@dataclass(frozen=True, slots=True)
class Completion:
    """What completing a task published, in order."""

    task: TaskRecord
    messages: tuple[MessageRecord, ...]


# --- claiming ------------------------------------------------------------------------------------


def task_claim(
    *,
    cluster_id: str | None = None,
    agents: Sequence[str] = (),
    roles: Sequence[str] = (),
    lease_seconds: int | None = None,
    worker: str = "",
) -> Claim | None:
    """Claim the oldest claimable task that passes the filters; None when there is none.

    A task whose build cannot be made (an agent config the engine refuses) fails at once, with
    ``AGENT_ERROR``, and the next one is tried.
    """
    lease = _lease_seconds(lease_seconds)
    for _ in range(20):
        task = _take(cluster_id=cluster_id, agents=agents, roles=roles, lease=lease, worker=worker)
        if task is None:
            return None
        cluster = ledger.cluster_get(cluster_id=task.cluster_id)
        try:
            agent = agent_config_get(cluster=cluster, agent_id=task.agent_id)
            outcome = _build(task, cluster)
        except ServiceError as error:
            _finish_failed(task, error=f"the task's context cannot be built: {error.message}")
            continue
        if outcome is None:
            continue  # the lease moved on while the build was made
        started = replace(task, build_id=outcome.build_id)
        return Claim(
            task=started, prompt=outcome.context, metrics=outcome.metrics, agent=agent_wire(agent)
        )
    return None


def _lease_seconds(asked: int | None) -> int:
    low, high = LEASE_BOUNDS
    if asked is None:
        return DEFAULT_LEASE_SECONDS
    if not low <= asked <= high:
        raise InvalidInput(
            f"lease must be between {low} and {high} seconds", details={"field": "lease"}
        )
    return asked


def claimable(*, now: int) -> QuerySet[Task]:
    """Tasks a worker may take now: the head of each agent's queue, or a lease that ended.

    An agent runs one task at a time, in the order its triggers came (SPEC §7.3): a queued task
    waits while its agent has a claimed task or an older queued one.
    """
    ahead = Task.objects.filter(
        cluster_id=OuterRef("cluster_id"), agent_id=OuterRef("agent_id")
    ).filter(
        Q(state=TaskState.CLAIMED)
        | Q(state=TaskState.QUEUED, created_at__lt=OuterRef("created_at"))
        | Q(state=TaskState.QUEUED, created_at=OuterRef("created_at"), id__lt=OuterRef("id"))
    )
    return Task.objects.filter(
        (Q(state=TaskState.QUEUED, available_at__lte=now) & ~Exists(ahead))
        | Q(state=TaskState.CLAIMED, lease_expires_at__lt=now)
    )


def _take(
    *, cluster_id: str | None, agents: Sequence[str], roles: Sequence[str], lease: int, worker: str
) -> TaskRecord | None:
    """Lock the oldest claimable task and give it a new lease, in one short transaction."""
    with transaction.atomic(durable=True):
        now = ledger.now_ms()
        tasks = claimable(now=now)
        if cluster_id is not None:
            tasks = tasks.filter(cluster_id=cluster_id)
        if agents:
            tasks = tasks.filter(agent_id__in=list(agents))
        if roles:
            tasks = tasks.filter(role__in=list(roles))
        task = (
            tasks.order_by("created_at", "id")
            .select_for_update(skip_locked=True, of=("self",))
            .first()
        )
        if task is None:
            return None
        task.state = TaskState.CLAIMED
        task.lease_id = uuid.uuid4().hex
        task.lease_seconds = lease
        task.lease_expires_at = now + lease * 1000
        task.attempts += 1
        task.worker = worker[:128]
        task.claimed_at = now
        task.output_lines = 0
        task.save()
    return task_record(task)


def _build(task: TaskRecord, cluster: ClusterRecord) -> BuildOutcome | None:
    """Record the task's context build with its ``TASK_STARTED``, or None if the lease moved."""

    def started(writer: ClusterWriter, build_id: int) -> None:
        linked = Task.objects.filter(
            pk=task.id, state=TaskState.CLAIMED, lease_id=task.lease_id
        ).update(build_id=build_id)
        if not linked:
            raise _LeaseMoved
        writer.append(
            [lifecycle.lifecycle_draft(task, "TASK_STARTED", triggeredBy=task.trigger_topic)],
            now=ledger.now_ms(),
        )

    try:
        return context_build(
            cluster_id=cluster.id,
            agent_id=task.agent_id,
            iteration=task.iteration,
            triggering_message_id=task.trigger_message_id,
            record_with=started,
        )
    except _LeaseMoved:
        return None


class _LeaseMoved(Exception):
    """The claim's lease ended before its build was recorded: the build is not kept."""


def agent_wire(agent: Mapping[str, JSON]) -> dict[str, JSON]:
    """The agent's config as its worker needs it: what to run, not how the server drives it."""
    server_side = {"triggers", "hooks", "contextStrategy", "condition"}
    wire = {key: value for key, value in agent.items() if key not in server_side}
    wire.setdefault("outputFormat", "json")
    return wire


# --- the calls a worker makes while it holds a lease -----------------------------------------


def _held(*, task_id: str, lease_id: str, scope: str | None) -> Task:
    """The task, locked, if ``lease_id`` is its current lease; else ``Conflict``."""
    task = Task.objects.select_for_update().filter(pk=task_id).first()
    if task is None:
        raise ledger.NotFound(f"task {task_id!r} does not exist", details={"task_id": task_id})
    if scope is not None and task.cluster_id != scope:
        raise Forbidden(
            f"this API key is limited to cluster {scope!r}", details={"task_id": task_id}
        )
    if task.state != TaskState.CLAIMED or task.lease_id != lease_id:
        raise Conflict(
            f"the lease on task {task_id} is no longer current (the task is {task.state})",
            details={"task_id": task_id, "state": task.state},
        )
    return task


def task_heartbeat(*, task_id: str, lease_id: str, scope: str | None = None) -> TaskRecord:
    """Extend the lease by its length from now."""
    with transaction.atomic(durable=True):
        task = _held(task_id=task_id, lease_id=lease_id, scope=scope)
        task.lease_expires_at = ledger.now_ms() + task.lease_seconds * 1000
        task.save(update_fields=["lease_expires_at"])
    return task_record(task)


def task_output(
    *,
    task_id: str,
    lease_id: str,
    lines: Sequence[str],
    offset: int | None = None,
    scope: str | None = None,
) -> list[MessageRecord]:
    """Store lines of the agent's raw output as one ``AGENT_OUTPUT`` message.

    ``offset`` counts the lines this lease sent before: lines already stored (a batch sent again
    after its answer was lost) are not stored twice.
    """
    if len(lines) > OUTPUT_MAX_LINES:
        raise InvalidInput(
            f"send at most {OUTPUT_MAX_LINES} lines at a time", details={"field": "lines"}
        )
    cluster_id = _cluster_of(task_id)
    with ledger.cluster_transaction(cluster_id) as writer:
        task = _held(task_id=task_id, lease_id=lease_id, scope=scope)
        fresh = list(lines)
        if offset is not None and offset < task.output_lines:
            fresh = fresh[task.output_lines - offset :]
        if not fresh:
            return []
        task.output_lines += len(fresh)
        task.save(update_fields=["output_lines"])
        draft = lifecycle.output_draft(task_record(task), fresh)
        return writer.append([draft], now=ledger.now_ms())


def _cluster_of(task_id: str) -> str:
    cluster_id = Task.objects.filter(pk=task_id).values_list("cluster_id", flat=True).first()
    if cluster_id is None:
        raise ledger.NotFound(f"task {task_id!r} does not exist", details={"task_id": task_id})
    return cluster_id


def task_complete(
    *,
    task_id: str,
    lease_id: str,
    result: JSON,
    output: str = "",
    usage: Mapping[str, JSON] | None = None,
    scope: str | None = None,
) -> Completion:
    """Apply the agent's hook and publish, in one batch with the task's end: ``TOKEN_USAGE``
    (with usage), ``TASK_COMPLETED`` and the hook's message (SPEC §7.4, §7.5).

    Completing again with the same body returns the same messages; another body is refused.
    A result the agent's config refuses (not a JSON object, a strict schema) fails the task as
    retryable instead, and says so with ``InvalidInput``.
    """
    body = {"lease_id": lease_id, "result": result, "output": output, "usage": usage}
    body_hash = hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    cluster_id = _cluster_of(task_id)
    repeat = _completed_before(task_id=task_id, body_hash=body_hash, scope=scope)
    if repeat is not None:
        return repeat
    cluster = ledger.cluster_get(cluster_id=cluster_id)
    # The hook's scripts run before the write transaction (they may take seconds); the lease
    # is checked again inside it.
    with transaction.atomic():
        record = task_record(_held(task_id=task_id, lease_id=lease_id, scope=scope))
    agent = agent_spec_get(cluster=cluster, agent_id=record.agent_id)
    outcome = completion_drafts(
        task=record, agent=agent, cluster=cluster, result=result, output=output
    )
    if outcome.rejected is not None:
        failed = task_fail(
            task_id=task_id, lease_id=lease_id, error=outcome.rejected, retryable=True
        )
        raise InvalidInput(
            f"the result was refused: {outcome.rejected}",
            details={"task_id": task_id, "state": failed.state},
            code="result_refused",
        )
    with ledger.cluster_transaction(cluster_id) as writer:
        task = _held(task_id=task_id, lease_id=lease_id, scope=scope)
        drafts: list[MessageDraft] = []
        if usage:
            drafts.append(lifecycle.usage_draft(record, dict(usage)))
        drafts.append(lifecycle.lifecycle_draft(record, "TASK_COMPLETED"))
        drafts.extend(outcome.drafts)
        messages = writer.append(drafts, now=ledger.now_ms())
        _close(
            task,
            state=TaskState.COMPLETED,
            result=outcome.result,
            usage=dict(usage) if usage else None,
            completion_hash=body_hash,
            completion_messages=[m.id for m in messages],
        )
        if usage and task.build_id is not None:
            build_usage_record(build_id=task.build_id, usage=usage)
        transaction.on_commit(tasks_changed.notify)
    return Completion(task=task_record(task), messages=tuple(messages))


def _completed_before(*, task_id: str, body_hash: str, scope: str | None) -> Completion | None:
    task = Task.objects.filter(pk=task_id).first()
    if task is None or not task.completion_hash:
        return None
    if scope is not None and task.cluster_id != scope:
        raise Forbidden(f"this API key is limited to cluster {scope!r}")
    if task.completion_hash != body_hash:
        raise Conflict(
            f"task {task_id} was already completed with another result",
            details={"task_id": task_id},
        )
    messages = tuple(
        ledger.message_get(cluster_id=task.cluster_id, message_id=message_id)
        for message_id in task.completion_messages
    )
    return Completion(task=task_record(task), messages=messages)


def _close(task: Task, *, state: str, **fields: Any) -> None:
    task.state = state
    task.finished_at = ledger.now_ms()
    task.lease_id = ""
    task.lease_expires_at = None
    for name, value in fields.items():
        setattr(task, name, value)
    task.save()


def task_fail(
    *,
    task_id: str,
    lease_id: str,
    error: str,
    retryable: bool = True,
    scope: str | None = None,
) -> TaskRecord:
    """Retry the task after a backoff while it has retries left, else fail it for good."""
    cluster_id = _cluster_of(task_id)
    cluster = ledger.cluster_get(cluster_id=cluster_id)
    with ledger.cluster_transaction(cluster_id) as writer:
        task = _held(task_id=task_id, lease_id=lease_id, scope=scope)
        max_retries = _max_retries(cluster, task.agent_id)
        record = task_record(task)
        if retryable and task.attempts <= max_retries:
            delay = _backoff_ms(task.attempts)
            task.state = TaskState.QUEUED
            task.available_at = ledger.now_ms() + delay
            task.lease_id = ""
            task.lease_expires_at = None
            task.error = error[: lifecycle.ERROR_TEXT_MAX]
            task.save()
            draft = lifecycle.lifecycle_draft(
                record,
                "RETRY_SCHEDULED",
                attempt=task.attempts,
                maxRetries=max_retries,
                delayMs=delay,
                error=error[: lifecycle.ERROR_TEXT_MAX],
            )
        else:
            _close(task, state=TaskState.FAILED, error=error[: lifecycle.ERROR_TEXT_MAX])
            draft = lifecycle.agent_error_draft(
                agent_id=task.agent_id, phase="task", error=error, task=record
            )
        writer.append([draft], now=ledger.now_ms())
        transaction.on_commit(tasks_changed.notify)
    return task_record(task)


def _finish_failed(task: TaskRecord, *, error: str) -> None:
    """Fail a just-claimed task for good (its build cannot be made) and say why."""
    with ledger.cluster_transaction(task.cluster_id) as writer:
        row = Task.objects.select_for_update().get(pk=task.id)
        if row.lease_id != task.lease_id:
            return
        _close(row, state=TaskState.FAILED, error=error[: lifecycle.ERROR_TEXT_MAX])
        writer.append(
            [
                lifecycle.agent_error_draft(
                    agent_id=task.agent_id, phase="build", error=error, task=task
                )
            ],
            now=ledger.now_ms(),
        )


def _max_retries(cluster: ClusterRecord, agent_id: str) -> int:
    try:
        return agent_spec_get(cluster=cluster, agent_id=agent_id).limits.max_retries
    except ServiceError:
        return DEFAULT_MAX_RETRIES


def _backoff_ms(attempts: int) -> int:
    """Wait before the next attempt: doubling from the base, at most a minute."""
    base = float(settings.RUNS_RETRY_BASE_SECONDS)
    return int(min(60.0, base * 2 ** max(0, attempts - 1)) * 1000)
