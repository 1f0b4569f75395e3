"""What a task publishes besides its lifecycle: its result read and checked, then its hooks
(SPEC §7.5), and what its final failure publishes (SPEC §7.3, zeroshot's failure policy).

The pure work — result parsing, scripts, placeholders — is ``runs.logic``; this module reads
what it needs from the ledger (the triggering message, a view for ``ledger.*``) and turns the
outcome into drafts. A result the agent's config refuses fails the task instead; an
``onComplete`` hook that keeps failing fails the cluster (``on_complete_hook_failed``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from django.conf import settings
from django.db import connection

from context.agents import AgentSpec, Hook
from ledger import interfaces as ledger
from ledger.interfaces import JSON, ClusterRecord, MessageDraft, ServiceError
from runs import lifecycle
from runs.logic import (
    AgentInfo,
    ClusterInfo,
    LedgerView,
    LogicError,
    deep_merge,
    hook_logic_evaluate,
    operations_problem,
    result_parse,
    substitute,
    transform_evaluate,
    transform_missing_fields,
)
from runs.records import TaskRecord
from runs.script_view import script_view_read

# zeroshot runs a failing onComplete hook this many times, then fails the cluster
# (src/agent/agent-lifecycle.js, executeOnCompleteHookWithRetry: hookMaxRetries = 3).
HOOK_ATTEMPTS: Final = 3
VALIDATOR_ROLE: Final = "validator"
# Roles whose result must match its schema, else the task fails for good once the runner's
# output repair is exhausted (src/agent/agent-task-executor.js: terminalStructuredRole).
_STRUCTURED_ROLES: Final = frozenset({"planner", "conductor"})


@dataclass(frozen=True, slots=True)
class HookOutcome:
    """The drafts a completion adds after ``TASK_COMPLETED``, and the result to keep.

    ``rejected`` says why the result cannot be used: the task then fails, as retryable unless
    ``retryable`` is false. ``hook_failed``: the ``onComplete`` hook failed all its attempts,
    and the drafts end with its ``AGENT_ERROR`` and ``CLUSTER_FAILED``.
    """

    drafts: list[MessageDraft] = field(default_factory=list)
    result: JSON = None
    rejected: str | None = None
    retryable: bool = True
    hook_failed: bool = False


@dataclass(frozen=True, slots=True)
class HookFailure:
    """Why a hook published nothing: the ``AGENT_ERROR`` phase and its text."""

    phase: str
    error: str


def completion_drafts(
    *,
    task: TaskRecord,
    agent: AgentSpec,
    cluster: ClusterRecord,
    result: JSON,
    output: str,
) -> HookOutcome:
    """Read the agent's result, then run its ``hooks.onComplete`` on it (up to 3 attempts)."""
    parsed = _parse(agent, task=task, result=result, output=output)
    if isinstance(parsed, _Refusal):
        return HookOutcome(rejected=parsed.reason, retryable=parsed.retryable)
    data, drafts = parsed
    hook = agent.hooks.on_complete
    if hook is None:
        return HookOutcome(drafts=drafts, result=data)
    made = hook_run(hook, task=task, cluster=cluster, data=data, output=output)
    if isinstance(made, MessageDraft):
        drafts.append(made)
        return HookOutcome(drafts=drafts, result=data)
    failure, attempts = made
    drafts.append(
        lifecycle.agent_error_draft(
            agent_id=task.agent_id,
            phase=failure.phase,
            error=failure.error,
            task=task,
            hook="onComplete",
            hookFailure=True,
            hookRetries=attempts,
            retryBudgetExhausted=True,
        )
    )
    drafts.append(
        lifecycle.cluster_failed_draft(
            sender=task.agent_id,
            reason="on_complete_hook_failed",
            text=f"Cluster failed: onComplete hook failed for {task.agent_id} - {failure.error}",
            agentId=task.agent_id,
            role=task.role,
            hookRetries=attempts,
            error=failure.error,
        )
    )
    return HookOutcome(drafts=drafts, result=data, hook_failed=True)


