"""One snapshot section per trigger topic, built from the message alone."""

from __future__ import annotations

from collections.abc import Mapping

from ledger.records import MessageRecord
from snapshots.state.shape import JSON, LIMITS
from snapshots.state.values import (
    as_boolean,
    as_dict,
    as_list,
    finite_number,
    first_line,
    keep_last,
    one_line,
    string_list,
    trimmed_text,
)


def task_section(message: MessageRecord) -> dict[str, JSON] | None:
    data = as_dict(message.data)
    metadata = as_dict(message.metadata)
    raw = trimmed_text(message.text, LIMITS.task_text)
    title = one_line(data.get("title")) or first_line(raw)
    issue_number = data.get("issue_number")
    if issue_number is None:
        issue_number = data.get("issueNumber")
    source = one_line(metadata.get("source"), LIMITS.list_item) or one_line(
        data.get("source"), LIMITS.list_item
    )
    # The task has no updatedAt of its own in zeroshot's snapshots (see the fixture ledger).
    return _prune(
        {"raw": raw, "title": title, "issueNumber": _issue_number(issue_number), "source": source}
    )


def plan_section(text: str | None, data: JSON, timestamp: int) -> dict[str, JSON] | None:
    fields = as_dict(data)
    return _stamped(
        {
            "text": trimmed_text(text, LIMITS.plan_text),
            "summary": one_line(fields.get("summary")),
            "acceptanceCriteria": keep_last(
                [_criterion(item) for item in as_list(fields.get("acceptanceCriteria"))],
                LIMITS.acceptance_criteria,
            ),
            "filesAffected": string_list(fields.get("filesAffected"), LIMITS.files_affected),
        },
        timestamp,
    )


def progress_status(data: JSON) -> dict[str, JSON] | None:
    """The progress fields of a message: ``data.completionStatus``, or ``data`` itself."""
    if not isinstance(data, dict):
        return None
    status = data.get("completionStatus")
    if isinstance(status, dict):
        return status
    if "canValidate" in data or "percentComplete" in data:
        return data
    return None


def progress_section(
    text: str | None, status: Mapping[str, JSON], timestamp: int
) -> dict[str, JSON] | None:
    return _stamped(
        {
            "canValidate": as_boolean(status.get("canValidate")),
            "percentComplete": finite_number(status.get("percentComplete")),
            "blockers": string_list(status.get("blockers"), LIMITS.blockers),
            "nextSteps": string_list(status.get("nextSteps"), LIMITS.next_steps),
            "lastSummary": one_line(text) or one_line(status.get("summary")),
        },
        timestamp,
    )


def validation_section(data: JSON, timestamp: int) -> dict[str, JSON] | None:
    fields = as_dict(data)
    errors = fields.get("errors")
    if not isinstance(errors, list):
        errors = [_issue_text(issue) for issue in as_list(fields.get("issues"))]
    return _stamped(
        {
            "approved": as_boolean(fields.get("approved")),
            "errors": string_list(errors, LIMITS.errors),
            "criteriaResults": keep_last(
                [_criteria_result(item) for item in as_list(fields.get("criteriaResults"))],
                LIMITS.criteria_results,
            ),
        },
        timestamp,
    )


def debug_section(text: str | None, data: JSON, timestamp: int) -> dict[str, JSON] | None:
    fields = as_dict(data)
    success = fields.get("successCriteria")
    if isinstance(success, list):
        # Investigators often answer with a list; keep it readable on one line.
        success = "; ".join(item for item in (one_line(s) for s in success) if item)
    return _stamped(
        {
            "fixPlan": trimmed_text(text, LIMITS.fix_plan),
            "successCriteria": one_line(success),
            "rootCauses": keep_last(
                [_root_cause(item) for item in as_list(fields.get("rootCauses"))],
                LIMITS.root_causes,
            ),
        },
        timestamp,
    )


def _criterion(item: JSON) -> str | None:
    """``"AC1 (MUST): text"`` for an object, the text itself for a string."""
    if not isinstance(item, dict):
        return one_line(item, LIMITS.list_item)
    ident = one_line(item.get("id")) or ""
    priority = one_line(item.get("priority"))
    body = next(
        (text for key in ("criterion", "text", "summary") if (text := one_line(item.get(key)))), ""
    )
    label = f"{ident} ({priority}): " if ident and priority else f"{ident}: " if ident else ""
    return one_line(f"{label}{body}", LIMITS.list_item)


def _criteria_result(item: JSON) -> dict[str, JSON] | None:
    if not isinstance(item, dict):
        return None
    evidence = as_dict(item.get("evidence"))
    return _prune(
        {
            "id": one_line(item.get("id"), LIMITS.list_item),
            "status": one_line(item.get("status"), LIMITS.list_item),
            "reason": one_line(item.get("reason"), LIMITS.list_item),
            "evidence": {
                "command": one_line(evidence.get("command"), LIMITS.list_item),
                "exitCode": finite_number(evidence.get("exitCode")),
            },
        }
    )


def _issue_text(issue: JSON) -> JSON:
    if isinstance(issue, dict):
        for key in ("bug", "message", "error", "summary"):
            if one_line(issue.get(key)):
                return issue[key]
        return None
    return issue


def _root_cause(item: JSON) -> str | None:
    if isinstance(item, dict):
        for key in ("cause", "summary", "description"):
            if text := one_line(item.get(key), LIMITS.list_item):
                return text
        return None
    return one_line(item, LIMITS.list_item)


def _issue_number(value: JSON) -> int | str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return one_line(value, LIMITS.list_item)


# --- pruning -------------------------------------------------------------------------------------


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
