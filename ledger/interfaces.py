"""What other apps may use of the ledger: plain records, reads, writes and API building blocks.

Other apps import from here, or from the two modules that need no Django at all:
``ledger.records`` (the frozen records and the replay policy) and ``ledger.errors`` (the one
error hierarchy). Nothing here hands out a model instance. ``pyproject.toml``'s import contracts
check this.
"""

from __future__ import annotations

from ledger.bus import Subscription, bus, cluster_group
from ledger.consumers import websocket_refusal
from ledger.errors import Conflict, Forbidden, InvalidInput, NotFound, ServiceError, TooLarge
from ledger.filters import MessageFilter
from ledger.keys import require_cluster, scoped_cluster
from ledger.models import ClusterState
from ledger.records import JSON, ClusterRecord, MessageRecord, SearchHit, replay_allowed
from ledger.schemas import ClusterDetailOut, ClusterOut, MessageOut
from ledger.selectors import (
    cluster_exists,
    cluster_get,
    cluster_list,
    lifecycle_event_latest,
    message_at_sequence,
    message_get,
    message_latest,
    message_query,
    message_search,
    message_select,
    message_tail_topics,
    message_timeline,
)
from ledger.services import (
    ClusterWriter,
    ImportedMessage,
    MessageDraft,
    cluster_create,
    cluster_state_set,
    cluster_transaction,
    message_import_batch,
    message_publish,
    message_publish_batch,
    now_ms,
)

__all__ = [
    "JSON",
    "ClusterDetailOut",
    "ClusterOut",
    "ClusterRecord",
    "ClusterState",
    "ClusterWriter",
    "Conflict",
    "Forbidden",
    "ImportedMessage",
    "InvalidInput",
    "MessageDraft",
    "MessageFilter",
    "MessageOut",
    "MessageRecord",
    "NotFound",
    "SearchHit",
    "ServiceError",
    "Subscription",
    "TooLarge",
    "bus",
    "cluster_create",
    "cluster_exists",
    "cluster_get",
    "cluster_group",
    "cluster_list",
    "cluster_state_set",
    "cluster_transaction",
    "lifecycle_event_latest",
    "message_at_sequence",
    "message_get",
    "message_import_batch",
    "message_latest",
    "message_publish",
    "message_publish_batch",
    "message_query",
    "message_search",
    "message_select",
    "message_tail_topics",
    "message_timeline",
    "now_ms",
    "replay_allowed",
    "require_cluster",
    "scoped_cluster",
    "websocket_refusal",
]
