"""What other apps may use of the ledger: plain records, reads, writes and API building blocks.

Other apps import from here, or from the two modules that need no Django at all:
``ledger.records`` (the frozen records and the replay policy) and ``ledger.errors`` (the one
error hierarchy). The bounds every input is checked against (``ledger.validation``, Django-free
too, so that the pure cores may import it directly) are here, so that the API, the pages and the
commands of every app check alike. Nothing here hands out a model instance.
``pyproject.toml``'s import contracts check this.
"""

from __future__ import annotations

from ledger.admin_time import admin_time, admin_time_column
from ledger.bus import Subscription, bus
from ledger.consumers import websocket_refusal, websocket_refuse
from ledger.errors import Conflict, Forbidden, InvalidInput, NotFound, ServiceError, TooLarge
from ledger.filters import MessageFilter
from ledger.fleet import (
    ClusterGlance,
    TaskMessages,
    cluster_glance,
    task_messages,
)
from ledger.keys import api_key_create, require_cluster, scoped_cluster
from ledger.labels import LABELS_MAX, labels_parse, labels_stored, labels_text
from ledger.models import ClusterState
from ledger.pipeline import Batch, Stage, Writes, pipeline
from ledger.push import cluster_group, pusher
from ledger.records import (
    JSON,
    ClusterRecord,
    MessageRecord,
    PipelineLag,
    SearchHit,
    replay_allowed,
)
from ledger.schemas import (
    ANY_ERRORS,
    BODY_ERRORS,
    READ_ERRORS,
    ClusterDetailOut,
    ClusterOut,
    ErrorOut,
    MessageOut,
    error_responses,
)
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
    message_window,
    pipeline_lag,
    pipeline_lags,
)
from ledger.services import (
    ClusterWriter,
    ImportedMessage,
    MessageDraft,
    cluster_create,
    cluster_state_set,
    cluster_transaction,
    drafts_check,
    message_import_batch,
    message_publish,
    message_publish_batch,
    now_ms,
)
from ledger.topics import ENDING_TOPICS, Topic
from ledger.validation import (
    AGENT_ID_PATTERN,
    INT32_MAX,
    INT64_MAX,
    TIMESTAMP_MAX,
    JsonValueError,
    agent_id_problem,
    agent_ids_problems,
    integer_check,
    integer_problem,
    json_check,
    json_encode_checked,
    json_storable,
    text_check,
    text_problem,
    text_storable,
    timestamp_check,
    timestamp_problem,
)

__all__ = [
    "AGENT_ID_PATTERN",
    "ANY_ERRORS",
    "BODY_ERRORS",
    "ENDING_TOPICS",
    "INT32_MAX",
    "INT64_MAX",
    "JSON",
    "LABELS_MAX",
    "READ_ERRORS",
    "TIMESTAMP_MAX",
    "Batch",
    "ClusterDetailOut",
    "ClusterGlance",
    "ClusterOut",
    "ClusterRecord",
    "ClusterState",
    "ClusterWriter",
    "Conflict",
    "ErrorOut",
    "Forbidden",
    "ImportedMessage",
    "InvalidInput",
    "JsonValueError",
    "MessageDraft",
    "MessageFilter",
    "MessageOut",
    "MessageRecord",
    "NotFound",
    "PipelineLag",
    "SearchHit",
    "ServiceError",
    "Stage",
    "Subscription",
    "TaskMessages",
    "TooLarge",
    "Topic",
    "Writes",
    "admin_time",
    "admin_time_column",
    "agent_id_problem",
    "agent_ids_problems",
    "api_key_create",
    "bus",
    "cluster_create",
    "cluster_exists",
    "cluster_get",
    "cluster_glance",
    "cluster_group",
    "cluster_list",
    "cluster_state_set",
    "cluster_transaction",
    "drafts_check",
    "error_responses",
    "integer_check",
    "integer_problem",
    "json_check",
    "json_encode_checked",
    "json_storable",
    "labels_parse",
    "labels_stored",
    "labels_text",
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
    "message_window",
    "now_ms",
    "pipeline",
    "pipeline_lag",
    "pipeline_lags",
    "pusher",
    "replay_allowed",
    "require_cluster",
    "scoped_cluster",
    "task_messages",
    "text_check",
    "text_problem",
    "text_storable",
    "timestamp_check",
    "timestamp_problem",
    "websocket_refusal",
    "websocket_refuse",
]