def hook_run(
    hook: Hook,
    *,
    task: TaskRecord,
    cluster: ClusterRecord,
    data: dict[str, JSON] | None,
    output: str = "",
    error_message: str | None = None,
    attempts: int = HOOK_ATTEMPTS,
) -> MessageDraft | tuple[HookFailure, int]:
    """The hook's message, or its last failure and how many attempts were made (each failure
    is tried again, as zeroshot does, up to ``attempts``)."""
    made: MessageDraft | HookFailure = HookFailure("hook", "the hook was not run")
    scope = _Scope(task=task, cluster=cluster)
    tried = 0
    while tried < attempts:
        tried += 1
        made = _hook_draft(
            hook, scope=scope, cluster=cluster, data=data, output=output, error=error_message
        )
        if isinstance(made, MessageDraft):
            break
    if isinstance(made, MessageDraft):
        return made
    return made, tried


def start_draft(
    *, task: TaskRecord, agent: AgentSpec, cluster: ClusterRecord
) -> MessageDraft | HookFailure | None:
    """The agent's ``hooks.onStart`` message, run when its task is claimed (before the agent
    runs, as zeroshot's runTaskAttempt does); None without such a hook."""
    hook = agent.hooks.on_start
    if hook is None:
        return None
    made = hook_run(hook, task=task, cluster=cluster, data=None, attempts=1)
    return made if isinstance(made, MessageDraft) else made[0]


def failure_drafts(
    *, task: TaskRecord, agent: AgentSpec | None, cluster: ClusterRecord, error: str
) -> tuple[list[MessageDraft], list[MessageDraft]]:
    """What zeroshot's handleFinalFailure publishes around a task's ``AGENT_ERROR`` when the
    task fails for good (src/agent/agent-lifecycle.js; SPEC §7.3): the drafts that go before it
    and the ones after it.

    Before: a validator's rejection on its ``onComplete`` topic (``approved: false``,
    ``crashedAfterRetries: true``), so that its worker is triggered again. After: the
    ``onError`` hook's message (``{{error.message}}`` is the error), then, for any agent but a
    validator (src/agent/critical-agent-policy.ts), ``CLUSTER_FAILED`` with reason
    ``critical_agent_failed``. A validator with no topic to reject on is critical too: no
    cluster waits forever on an agent that can no longer act.
    """
    before: list[MessageDraft] = []
    after: list[MessageDraft] = []
    topic = _rejection_topic(agent)
    rejection = None
    if agent is not None and topic is not None and agent.id != "consensus-coordinator":
        rejection = _rejection(agent, task=task, topic=topic, error=error)
    critical = rejection is None
    if rejection is not None:
        before.append(rejection)
    if agent is not None and agent.hooks.on_error is not None:
        made = hook_run(
            agent.hooks.on_error,
            task=task,
            cluster=cluster,
            data=None,
            error_message=error,
            attempts=1,
        )
        if isinstance(made, MessageDraft):
            after.append(made)
        else:
            failure, _ = made
            after.append(
                lifecycle.agent_error_draft(
                    agent_id=task.agent_id,
                    phase=failure.phase,
                    error=failure.error,
                    task=task,
                    hook="onError",
                )
            )
    if critical:
        after.append(
            lifecycle.cluster_failed_draft(
                sender=task.agent_id,
                reason="critical_agent_failed",
                text=f"Critical agent {task.agent_id} exhausted its retry budget: {error}",
                agentId=task.agent_id,
                role=task.role,
                attempts=task.attempts,
                error=error,
            )
        )
    return before, after


def _rejection_topic(agent: AgentSpec | None) -> str | None:
    if agent is None or agent.role != VALIDATOR_ROLE:
        return None
    hook = agent.hooks.on_complete
    if hook is None or hook.action != "publish_message":
        return None
    return hook.config_topic


def _rejection(
    agent: AgentSpec, *, task: TaskRecord, topic: str, error: str
) -> MessageDraft | None:
    """A crashed validator's verdict: a rejection, never an approval (zeroshot's
    handleFinalFailure, "Validator crash = REJECTION"); None when its hook's topic cannot be
    published (the validator is then critical)."""
    hook = agent.hooks.on_complete
    receiver = hook.config.get("receiver") if hook is not None and hook.config else None
    if not isinstance(receiver, str) or not receiver or "{{" in receiver:
        receiver = "broadcast"
    attempts = task.attempts
    text = ledger.text_storable(error, max_chars=lifecycle.ERROR_TEXT_MAX)
    errors = [
        f"VALIDATOR CRASHED {attempts}x: {text}",
        "Validation could not be performed - REJECTING to prevent broken code merge",
        "Investigation required before retry",
    ]
    draft = MessageDraft(
        topic=topic,
        sender=agent.id,
        receiver=receiver,
        content={
            "text": f"REJECTED: Validator crashed {attempts} times - {text}",
            "data": {
                "approved": False,
                "crashedAfterRetries": True,
                "errors": json.dumps(errors),
                "attempts": attempts,
                "requiresInvestigation": True,
            },
        },
    )
    try:
        ledger.drafts_check([draft], single=True)
    except ServiceError:
        return None
    return draft


