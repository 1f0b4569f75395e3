"""Evaluating zeroshot's scripts (SPEC §7.2, §7.5): trigger logic, hook logic and transforms.

Each function runs its script in a fresh sandbox (``runs.logic.engine``) and turns what the script
returned into a typed value, or into a ``LogicError`` that the caller publishes as
``AGENT_ERROR``. Nothing here raises for a bad script.

In every sandbox ``message`` and ``triggeringMessage`` are the same message: the one being
offered (trigger logic) or the one that triggered the task (hooks). Trigger logic and hook logic
run in strict mode with a 1 s limit, as zeroshot runs them; transforms run sloppy, with 5 s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final

from ledger.records import TOPIC_PATTERN
from runs.logic.engine import TIME_LIMIT_S, TRANSFORM_TIME_LIMIT_S, ScriptJob, script_run
from runs.logic.records import (
    JSON,
    AgentInfo,
    ClusterInfo,
    LogicError,
    TransformMessage,
    TriggerOutcome,
)
from runs.logic.view import LedgerView, script_message

_TOPIC: Final = re.compile(TOPIC_PATTERN)


def trigger_logic_evaluate(
    script: str,
    *,
    message: Mapping[str, JSON],
    view: LedgerView,
    cluster: ClusterInfo,
    agent: AgentInfo | None = None,
) -> TriggerOutcome | LogicError:
    """Run a trigger's ``logic`` against the offered message; it passes when it returns truthy."""
    report = script_run(
        ScriptJob(
            script=script,
            mode="trigger",
            strict=True,
            scope_json=_scope(message=message, result=None, agent=agent, cluster=cluster),
            view=view.payload(),
            time_limit=TIME_LIMIT_S,
        )
    )
    if isinstance(report, LogicError):
        return report
    reason = report.get("reason")
    return TriggerOutcome(passed=bool(report["truthy"]), reason=reason if reason else None)


def hook_logic_evaluate(
    script: str,
    *,
    result: Mapping[str, JSON] | None,
    agent: AgentInfo,
    message: Mapping[str, JSON],
    view: LedgerView,
    cluster: ClusterInfo,
) -> dict[str, JSON] | LogicError | None:
    """Run a hook's ``logic``: ``None`` changes nothing; an object is merged into ``config``."""
    report = script_run(
        ScriptJob(
            script=script,
            mode="value",
            strict=True,
            # zeroshot gives hook logic an empty object when the result could not be read.
            scope_json=_scope(message=message, result=result or {}, agent=agent, cluster=cluster),
            view=view.payload(),
            time_limit=TIME_LIMIT_S,
        )
    )
    if isinstance(report, LogicError):
        return report
    kind = report["kind"]
    if kind in ("undefined", "null"):
        return None
    if kind != "object":
        return LogicError("return", f"hook logic must return an object or nothing, not {_a(kind)}")
    if "unserializable" in report:
        return _unserializable(report)
    patch: dict[str, JSON] = report["value"]
    return patch


def transform_evaluate(
    script: str,
    *,
    result: Mapping[str, JSON] | None,
    triggering_message: Mapping[str, JSON],
    view: LedgerView,
    cluster: ClusterInfo,
    agent: AgentInfo | None = None,
) -> TransformMessage | LogicError:
    """Run a hook's ``transform``: it returns the whole message to publish."""
    report = script_run(
        ScriptJob(
            script=script,
            mode="value",
            strict=False,
            scope_json=_scope(
                message=triggering_message, result=result, agent=agent, cluster=cluster
            ),
            view=view.payload(),
            time_limit=TRANSFORM_TIME_LIMIT_S,
        )
    )
    if isinstance(report, LogicError):
        return report
    kind = report["kind"]
    if kind != "object":
        return LogicError(
            "return", f"a transform must return an object {{topic, content}}, not {_a(kind)}"
        )
    if "unserializable" in report:
        return _unserializable(report)
    return _transform_message(report["value"])


def _transform_message(value: dict[str, JSON]) -> TransformMessage | LogicError:
    topic, content = value.get("topic"), value.get("content")
    receiver, metadata = value.get("receiver"), value.get("metadata")
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic):
        shown = json.dumps(topic)[:80] if "topic" in value else "nothing"
        return LogicError(
            "return", f"a transform's topic must match {TOPIC_PATTERN}, it returned {shown}"
        )
    if not isinstance(content, dict):
        return LogicError("return", "a transform must return a content object {text?, data?}")
    if receiver is not None and (not isinstance(receiver, str) or not receiver):
        return LogicError("return", "a transform's receiver must be a non-empty string")
    if metadata is not None and not isinstance(metadata, dict):
        return LogicError("return", "a transform's metadata must be an object")
    return TransformMessage(topic=topic, content=content, receiver=receiver, metadata=metadata)


def _scope(
    *,
    message: Mapping[str, JSON] | None,
    result: Mapping[str, JSON] | None,
    agent: AgentInfo | None,
    cluster: ClusterInfo,
) -> str:
    # Assembled as text so that the cluster's agents, serialised once, are not serialised again.
    parts = {
        "message": json.dumps(script_message(message) if message is not None else None),
        "result": json.dumps(dict(result) if result is not None else None),
        "agent": json.dumps(agent.to_json() if agent is not None else None),
    }
    cluster_json = f'{{"id":{json.dumps(cluster.id)},"agents":{cluster.agents_json}}}'
    fields = ",".join(f'"{name}":{text}' for name, text in parts.items())
    return f'{{{fields},"cluster":{cluster_json}}}'


def _unserializable(report: dict[str, JSON]) -> LogicError:
    return LogicError("return", f"the returned object is not JSON: {report['unserializable']}")


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"
