"""The state snapshot fold (SPEC §5): a cluster's durable working memory, pure.

Each trigger message replaces one section of the state wholesale with a bounded, cleaned copy of
its structured output. No ORM and no clock: ``updatedAt`` is the message's timestamp, so folding
the same messages always gives the same state (the reference for the concurrent publish path).

Layout: ``shape`` (topics, sections, limits), ``fold`` (applying messages, equality),
``sections`` (one section per trigger topic), ``summary`` (the message text) and ``values``
(the cleaning every section shares).
"""

from __future__ import annotations

from snapshots.state.fold import snapshot_apply, snapshot_content, snapshot_equal, snapshot_fold
from snapshots.state.shape import (
    JSON,
    LIMITS,
    SNAPSHOT_SECTIONS,
    SNAPSHOT_SENDER,
    SNAPSHOT_TOPIC,
    SNAPSHOT_TRIGGER_TOPICS,
    SNAPSHOT_VERSION,
    VOLATILE_FIELDS,
    SnapshotLimits,
)
from snapshots.state.summary import snapshot_summary

__all__ = [
    "JSON",
    "LIMITS",
    "SNAPSHOT_SECTIONS",
    "SNAPSHOT_SENDER",
    "SNAPSHOT_TOPIC",
    "SNAPSHOT_TRIGGER_TOPICS",
    "SNAPSHOT_VERSION",
    "VOLATILE_FIELDS",
    "SnapshotLimits",
    "snapshot_apply",
    "snapshot_content",
    "snapshot_equal",
    "snapshot_fold",
    "snapshot_summary",
]
