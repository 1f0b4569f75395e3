"""Writes to the ledger: clusters, publishing and imports (SPEC §1.1, §1.2).

Layout: ``writer`` (the one write transaction every write goes through), ``drafts`` (what a
publisher asks for, and its checks), ``publish``, ``clusters`` (creation and state) and
``imports`` (messages from other ledgers that keep their ids and timestamps) with
``imported_rows`` (their checks and bulk insert, column by column).
"""

from __future__ import annotations

from ledger.services.clusters import (
    CLUSTER_ID_RE,
    cluster_config_check,
    cluster_create,
    cluster_create_transaction,
    cluster_id_generate,
    cluster_state_set,
)
from ledger.services.config_versions import (
    cluster_config_at,
    cluster_config_change,
    cluster_config_versions,
)
from ledger.services.drafts import MessageDraft, drafts_check, message_draft_check
from ledger.services.imported_rows import (
    ImportedMessage,
    ImportRows,
    import_cache,
    imported_messages_check,
    imported_rows_from_json,
)
from ledger.services.imports import message_import_backfill, message_import_batch
from ledger.services.publish import message_publish, message_publish_batch, now_ms
from ledger.services.writer import (
    STATE_BY_TOPIC,
    ClusterWriter,
    cluster_transaction,
)

__all__ = [
    "CLUSTER_ID_RE",
    "STATE_BY_TOPIC",
    "ClusterWriter",
    "ImportRows",
    "ImportedMessage",
    "MessageDraft",
    "cluster_config_at",
    "cluster_config_change",
    "cluster_config_check",
    "cluster_config_versions",
    "cluster_create",
    "cluster_create_transaction",
    "cluster_id_generate",
    "cluster_state_set",
    "cluster_transaction",
    "drafts_check",
    "import_cache",
    "imported_messages_check",
    "imported_rows_from_json",
    "message_draft_check",
    "message_import_backfill",
    "message_import_batch",
    "message_publish",
    "message_publish_batch",
    "now_ms",
]
