"""The STATE_SNAPSHOT message text: one line per section that has something to say."""

from __future__ import annotations

from collections.abc import Mapping

from snapshots.state.shape import JSON
from snapshots.state.values import finite_number, first_line, number_text, one_line


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
    title = one_line(task.get("title")) or first_line(task.get("raw"))
    return f"Task: {title}" if title else None


def _plan_line(plan: Mapping[str, JSON] | None) -> str | None:
    if plan is None:
        return None
    summary = one_line(plan.get("summary")) or first_line(plan.get("text"))
    return f"Plan: {summary}" if summary else None


def _progress_line(progress: Mapping[str, JSON] | None) -> str | None:
    """``Progress: 45% | canValidate=false | next: Write tests``; missing parts are left out.

    With none of the three parts (only blockers or a summary), the last summary stands in; with
    nothing at all there is no line.
    """
    if progress is None:
        return None
    parts: list[str] = []
    percent = finite_number(progress.get("percentComplete"))
    if percent is not None:
        parts.append(f"{number_text(percent)}%")
    can_validate = progress.get("canValidate")
    if isinstance(can_validate, bool):
        parts.append(f"canValidate={'true' if can_validate else 'false'}")
    steps = progress.get("nextSteps")
    first_step = one_line(steps[0]) if isinstance(steps, list) and steps else None
    if first_step:
        parts.append(f"next: {first_step}")
    if not parts:
        last = one_line(progress.get("lastSummary"))
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
    first = first_line(debug.get("fixPlan")) or one_line(debug.get("successCriteria"))
    return f"Debug: {first}" if first else None


def _section(state: Mapping[str, JSON], name: str) -> Mapping[str, JSON] | None:
    section = state.get(name)
    return section if isinstance(section, Mapping) and section else None
