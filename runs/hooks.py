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

from ledger import interfaces as ledger
from ledger.interfaces import JSON, ClusterRecord, MessageDraft, ServiceError
from runs import lifecycle
from runs.logic import (
    VIEW_MAX_MESSAGES,
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
    agent: Mapping[str, JSON],
    cluster: ClusterRecord,
    result: JSON,
    output: str,
) -> HookOutcome:
    """Read the agent's result, then run its ``hooks.onComplete`` on it."""
    parsed = _parse(agent, result=result, output=output)
    if isinstance(parsed, str):
        return HookOutcome(rejected=parsed)
    data, drafts = parsed
    hook = _on_complete(agent)
    if hook is not None:
        drafts.append(_hook_draft(hook, task=task, cluster=cluster, data=data, output=output))
    return HookOutcome(drafts=drafts, result=data)


def _parse(
    agent: Mapping[str, JSON], *, result: JSON, output: str
) -> tuple[dict[str, JSON] | None, list[MessageDraft]] | str:
    """The result object (None for text agents) and the warnings about it, or a refusal."""
    output_format = agent.get("outputFormat") or "json"
    agent_id = str(agent.get("id"))
    if output_format == "text":
        return None, []
    # The worker's own reading of its output wins; else the server reads the output.
    text = json.dumps(result) if isinstance(result, dict) else output
    if isinstance(result, str) and result.strip():
        text = result
    parsed = result_parse(
        text,
        output_format=str(output_format),
        json_schema=agent.get("jsonSchema"),
        strict=bool(agent.get("strictSchema")),
    )
    if isinstance(parsed, LogicError):
        if parsed.kind == "schema":
            # The agent's own schema is broken: the result is used, and the config reported.
            unchecked = result_parse(text, output_format=str(output_format))
            if isinstance(unchecked, LogicError):
                return unchecked.message
            error = lifecycle.agent_error_draft(
                agent_id=agent_id, phase="result_schema", error=parsed.message
            )
            return unchecked.data, [error]
        return parsed.message
    issues = [issue.text for issue in parsed.schema_issues]
    if not parsed.accepted:
        return "the result does not match the agent's jsonSchema: " + "; ".join(issues)
    drafts = []
    if issues:
        drafts.append(
            MessageDraft(
                topic=lifecycle.SCHEMA_WARNING,
                sender=agent_id,
                content={
                    "text": f"{agent_id}: the result does not match its jsonSchema",
                    "data": {"agent": agent_id, "errors": issues},
                },
            )
        )
    return parsed.data, drafts


def _on_complete(agent: Mapping[str, JSON]) -> Mapping[str, JSON] | None:
    hooks = agent.get("hooks")
    hook = hooks.get("onComplete") if isinstance(hooks, Mapping) else None
    return hook if isinstance(hook, Mapping) else None


def _hook_draft(
    hook: Mapping[str, JSON],
    *,
    task: TaskRecord,
    cluster: ClusterRecord,
    data: dict[str, JSON] | None,
    output: str,
) -> MessageDraft:
    """The hook's message, or the ``AGENT_ERROR`` that says why there is none."""
    agent_id = task.agent_id

    def failed(phase: str, error: str) -> MessageDraft:
        return lifecycle.agent_error_draft(agent_id=agent_id, phase=phase, error=error, task=task)

    if hook.get("action", "publish_message") != "publish_message":
        return failed("hook", f"hook action {hook.get('action')!r} is not run by this server")
    scope = _Scope(task=task, cluster=cluster)
    transform = _script(hook.get("transform"))
    if transform is not None:
        made = transform_evaluate(
            transform,
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
    config = hook.get("config")
    config = dict(config) if isinstance(config, Mapping) else {}
    logic = _script(hook.get("logic"))
    if logic is not None:
        patch = hook_logic_evaluate(
            logic,
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
    """The hook's config as a draft, checked now so that a bad one is reported, not stored."""
    content = raw.get("content")
    metadata = raw.get("metadata")
    draft = MessageDraft(
        topic=raw.get("topic"),  # type: ignore[arg-type]  # checked just below
        sender=agent_id,
        receiver=str(raw.get("receiver") or "broadcast"),
        content=_content(content),
        metadata=metadata if isinstance(metadata, dict) else None,
    )
    try:
        ledger.drafts_check([draft], single=True)
    except ServiceError as error:
        return failed("hook", f"the hook's message is invalid: {error.message}")
    return draft


def _content(content: JSON) -> dict[str, JSON]:
    """``{text, data}`` without the empty parts (SPEC §1.1): a text of None is no text."""
    if not isinstance(content, Mapping):
        return {}
    kept: dict[str, JSON] = {}
    if content.get("text") is not None:
        text = content["text"]
        kept["text"] = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    if "data" in content:
        kept["data"] = content["data"]
    return kept


def _script(value: JSON) -> str | None:
    if isinstance(value, Mapping) and isinstance(value.get("script"), str):
        return str(value["script"])
    return None


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
        messages = ledger.message_window(
            cluster_id=self.cluster.id,
            up_to_sequence=self.cluster.last_sequence,
            limit=VIEW_MAX_MESSAGES,
            skip_topic=lifecycle.AGENT_OUTPUT,
        )
        return LedgerView(m.to_wire() for m in messages)