@dataclass(frozen=True, slots=True)
class _Refusal:
    reason: str
    retryable: bool = True


def _parse(
    agent: AgentSpec, *, task: TaskRecord, result: JSON, output: str
) -> tuple[dict[str, JSON] | None, list[MessageDraft]] | _Refusal:
    """The result object (None for text agents) and the warnings about it, or a refusal.

    zeroshot's rule for a result that breaks the schema (agent-task-executor.js): a validator's
    task fails (retryable), a planner's or conductor's fails for good (its runner's output repair
    is exhausted), any other agent's result is used with an ``AGENT_SCHEMA_WARNING``.
    """
    output_format = agent.output_format
    agent_id = agent.id
    if output_format == "text":
        return None, []
    # The worker's own reading of its output wins; else the server reads the output.
    text = json.dumps(result) if isinstance(result, dict) else output
    if isinstance(result, str) and result.strip():
        text = result
    parsed = result_parse(text, output_format=output_format, json_schema=agent.json_schema)
    if isinstance(parsed, LogicError):
        if parsed.kind == "schema":
            # The agent's own schema is broken: the result is used, and the config reported.
            unchecked = result_parse(text, output_format=output_format)
            if isinstance(unchecked, LogicError):
                return _Refusal(unchecked.message)
            error = lifecycle.agent_error_draft(
                agent_id=agent_id, phase="result_schema", error=parsed.message
            )
            return unchecked.data, [error]
        return _Refusal(parsed.message)
    issues = [issue.text for issue in parsed.schema_issues]
    if not issues:
        return parsed.data, []
    if agent.role == VALIDATOR_ROLE or agent.role in _STRUCTURED_ROLES:
        reason = ledger.text_storable(
            "the result does not match the agent's jsonSchema: " + "; ".join(issues),
            max_chars=lifecycle.ERROR_TEXT_MAX,
        )
        return _Refusal(reason, retryable=agent.role == VALIDATOR_ROLE)
    warning = lifecycle.schema_warning_draft(
        agent_id=agent_id, role=agent.role, iteration=task.iteration, issues=issues
    )
    return parsed.data, [warning]


def _hook_draft(
    hook: Hook,
    *,
    scope: _Scope,
    cluster: ClusterRecord,
    data: dict[str, JSON] | None,
    output: str,
    error: str | None,
) -> MessageDraft | HookFailure:
    """The hook's message, or why there is none."""
    task = scope.task
    agent_id = task.agent_id

    def failed(phase: str, failure: LogicError | str) -> HookFailure:
        return HookFailure(phase, failure.message if isinstance(failure, LogicError) else failure)

    if hook.action != "publish_message":
        return failed("hook", f"hook action {hook.action!r} is not run by this server")
    if hook.transform is not None:
        missing = transform_missing_fields(hook.transform.source, data)
        if missing:
            return failed(
                "hook_transform",
                f"the transform reads result fields the result lacks: {', '.join(missing)} "
                "(check the agent's jsonSchema and output)",
            )
        made = transform_evaluate(
            hook.transform.source,
            result=data,
            triggering_message=scope.trigger(),
            view=scope.view(),
            cluster=scope.info,
            agent=scope.agent,
        )
        if isinstance(made, LogicError):
            return failed("hook_transform", made)
        raw: dict[str, JSON] = {"topic": made.topic, "content": made.content}
        if made.receiver is not None:
            raw["receiver"] = made.receiver
        if made.metadata is not None:
            raw["metadata"] = made.metadata
        problem = operations_problem(raw)
        if problem is not None:
            return failed("hook_transform", problem)
        return _checked(raw, agent_id=agent_id, failed=failed)
    config = dict(hook.config) if hook.config is not None else {}
    if hook.logic is not None:
        patch = hook_logic_evaluate(
            hook.logic.source,
            result=data,
            agent=scope.agent,
            message=scope.trigger(),
            view=scope.view(),
            cluster=scope.info,
        )
        if isinstance(patch, LogicError):
            return failed("hook_logic", patch)
        if patch is not None:
            config = deep_merge(config, patch)
    substituted = substitute(
        config,
        result=data,
        output_text=output,
        cluster_id=cluster.id,
        cluster_created_at=cluster.created_at,
        iteration=task.iteration,
        error_message=error,
    )
    if isinstance(substituted, LogicError):
        return failed("hook", substituted)
    return _checked(substituted, agent_id=agent_id, failed=failed)


