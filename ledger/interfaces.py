"""What other apps may use of the ledger: plain records, reads and writes.

Nothing here hands out a model instance: other apps receive frozen dataclasses.
"""

from __future__ import annotations

from ledger.bus import bus
from ledger.records import JSON, ClusterRecord, MessageRecord, replay_allowed
from ledger.selectors import (
    cluster_get,
    cluster_list,
    lifecycle_event_latest,
    message_at_sequence,
    message_get,
    message_latest,
    message_query,
    message_select,
    message_tail_topics,
)
from ledger.services import (
    ImportedMessage,
    MessageDraft,
    cluster_clock_advance,
    cluster_create,
    cluster_lock,
    message_import_batch,
    message_publish,
    message_publish_batch,
    now_ms,
)

__all__ = [
    "JSON",
    "ClusterRecord",
    "ImportedMessage",
    "MessageDraft",
    "MessageRecord",
    "bus",
    "cluster_clock_advance",
    "cluster_create",
    "cluster_get",
    "cluster_list",
    "cluster_lock",
    "lifecycle_event_latest",
    "message_at_sequence",
    "message_get",
    "message_import_batch",
    "message_latest",
    "message_publish",
    "message_publish_batch",
    "message_query",
    "message_select",
    "message_tail_topics",
    "now_ms",
    "replay_allowed",
]
