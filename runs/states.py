"""The task state machine (SPEC §7.3): its states, the allowed moves as one table, and the one
function that moves a task row and says so.

Every write of a task's state goes through ``task_move`` (one row) or ``tasks_move`` (a
cluster's open tasks at once); a move the table lacks raises ``IllegalTransition``. Each move
returns the lifecycle message that reports it, or None when the move is reported elsewhere (a
cancellation: the cluster's own ``CLUSTER_STOPPED``/``CLUSTER_COMPLETE`` says why).

On the wire a task keeps SPEC §7.3's five states: ``expired`` shows as ``queued`` (a lost lease
makes the task claimable again) and ``dropped`` as ``cancelled`` (a trigger that never ran);
``state_detail`` carries the machine's own state. docs/decisions/0084-task-state-machine.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from django.db.models import QuerySet

from ledger.interfaces import JSON, MessageDraft
from runs import lifecycle
from runs.models import Task, TaskState
from runs.records import TaskRecord
from runs.selectors import task_record
from runs.statements import task_save


class TaskEvent(StrEnum):
    """What happens to a task once the pipeline has queued it (a row is born ``queued``)."""

    CLAIM = "claim"  # a worker takes it under a new lease
    EXPIRE = "expire"  # its lease ran out with retries left
    RETRY = "retry"  # its worker failed it, retryable, with retries left
    COMPLETE = "complete"
    FAIL = "fail"  # for good: no retries left, not retryable, or it cannot be built
    CANCEL = "cancel"  # its cluster ended
    DROP = "drop"  # the agent's buffer was full: the oldest waiting trigger is let go


QUEUED, CLAIMED, EXPIRED = TaskState.QUEUED, TaskState.CLAIMED, TaskState.EXPIRED

# (state, event) -> next state. Nothing else moves a task.
TRANSITIONS: Mapping[tuple[TaskState, TaskEvent], TaskState] = {
    (QUEUED, TaskEvent.CLAIM): CLAIMED,
    (EXPIRED, TaskEvent.CLAIM): CLAIMED,
    (CLAIMED, TaskEvent.EXPIRE): EXPIRED,
    (CLAIMED, TaskEvent.RETRY): QUEUED,
    (CLAIMED, TaskEvent.COMPLETE): TaskState.COMPLETED,
    (CLAIMED, TaskEvent.FAIL): TaskState.FAILED,
    (QUEUED, TaskEvent.CANCEL): TaskState.CANCELLED,
    (CLAIMED, TaskEvent.CANCEL): TaskState.CANCELLED,
    (EXPIRED, TaskEvent.CANCEL): TaskState.CANCELLED,
    (QUEUED, TaskEvent.DROP): TaskState.DROPPED,
}

# The states a task can leave still hold their agent's turn; the others are final.
OPEN_STATES = frozenset(state for state, _ in TRANSITIONS)
FINAL_STATES = frozenset(TaskState) - OPEN_STATES


class IllegalTransition(RuntimeError):
    """A move the table does not allow: a defect in the caller, never bad input."""


def next_state(current: str, event: TaskEvent) -> TaskState:
    """The state ``event`` moves a task in ``current`` to, or ``IllegalTransition``."""
    target = TRANSITIONS.get((TaskState(current), event))
    if target is None:
        raise IllegalTransition(f"a {current} task cannot {event.value}")
    return target


def task_move(
    task: Task,
    event: TaskEvent,
    *,
    now: int,
    error: str = "",
    report: Mapping[str, JSON] | None = None,
    **fields: Any,
) -> MessageDraft | None:
    """Move one task row (locked by the caller) by ``event``, save it, and return the lifecycle
    message that reports the move, for the caller to append in the same transaction.

    ``report`` adds data to that message (``phase`` of a failure, ``delayMs`` of a retry…);
    ``fields`` are the other columns the move sets (the lease of a claim, a result).

    The UPDATE sets the columns the move changed and those of ``fields``, no other: the row
    is the one the caller read (and locked), so the others hold what they held.
    """
    draft, columns = task_moved(task, event, now=now, error=error, report=report, **fields)
    task_save(task, columns)
    return draft


def task_moved(
    task: Task,
    event: TaskEvent,
    *,
    now: int,
    error: str = "",
    report: Mapping[str, JSON] | None = None,
    **fields: Any,
) -> tuple[MessageDraft | None, list[str]]:
    """``task_move`` without its UPDATE: the row moved in memory, the lifecycle message, and
    the columns to write, which the caller writes in the same transaction (with columns of its
    own: a completion's messages, known once they are appended)."""
    if not _TASK_COLUMNS.issuperset(fields):
        raise ValueError(f"not columns of a task: {sorted(set(fields) - _TASK_COLUMNS)}")
    before = task_record(task)
    values = task.__dict__
    held = {name: values.get(name, _UNREAD) for name in _MOVED}
    task.state = next_state(task.state, event)
    if event is TaskEvent.CLAIM:
        task.claimed_at = now
        task.output_lines = 0
        task.attempts += 1
    else:
        # Every other move ends the lease.
        task.lease_id = ""
        task.lease_expires_at = None
        task.error = error[: lifecycle.ERROR_TEXT_MAX]
    if task.state in FINAL_STATES:
        task.finished_at = now
    for name, value in fields.items():
        setattr(task, name, value)
    return _report(before, task, event, error, dict(report or {})), _changed(held, values, fields)


# The columns a move itself may set (beside its ``fields``).
_MOVED = (
    "state",
    "claimed_at",
    "output_lines",
    "attempts",
    "lease_id",
    "lease_expires_at",
    "error",
    "finished_at",
)
_UNREAD = object()
_TASK_NAMES = tuple(f.attname for f in Task._meta.concrete_fields if not f.primary_key)
_TASK_COLUMNS = frozenset(_TASK_NAMES)


def _changed(
    held: Mapping[str, Any], values: Mapping[str, Any], fields: Mapping[str, Any]
) -> list[str]:
    """The columns to write, in the model's order: those of ``fields`` and those the move
    changed (a column the row was read without counts as changed)."""
    return [
        name
        for name in _TASK_NAMES
        if name in fields
        or (name in held and (held[name] is _UNREAD or values.get(name, _UNREAD) != held[name]))
    ]


def tasks_move(tasks: QuerySet[Task], event: TaskEvent, *, now: int, error: str = "") -> int:
    """Move every task of ``tasks`` that ``event`` can move, in one statement; the others are
    left alone. Only for a move that no lifecycle message reports per task (``CANCEL``)."""
    if _REPORTED.get(event, True):
        raise IllegalTransition(f"{event.value} moves one task at a time")
    sources = [state for (state, on) in TRANSITIONS if on is event]
    targets = {TRANSITIONS[(state, event)] for state in sources}
    [target] = targets
    return tasks.filter(state__in=sources).update(
        state=target,
        finished_at=now if target in FINAL_STATES else None,
        lease_id="",
        lease_expires_at=None,
        error=error[: lifecycle.ERROR_TEXT_MAX],
    )


# Which moves a lifecycle message reports (SPEC §7.3); the others are said elsewhere or not at all.
_REPORTED: Mapping[TaskEvent, bool] = {
    TaskEvent.CLAIM: True,
    TaskEvent.COMPLETE: True,
    TaskEvent.RETRY: True,
    TaskEvent.FAIL: True,
    TaskEvent.EXPIRE: False,
    TaskEvent.CANCEL: False,
    TaskEvent.DROP: False,
}


def _report(
    before: TaskRecord, task: Task, event: TaskEvent, error: str, extra: dict[str, JSON]
) -> MessageDraft | None:
    if event is TaskEvent.CLAIM:
        # zeroshot's publishTaskStarted (src/agent/agent-lifecycle.js): triggeredBy, triggerFrom.
        # Which runner took it under which lease: a task page shows each attempt's runner.
        return lifecycle.lifecycle_draft(
            before,
            "TASK_STARTED",
            triggeredBy=before.trigger_topic,
            triggerFrom=before.trigger_sender or None,
            worker=task.worker,
            leaseSeconds=task.lease_seconds,
        )
    if event is TaskEvent.COMPLETE:
        return lifecycle.lifecycle_draft(before, "TASK_COMPLETED")
    if event is TaskEvent.RETRY:
        return lifecycle.lifecycle_draft(
            before,
            "RETRY_SCHEDULED",
            attempt=task.attempts,
            error=error[: lifecycle.ERROR_TEXT_MAX],
            **extra,
        )
    if event is TaskEvent.FAIL:
        phase = str(extra.pop("phase", "task"))
        return lifecycle.agent_error_draft(
            agent_id=task.agent_id, phase=phase, error=error, task=before, **extra
        )
    return None
