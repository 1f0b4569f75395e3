"""The state snapshot fold (SPEC §5): a cluster's durable working memory, pure.

Each trigger message replaces one section of the state wholesale with a bounded, cleaned copy of
its structured output. No ORM and no clock: ``updatedAt`` is the message's timestamp, so folding
the same messages always gives the same state (the reference for the concurrent publish path).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ledger.interfaces import MessageRecord

JSON = Any

SNAPSHOT_TOPIC: Final = "STATE_SNAPSHOT"
SNAPSHOT_SENDER: Final = "state-snapshotter"
SNAPSHOT_VERSION: Final = 1
SNAPSHOT_TRIGGER_TOPICS: Final[tuple[str, ...]] = (
    "ISSUE_OPENED",
    "PLAN_READY",
    "WORKER_PROGRESS",
    "IMPLEMENTATION_READY",
    "VALIDATION_RESULT",
    "INVESTIGATION_COMPLETE",
)
SNAPSHOT_SECTIONS: Final[tuple[str, ...]] = ("task", "plan", "progress", "validation", "debug")
# Volatile fields: they change with every message, so equality ignores them (see snapshot_equal).
VOLATILE_FIELDS: Final = frozenset({"updatedAt", "sourceMessageId"})


@dataclass(frozen=True, slots=True)
class SnapshotLimits:
    """Character limits of text fields and item limits of "last N" lists."""

    task_text: int = 2000
    plan_text: int = 2500
    fix_plan: int = 1200
    summary: int = 300  # task title, plan summary, lastSummary, successCriteria, summary lines
    list_item: int = 200  # every list item, criteria reasons, evidence commands
    acceptance_criteria: int = 10
    files_affected: int = 20
    blockers: int = 5
    next_steps: int = 10
    errors: int = 5
    criteria_results: int = 10
    root_causes: int = 5


LIMITS: Final = SnapshotLimits()


# --- the fold ------------------------------------------------------------------------------------


def snapshot_apply(
    state: Mapping[str, JSON] | None, message: MessageRecord, *, cluster_id: str
) -> dict[str, JSON]:
    """Return the snapshot ``content.data`` after ``message``; ``state`` is never mutated."""
    if message.topic not in SNAPSHOT_TRIGGER_TOPICS:
        raise ValueError(f"{message.topic} is not a snapshot trigger topic")
    sections = _carried_sections(state)
    data = message.data
    timestamp = message.timestamp
    if message.topic == "ISSUE_OPENED":
        _replace(sections, "task", _task_section(message))
    elif message.topic == "PLAN_READY":
        _replace(sections, "plan", _plan_section(message.text, data, timestamp))
    elif message.topic in ("WORKER_PROGRESS", "IMPLEMENTATION_READY"):
        status = _progress_status(data)
        # Without progress fields the message says nothing about progress: keep the old one.
        if status is not None:
            _replace(sections, "progress", _progress_section(message.text, status, timestamp))
    elif message.topic == "VALIDATION_RESULT":
        _replace(sections, "validation", _validation_section(data, timestamp))
    else:  # INVESTIGATION_COMPLETE
        _replace(sections, "debug", _debug_section(message.text, data, timestamp))

    snapshot: dict[str, JSON] = {
        "version": SNAPSHOT_VERSION,
        "updatedAt": timestamp,
        "clusterId": cluster_id,
        "sourceMessageId": message.id,
    }
    for name in SNAPSHOT_SECTIONS:
        if name in sections:
            snapshot[name] = sections[name]
    return snapshot


def snapshot_fold(messages: Iterable[MessageRecord], *, cluster_id: str) -> dict[str, JSON] | None:
    """Fold the trigger messages in the given (sequence) order; ``None`` when there are none."""
    state: dict[str, JSON] | None = None
    for message in messages:
        if message.topic in SNAPSHOT_TRIGGER_TOPICS:
            state = snapshot_apply(state, message, cluster_id=cluster_id)
    return state


def snapshot_equal(a: Mapping[str, JSON] | None, b: Mapping[str, JSON] | None) -> bool:
    """Whether two snapshots hold the same state, ignoring the volatile fields.

    SPEC §5 names ``updatedAt`` and ``sourceMessageId`` as volatile. We drop them at the top level
    *and* ``updatedAt`` inside each section: a section's ``updatedAt`` is only the timestamp of the
    message that produced it, so a re-published identical PLAN_READY would otherwise always count
    as a change and flood the ledger with identical snapshots. Values are compared as canonical
    JSON, so ``true`` differs from ``1`` and key order does not matter.
    """
    if a is None or b is None:
        return a is None and b is None
    return _canonical(a) == _canonical(b)


def snapshot_content(state: Mapping[str, JSON]) -> dict[str, JSON]:
    """The ``content`` of the STATE_SNAPSHOT message that carries ``state``."""
    return {"text": snapshot_summary(state), "data": dict(state)}


# --- the summary ---------------------------------------------------------------------------------


def snapshot_summary(state: Mapping[str, JSON] | None) -> str:
    """At most five lines (Task, Plan, Progress, Validation, Debug), only those that apply."""
    if not isinstance(state, Mapping):
        return ""
    lines = [
        _task_line(_section(state, "task")),
        _plan_line(_section(state, "plan")),
        _progress_line(_section(state, "progress")),
        _validation_line(_section(state, "validation")),
        _debug_line(_section(state, "debug")),
    ]
    return "\n".join(line for line in lines if line)


def _task_line(task: Mapping[str, JSON] | None) -> str | None:
    if task is None:
        return None
    title = _line(task.get("title")) or _first_line(task.get("raw"))
    return f"Task: {title}" if title else None


def _plan_line(plan: Mapping[str, JSON] | None) -> str | None:
    if plan is None:
        return None
    summary = _line(plan.get("summary")) or _first_line(plan.get("text"))
    return f"Plan: {summary}" if summary else None


def _progress_line(progress: Mapping[str, JSON] | None) -> str | None:
    """``Progress: 45% | canValidate=false | next: Write tests``; missing parts are left out.

    With none of the three parts (only blockers or a summary), the last summary stands in; with
    nothing at all there is no line.
    """
    if progress is None:
        return None
    parts: list[str] = []
    percent = _number(progress.get("percentComplete"))
    if percent is not None:
        parts.append(f"{_format_number(percent)}%")
    can_validate = progress.get("canValidate")
    if isinstance(can_validate, bool):
        parts.append(f"canValidate={'true' if can_validate else 'false'}")
    steps = progress.get("nextSteps")
    first_step = _line(steps[0]) if isinstance(steps, list) and steps else None
    if first_step:
        parts.append(f"next: {first_step}")
    if not parts:
        last = _line(progress.get("lastSummary"))
        return f"Progress: {last}" if last else None
    return "Progress: " + " | ".join(parts)


def _validation_line(validation: Mapping[str, JSON] | None) -> str | None:
    """``Validation: rejected (2 errors)``; the count is shown only when there are errors."""
    if validation is None:
        return None
    approved = validation.get("approved")
    status = "approved" if approved is True else "rejected" if approved is False else "pending"
    errors = validation.get("errors")
    count = len(errors) if isinstance(errors, list) else 0
    return f"Validation: {status} ({count} errors)" if count else f"Validation: {status}"


def _debug_line(debug: Mapping[str, JSON] | None) -> str | None:
    if debug is None:
        return None
    first = _first_line(debug.get("fixPlan")) or _line(debug.get("successCriteria"))
    return f"Debug: {first}" if first else None


# --- sections ------------------------------------------------------------------------------------


def _task_section(message: MessageRecord) -> dict[str, JSON] | None:
    data = _as_dict(message.data)
    metadata = _as_dict(message.metadata)
    raw = _text(message.text, LIMITS.task_text)
    title = _line(data.get("title")) or _first_line(raw)
    issue_number = data.get("issue_number")
    if issue_number is None:
        issue_number = data.get("issueNumber")
    source = _line(metadata.get("source"), LIMITS.list_item) or _line(
        data.get("source"), LIMITS.list_item
    )
    # The task has no updatedAt of its own in zeroshot's snapshots (see the fixture ledger).
    return _prune(
        {"raw": raw, "title": title, "issueNumber": _issue_number(issue_number), "source": source}
    )


def _plan_section(text: str | None, data: JSON, timestamp: int) -> dict[str, JSON] | None:
    fields = _as_dict(data)
    return _stamped(
        {
            "text": _text(text, LIMITS.plan_text),
            "summary": _line(fields.get("summary")),
            "acceptanceCriteria": _last(
                [_criterion(item) for item in _as_list(fields.get("acceptanceCriteria"))],
                LIMITS.acceptance_criteria,
            ),
            "filesAffected": _string_list(fields.get("filesAffected"), LIMITS.files_affected),
        },
        timestamp,
    )


def _progress_status(data: JSON) -> dict[str, JSON] | None:
    """The progress fields of a message: ``data.completionStatus``, or ``data`` itself."""
    if not isinstance(data, dict):
        return None
    status = data.get("completionStatus")
    if isinstance(status, dict):
        return status
    if "canValidate" in data or "percentComplete" in data:
        return data
    return None


def _progress_section(
    text: str | None, status: Mapping[str, JSON], timestamp: int
) -> dict[str, JSON] | None:
    return _stamped(
        {
            "canValidate": _boolean(status.get("canValidate")),
            "percentComplete": _number(status.get("percentComplete")),
            "blockers": _string_list(status.get("blockers"), LIMITS.blockers),
            "nextSteps": _string_list(status.get("nextSteps"), LIMITS.next_steps),
            "lastSummary": _line(text) or _line(status.get("summary")),
        },
        timestamp,
    )


def _validation_section(data: JSON, timestamp: int) -> dict[str, JSON] | None:
    fields = _as_dict(data)
    errors = fields.get("errors")
    if not isinstance(errors, list):
        errors = [_issue_text(issue) for issue in _as_list(fields.get("issues"))]
    return _stamped(
        {
            "approved": _boolean(fields.get("approved")),
            "errors": _string_list(errors, LIMITS.errors),
            "criteriaResults": _last(
                [_criteria_result(item) for item in _as_list(fields.get("criteriaResults"))],
                LIMITS.criteria_results,
            ),
        },
        timestamp,
    )


def _debug_section(text: str | None, data: JSON, timestamp: int) -> dict[str, JSON] | None:
    fields = _as_dict(data)
    success = fields.get("successCriteria")
    if isinstance(success, list):
        # Investigators often answer with a list; keep it readable on one line.
        success = "; ".join(item for item in (_line(s) for s in success) if item)
    return _stamped(
        {
            "fixPlan": _text(text, LIMITS.fix_plan),
            "successCriteria": _line(success),
            "rootCauses": _last(
                [_root_cause(item) for item in _as_list(fields.get("rootCauses"))],
                LIMITS.root_causes,
            ),
        },
        timestamp,
    )


def _criterion(item: JSON) -> str | None:
    """``"AC1 (MUST): text"`` for an object, the text itself for a string."""
    if not isinstance(item, dict):
        return _line(item, LIMITS.list_item)
    ident = _line(item.get("id")) or ""
    priority = _line(item.get("priority"))
    body = next(
        (text for key in ("criterion", "text", "summary") if (text := _line(item.get(key)))), ""
    )
    label = f"{ident} ({priority}): " if ident and priority else f"{ident}: " if ident else ""
    return _line(f"{label}{body}", LIMITS.list_item)


def _criteria_result(item: JSON) -> dict[str, JSON] | None:
    if not isinstance(item, dict):
        return None
    evidence = _as_dict(item.get("evidence"))
    return _prune(
        {
            "id": _line(item.get("id"), LIMITS.list_item),
            "status": _line(item.get("status"), LIMITS.list_item),
            "reason": _line(item.get("reason"), LIMITS.list_item),
            "evidence": {
                "command": _line(evidence.get("command"), LIMITS.list_item),
                "exitCode": _number(evidence.get("exitCode")),
            },
        }
    )


def _issue_text(issue: JSON) -> JSON:
    if isinstance(issue, dict):
        for key in ("bug", "message", "error", "summary"):
            if _line(issue.get(key)):
                return issue[key]
        return None
    return issue


def _root_cause(item: JSON) -> str | None:
    if isinstance(item, dict):
        for key in ("cause", "summary", "description"):
            if text := _line(item.get(key), LIMITS.list_item):
                return text
        return None
    return _line(item, LIMITS.list_item)


# --- helpers -------------------------------------------------------------------------------------


def _carried_sections(state: Mapping[str, JSON] | None) -> dict[str, JSON]:
    """Deep copies of the sections of ``state`` (the result never aliases the input)."""
    if not isinstance(state, Mapping):
        return {}
    return {
        name: copy.deepcopy(state[name])
        for name in SNAPSHOT_SECTIONS
        if isinstance(state.get(name), dict) and state[name]
    }


def _replace(sections: dict[str, JSON], name: str, section: dict[str, JSON] | None) -> None:
    """Replace a section wholesale; an empty new section removes the old one."""
    if section:
        sections[name] = section
    else:
        sections.pop(name, None)


def _stamped(fields: dict[str, JSON], timestamp: int) -> dict[str, JSON] | None:
    """The pruned section plus its ``updatedAt``; ``None`` when nothing but the stamp is left."""
    section = _prune(fields)
    if not section:
        return None
    section["updatedAt"] = timestamp
    return section


def _prune(value: dict[str, JSON]) -> dict[str, JSON] | None:
    """Drop None, "", [] and {} recursively (``False`` and ``0`` are values and stay)."""
    pruned = _prune_value(value)
    return pruned if isinstance(pruned, dict) else None


def _prune_value(value: JSON) -> JSON:
    if isinstance(value, dict):
        kept = {k: v for k, v in ((k, _prune_value(v)) for k, v in value.items()) if v is not None}
        return kept or None
    if isinstance(value, list):
        items = [v for v in (_prune_value(item) for item in value) if v is not None]
        return items or None
    if value is None or value == "":
        return None
    return value


def _section(state: Mapping[str, JSON], name: str) -> Mapping[str, JSON] | None:
    section = state.get(name)
    return section if isinstance(section, Mapping) and section else None


def _as_dict(value: JSON) -> dict[str, JSON]:
    return value if isinstance(value, dict) else {}


def _as_list(value: JSON) -> list[JSON]:
    return value if isinstance(value, list) else []


def _last(items: list[Any], limit: int) -> list[Any] | None:
    kept = [item for item in items if item]
    return kept[-limit:] or None


def _string_list(value: JSON, limit: int) -> list[str] | None:
    return _last([_line(item, LIMITS.list_item) for item in _as_list(value)], limit)


def _scalar_text(value: JSON) -> str | None:
    """Strings as they are, finite numbers written out; anything else is not text."""
    if isinstance(value, str):
        return value
    number = _number(value)
    return _format_number(number) if number is not None else None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _text(value: JSON, limit: int) -> str | None:
    """Multi-line text, trimmed and cut to ``limit``."""
    text = _scalar_text(value)
    text = text.strip() if text is not None else None
    return _cut(text, limit) if text else None


def _line(value: JSON, limit: int = LIMITS.summary) -> str | None:
    """One line: runs of whitespace (newlines included) become one space, cut to ``limit``."""
    text = _scalar_text(value)
    text = " ".join(text.split()) if text is not None else None
    return _cut(text, limit) if text else None


def _first_line(value: JSON, limit: int = LIMITS.summary) -> str | None:
    """The first non-empty line of a text, without its Markdown heading marks."""
    text = _scalar_text(value)
    for raw_line in (text or "").splitlines():
        if line := _line(raw_line.strip().lstrip("#"), limit):
            return line
    return None


def _boolean(value: JSON) -> bool | None:
    """A boolean, or the strings "true"/"false" that a stringified placeholder produces."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _number(value: JSON) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def _format_number(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _issue_number(value: JSON) -> int | str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return _line(value, LIMITS.list_item)


def _canonical(state: Mapping[str, JSON]) -> str:
    stable: dict[str, JSON] = {}
    for key, value in state.items():
        if key in VOLATILE_FIELDS:
            continue
        if key in SNAPSHOT_SECTIONS and isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if k != "updatedAt"}
        stable[key] = value
    return json.dumps(stable, sort_keys=True, separators=(",", ":"), default=str)
