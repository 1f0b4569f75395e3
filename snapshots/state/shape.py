"""What a snapshot is: its topics, its sections and the limits of what it keeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

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
