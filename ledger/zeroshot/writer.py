"""Writing zeroshot-format ledgers and registries (tests, exports, benchmarks)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from itertools import islice
from pathlib import Path

from ledger.zeroshot.format import (
    _INSERT_SQL,
    _SYNC_SEQUENCE_SQL,
    JSON,
    MESSAGES_DDL,
    SEQUENCE_DDL,
    StrPath,
    ZeroshotCluster,
    ZeroshotMessage,
    ZeroshotSourceError,
    compact_json,
)

# --- writing (tests, export, benchmark) --------------------------------------------------------


def create_ledger_schema(conn: sqlite3.Connection, *, with_sequence_table: bool) -> None:
    """Create zeroshot's ledger schema in WAL mode (the newer tables when asked)."""
    conn.execute("PRAGMA journal_mode=WAL").fetchall()
    conn.executescript(MESSAGES_DDL + (SEQUENCE_DDL if with_sequence_table else ""))


def insert_messages(
    conn: sqlite3.Connection, messages: Iterable[ZeroshotMessage], *, chunk_size: int = 5000
) -> int:
    """Insert messages in one transaction, keeping their rowids; a rowid ≤ 0 lets SQLite pick."""
    rows = (_row_from_message(message) for message in messages)
    count = 0
    with conn:
        while chunk := list(islice(rows, chunk_size)):
            conn.executemany(_INSERT_SQL, chunk)
            count += len(chunk)
        has_sequence = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger_sequence'"
        ).fetchone()
        if has_sequence:
            conn.execute(_SYNC_SEQUENCE_SQL)
    return count


def write_ledger(
    path: StrPath, messages: Iterable[ZeroshotMessage], *, with_sequence_table: bool
) -> int:
    """Write a new zeroshot ledger file holding ``messages``; return how many were written."""
    target = Path(path)
    if target.exists():
        raise ZeroshotSourceError(f"{target} already exists")
    conn = sqlite3.connect(target)
    try:
        create_ledger_schema(conn, with_sequence_table=with_sequence_table)
        count = insert_messages(conn, messages)
    except BaseException:
        conn.close()
        for leftover in (target, Path(f"{target}-wal"), Path(f"{target}-shm")):
            leftover.unlink(missing_ok=True)
        raise
    conn.close()
    return count


def write_clusters_json(
    path: StrPath, clusters: Mapping[str, ZeroshotCluster] | Iterable[ZeroshotCluster]
) -> None:
    """Write a ``clusters.json`` registry the way zeroshot does (indented, atomically)."""
    items = clusters.values() if isinstance(clusters, Mapping) else clusters
    registry: dict[str, JSON] = {}
    for cluster in items:
        entry = dict(cluster.raw)
        entry["id"] = cluster.id
        entry["config"] = cluster.config
        if cluster.state is not None:
            entry["state"] = cluster.state
        if cluster.created_at is not None:
            entry["createdAt"] = cluster.created_at
        registry[cluster.id] = entry
    target = Path(path)
    text = json.dumps(registry, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    # A reader (zeroshot itself) must never see a half-written registry.
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(target)


def _row_from_message(message: ZeroshotMessage) -> tuple[object, ...]:
    return (
        message.rowid if message.rowid > 0 else None,
        message.id,
        message.timestamp,
        message.topic,
        message.sender,
        message.receiver,
        message.content_text,
        None if message.content_data is None else compact_json(message.content_data),
        None if message.metadata is None else compact_json(message.metadata),
        message.cluster_id,
    )
