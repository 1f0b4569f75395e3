"""The messages a run publishes about its agents and tasks (SPEC §7.3), as drafts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ledger.interfaces import JSON, MessageDraft, Topic, json_storable, text_storable
from runs.records import TaskRecord

LIFECYCLE = Topic.AGENT_LIFECYCLE
AGENT_ERROR = Topic.AGENT_ERROR
TOKEN_USAGE = Topic.TOKEN_USAGE
AGENT_OUTPUT = Topic.AGENT_OUTPUT
SCHEMA_WARNING = Topic.AGENT_SCHEMA_WARNING
ERROR_TEXT_MAX = 2000
# An AGENT_SCHEMA_WARNING lists at most this many problems, each cut to ISSUE_TEXT_MAX.
SCHEMA_ISSUES_MAX = 50
ISSUE_TEXT_MAX = 500


def lifecycle_draft(task: TaskRecord, event: str, **extra: JSON) -> MessageDraft:
    """``AGENT_LIFECYCLE`` for one task event, sent by the agent: ``"{agent}: {EVENT}"``."""
    data: dict[str, JSON] = {
        "event": event,
        "agent": task.agent_id,
        "role": task.role,
        "taskId": task.id,
        "iteration": task.iteration,
        **json_storable(extra),
    }
    return MessageDraft(
        topic=LIFECYCLE,
        sender=task.agent_id,
        content={"text": f"{task.agent_id}: {event}", "data": data},
    )


def agent_error_draft(
    *, agent_id: str, phase: str, error: str, task: TaskRecord | None = None, **extra: JSON
) -> MessageDraft:
    """``AGENT_ERROR``: what failed, in which phase, with the error text made storable (cut to its
    limit, NUL and lone surrogates replaced: a script's text is hostile, SPEC §7.2)."""
    text = text_storable(error, max_chars=ERROR_TEXT_MAX)
    data: dict[str, JSON] = {
        "agent": agent_id,
        "phase": phase,
        "error": text,
        **json_storable(extra),
    }
    if task is not None:
        data.update(taskId=task.id, iteration=task.iteration, role=task.role)
    return MessageDraft(
        topic=AGENT_ERROR,
        sender=agent_id,
        content={"text": f"{agent_id}: {phase} failed: {text}", "data": data},
    )


def schema_warning_draft(
    *, agent_id: str, issues: Sequence[str], role: str = "", iteration: int = 0
) -> MessageDraft:
    """``AGENT_SCHEMA_WARNING`` (zeroshot's ``data{agent, role, iteration, errors}``): how a
    result breaks its agent's ``jsonSchema``, each problem made storable (a problem quotes the
    agent's result)."""
    errors = [_middle_cut(text_storable(issue), ISSUE_TEXT_MAX) for issue in issues]
    if len(errors) > SCHEMA_ISSUES_MAX:
        errors = [*errors[:SCHEMA_ISSUES_MAX], f"… and {len(errors) - SCHEMA_ISSUES_MAX} more"]
    return MessageDraft(
        topic=SCHEMA_WARNING,
        sender=agent_id,
        content={
            "text": f"{agent_id}: the result does not match its jsonSchema",
            "data": {"agent": agent_id, "role": role, "iteration": iteration, "errors": errors},
        },
    )


def _middle_cut(text: str, max_chars: int) -> str:
    """The text within ``max_chars``, cut in its middle: a problem ends by saying what is wrong
    (``… is not of type 'integer'``), and its middle quotes the result."""
    if len(text) <= max_chars:
        return text
    half = (max_chars - 1) // 2
    return f"{text[:half]}…{text[len(text) - (max_chars - 1 - half) :]}"


def cluster_failed_draft(*, sender: str, reason: str, text: str, **data: JSON) -> MessageDraft:
    """``CLUSTER_FAILED`` from the agent whose failure ends the cluster (SPEC §7.3)."""
    return MessageDraft(
        topic=Topic.CLUSTER_FAILED,
        sender=sender,
        content={
            "text": text_storable(text, max_chars=ERROR_TEXT_MAX),
            "data": {"reason": reason, **json_storable(data)},
        },
    )


def usage_draft(task: TaskRecord, usage: dict[str, Any]) -> MessageDraft:
    """``TOKEN_USAGE`` of one completed task, as the agent reported it."""
    inputs, outputs = usage.get("inputTokens", 0), usage.get("outputTokens", 0)
    data: dict[str, JSON] = {
        "agent": task.agent_id,
        "role": task.role,
        "taskId": task.id,
        "iteration": task.iteration,
        **usage,
    }
    return MessageDraft(
        topic=TOKEN_USAGE,
        sender=task.agent_id,
        content={"text": f"{task.agent_id}: {inputs} in / {outputs} out tokens", "data": data},
    )


def output_draft(task: TaskRecord, lines: list[str]) -> MessageDraft:
    """``AGENT_OUTPUT``: lines of the agent's raw output, never put into a prompt (SPEC §1.5)."""
    return MessageDraft(
        topic=AGENT_OUTPUT,
        sender=task.agent_id,
        content={
            "text": "\n".join(lines),
            "data": {"taskId": task.id, "iteration": task.iteration, "lines": len(lines)},
        },
        metadata={"replayPolicy": "raw_log_only"},
    )
