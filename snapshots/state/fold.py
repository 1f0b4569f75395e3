"""Folding trigger messages into the snapshot state, and comparing two states."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping

from ledger.records import MessageRecord
from snapshots.state.sections import (
    debug_section,
    plan_section,
    progress_section,
    progress_status,
    task_section,
    validation_section,
)
from snapshots.state.shape import (
    JSON,
    SNAPSHOT_SECTIONS,
    SNAPSHOT_TRIGGER_TOPICS,
    SNAPSHOT_VERSION,
    VOLATILE_FIELDS,
)
from snapshots.state.summary import snapshot_summary


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
        _replace(sections, "task", task_section(message))
    elif message.topic == "PLAN_READY":
        _replace(sections, "plan", plan_section(message.text, data, timestamp))
    elif message.topic in ("WORKER_PROGRESS", "IMPLEMENTATION_READY"):
        status = progress_status(data)
        # Without progress fields the message says nothing about progress: keep the old one.
        if status is not None:
            _replace(sections, "progress", progress_section(message.text, status, timestamp))
    elif message.topic == "VALIDATION_RESULT":
        _replace(sections, "validation", validation_section(data, timestamp))
    else:  # INVESTIGATION_COMPLETE
        _replace(sections, "debug", debug_section(message.text, data, timestamp))

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


def _canonical(state: Mapping[str, JSON]) -> str:
    stable: dict[str, JSON] = {}
    for key, value in state.items():
        if key in VOLATILE_FIELDS:
            continue
        if key in SNAPSHOT_SECTIONS and isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if k != "updatedAt"}
        stable[key] = value
    return json.dumps(stable, sort_keys=True, separators=(",", ":"), default=str)
