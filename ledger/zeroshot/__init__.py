"""zeroshot's own files: the per-cluster SQLite ledgers and the ``clusters.json`` registry.

Layout: ``format`` (schema, rows, registry entries, JSON as zeroshot writes it), ``reader``
(private copies, rows, discovery of a ``~/.zeroshot`` folder), ``writer`` (new ledgers and
registries) and ``follow`` (a live ledger's new rows, poll after poll).
"""

from __future__ import annotations

from ledger.zeroshot.follow import LedgerTail
from ledger.zeroshot.format import (
    CLUSTERS_JSON,
    DEFAULT_RECEIVER,
    JSON,
    LEDGER_SUFFIX,
    MESSAGE_COLUMNS,
    MESSAGES_DDL,
    REQUIRED_COLUMNS,
    SEQUENCE_DDL,
    LedgerSource,
    StrPath,
    ZeroshotCluster,
    ZeroshotColumns,
    ZeroshotFormatError,
    ZeroshotMessage,
    ZeroshotRowError,
    ZeroshotSourceError,
    compact_json,
    message_to_json,
)
from ledger.zeroshot.reader import (
    copy_ledger_files,
    count_messages,
    discover,
    open_snapshot,
    read_clusters_json,
    read_message_columns,
    read_messages,
    read_messages_after_rowid,
)
from ledger.zeroshot.writer import (
    create_ledger_schema,
    insert_messages,
    write_clusters_json,
    write_ledger,
)

__all__ = [
    "CLUSTERS_JSON",
    "DEFAULT_RECEIVER",
    "JSON",
    "LEDGER_SUFFIX",
    "MESSAGES_DDL",
    "MESSAGE_COLUMNS",
    "REQUIRED_COLUMNS",
    "SEQUENCE_DDL",
    "LedgerSource",
    "LedgerTail",
    "StrPath",
    "ZeroshotCluster",
    "ZeroshotColumns",
    "ZeroshotFormatError",
    "ZeroshotMessage",
    "ZeroshotRowError",
    "ZeroshotSourceError",
    "compact_json",
    "copy_ledger_files",
    "count_messages",
    "create_ledger_schema",
    "discover",
    "insert_messages",
    "message_to_json",
    "open_snapshot",
    "read_clusters_json",
    "read_message_columns",
    "read_messages",
    "read_messages_after_rowid",
    "write_clusters_json",
    "write_ledger",
]
