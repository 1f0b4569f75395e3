"""What a task's completion publishes: its result read and checked, then its hook (SPEC §7.5).

The pure work — result parsing, scripts, placeholders — is ``runs.logic``; this module reads
what it needs from the ledger (the triggering message, a view for ``ledger.*``) and turns the
outcome into drafts. A hook that fails publishes ``AGENT_ERROR`` and the task still completes;
a result the agent's config refuses (not a JSON object, a strict schema) fails the task instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from django.conf import settings

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
    result_parse,
    substitute,
    transform_evaluate,
)
from runs.records import TaskRecord
from runs.script_view import script_view_read


@dataclass(frozen=True, slots=True)
class HookOutcome:
    """The drafts a completion adds after ``TASK_COMPLETED``, and the result to keep.

    ``rejected`` says why the result cannot be used: the task then fails as retryable.
    """

    drafts: list[MessageDraft] = field(default_factory=list)
    result: JSON = None
    rejected: str | None = None


def completion_drafts(
    *,
    task: TaskRecord,
    agent: AgentSpec,
    cluster: ClusterRecord,
    result: JSON,
    output: str,
) -> HookOutcome:
    """Read the agent's result, then run its ``hooks.onComplete`` on it."""
    parsed = _parse(agent, result=result, output=output)
    if isinstance(parsed, str):
        return HookOutcome(rejected=parsed)
    data, drafts = parsed
    hook = agent.hooks.on_complete
    if hook is not None:
        drafts.append(_hook_draft(hook, task=task, cluster=cluster, data=data, output=output))
    return HookOutcome(drafts=drafts, result=data)


def _parse(
    agent: AgentSpec, *, result: JSON, output: str
) -> tuple[dict[str, JSON] | None, list[MessageDraft]] | str:
    """The result object (None for text agents) and the warnings about it, or a refusal."""
    output_format = agent.output_format
    agent_id = agent.id
    if output_format == "text":
        return None, []
    # The worker's own reading of its output wins; else the server reads the output.
    text = json.dumps(result) if isinstance(result, dict) else output
    if isinstance(result, str) and result.strip():
        text = result
    parsed = result_parse(
        text,
        output_format=output_format,
        json_schema=agent.json_schema,
        strict=agent.strict_schema,
    )
    if isinstance(parsed, LogicError):
        if parsed.kind == "schema":
            # The agent's own schema is broken: the result is used, and the config reported.
            unchecked = result_parse(text, output_format=output_format)
            if isinstance(unchecked, LogicError):
                return unchecked.message
            error = lifecycle.agent_error_draft(
                agent_id=agent_id, phase="result_schema", error=parsed.message
            )
            return unchecked.data, [error]
        return parsed.message
    issues = [issue.text for issue in parsed.schema_issues]
    if not parsed.accepted:
        return ledger.text_storable(
            "the result does not match the agent's jsonSchema: " + "; ".join(issues),
            max_chars=lifecycle.ERROR_TEXT_MAX,
        )
    drafts = []
    if issues:
        drafts.append(lifecycle.schema_warning_draft(agent_id=agent_id, issues=issues))
    return parsed.data, drafts


def _hook_draft(
    hook: Hook,
    *,
    task: TaskRecord,
    cluster: ClusterRecord,
    data: dict[str, JSON] | None,
    output: str,
) -> MessageDraft:
    """The hook's message, or the ``AGENT_ERROR`` that says why there is none."""
    agent_id = task.agent_id

    def failed(phase: str, error: str) -> MessageDraft:
        return lifecycle.agent_error_draft(
            agent_id=agent_id, phase=phase, error=error, task=task, hook="onComplete"
        )

    if hook.action != "publish_message":
        return failed("hook", f"hook action {hook.action!r} is not run by this server")
    scope = _Scope(task=task, cluster=cluster)
    if hook.transform is not None:
        made = transform_evaluate(
            hook.transform.source,
            result=data,
            triggering_message=scope.trigger(),
            view=scope.view(),
            cluster=scope.info,
            agent=scope.agent,
        )
        if isinstance(made, LogicError):
            return failed("hook_transform", made.message)
        raw: dict[str, JSON] = {"topic": made.topic, "content": made.content}
        if made.receiver is not None:
            raw["receiver"] = made.receiver
        if made.metadata is not None:
            raw["metadata"] = made.metadata
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
            return failed("hook_logic", patch.message)
        if patch is not None:
            config = deep_merge(config, patch)
    substituted = substitute(
        config,
        result=data,
        output_text=output,
        cluster_id=cluster.id,
        cluster_created_at=cluster.created_at,
        iteration=task.iteration,
        error_message=None,
    )
    if isinstance(substituted, LogicError):
        return failed("hook", substituted.message)
    return _checked(substituted, agent_id=agent_id, failed=failed)


def _checked(
    raw: Mapping[str, JSON], *, agent_id: str, failed: Callable[[str, str], MessageDraft]
) -> MessageDraft:
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
    """What a hook script sees, read from the ledger only when a script needs it."""

    def __init__(self, *, task: TaskRecord, cluster: ClusterRecord) -> None:
        self.task = task
        self.cluster = cluster
        self.info = ClusterInfo.of(id=cluster.id, config=cluster.config)
        self.agent = AgentInfo(id=task.agent_id, role=task.role, iteration=task.iteration)

    def trigger(self) -> dict[str, JSON]:
        message = ledger.message_get(
            cluster_id=self.cluster.id, message_id=self.task.trigger_message_id
        )
        return message.to_wire()

    def view(self) -> LedgerView:
        return script_view_read(
            cluster_id=self.cluster.id, up_to_sequence=self.cluster.last_sequence
        )