def _checked(
    raw: Mapping[str, JSON], *, agent_id: str, failed: Callable[[str, str], HookFailure]
) -> MessageDraft | HookFailure:
    """The hook's message as a draft: its text made storable (cut to its bound, NUL and lone
    surrogates replaced), then checked, so that what is still wrong is reported, not stored."""
    receiver = _receiver(raw.get("receiver"))
    if receiver is None:
        shown = json.dumps(raw.get("receiver"), ensure_ascii=False)[:80]
        return failed("hook", f"the hook's receiver must be a string, got {shown}")
    metadata = raw.get("metadata")
    draft = MessageDraft(
        topic=raw.get("topic"),  # type: ignore[arg-type]  # checked just below
        sender=agent_id,
        receiver=receiver,
        content=_content(raw.get("content")),
        metadata=ledger.json_storable(metadata) if isinstance(metadata, dict) else None,
    )
    try:
        ledger.drafts_check([draft], single=True)
    except ServiceError as error:
        return failed("hook", f"the hook's message is invalid: {error.message}")
    return draft


def _receiver(value: JSON) -> str | None:
    """A hook's receiver: a string, a number's JSON text, ``broadcast`` when empty; ``None``
    when it is something else (a list, an object), which is no address."""
    if value is None or value == "":
        return "broadcast"
    if isinstance(value, str):
        return ledger.text_storable(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return json.dumps(value)
    return None


def _content(content: JSON) -> dict[str, JSON]:
    """``{text, data}`` without the empty parts (SPEC §1.1): a text of None is no text."""
    if not isinstance(content, Mapping):
        return {}
    kept: dict[str, JSON] = {}
    if content.get("text") is not None:
        text = content["text"]
        text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
        kept["text"] = ledger.text_storable(text, max_bytes=settings.LEDGER_MAX_TEXT_BYTES)
    if "data" in content:
        kept["data"] = ledger.json_storable(content["data"])
    return kept


class _Scope:
    """What a hook script sees, read from the ledger once, and only when a script needs it.

    Once read, the pooled connection is handed back (``release_pooled_connection``): a script
    may wait seconds for a sandbox, and each of a hook's attempts would otherwise hold it."""

    def __init__(self, *, task: TaskRecord, cluster: ClusterRecord) -> None:
        self.task = task
        self.cluster = cluster
        self.info = ClusterInfo.of(id=cluster.id, config=cluster.config)
        self.agent = AgentInfo(id=task.agent_id, role=task.role, iteration=task.iteration)
        self._trigger: dict[str, JSON] | None = None
        self._view: LedgerView | None = None

    def trigger(self) -> dict[str, JSON]:
        if self._trigger is None:
            message = ledger.message_get(
                cluster_id=self.cluster.id, message_id=self.task.trigger_message_id
            )
            self._trigger = message.to_wire()
        return self._trigger

    def view(self) -> LedgerView:
        if self._view is None:
            self._view = script_view_read(
                cluster_id=self.cluster.id, up_to_sequence=self.cluster.last_sequence
            )
            release_pooled_connection()
        return self._view


def release_pooled_connection() -> None:
    """Give a pooled connection back while a hook's scripts run (they may wait seconds for a
    sandbox): a completion then holds a PostgreSQL connection only while it reads and writes,
    and many at once never exhaust the pool. SQLite's connection stays: it is the thread's.
    Inside a transaction nothing is given back."""
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        connection.close()
