"""zeroshot's file formats (SPEC §6.5): the ledger schema, its rows and the registry entries.

Plain Python over ``sqlite3`` (no ORM), shared by the import and export commands, the benchmark
and the tests, so that there is one reading of the format. The schema follows zeroshot's
``src/ledger.js``: ``messages`` plus, in newer versions, ``ledger_sequence`` and
``agent_output_compaction``; a message's position there is its SQLite ``rowid``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from json.scanner import make_scanner
from pathlib import Path
from typing import Any

from ledger.errors import InvalidInput, ServiceError

# A JSON value as produced by ``json.loads``.
JSON = Any
StrPath = str | os.PathLike[str]

CLUSTERS_JSON = "clusters.json"
LEDGER_SUFFIX = ".db"
DEFAULT_RECEIVER = "broadcast"

MESSAGE_COLUMNS = (
    "id",
    "timestamp",
    "topic",
    "sender",
    "receiver",
    "content_text",
    "content_data",
    "metadata",
    "cluster_id",
)
# Without these a row is not a message; the others read as NULL when an old file lacks them.
REQUIRED_COLUMNS = frozenset({"id", "timestamp", "topic", "sender"})

MESSAGES_DDL = """
CREATE TABLE IF NOT EXISTS messages (
  id TEXT PRIMARY KEY,
  timestamp INTEGER NOT NULL,
  topic TEXT NOT NULL,
  sender TEXT NOT NULL,
  receiver TEXT NOT NULL,
  content_text TEXT,
  content_data TEXT,
  metadata TEXT,
  cluster_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_timestamp ON messages(timestamp);
CREATE INDEX IF NOT EXISTS idx_topic ON messages(topic);
CREATE INDEX IF NOT EXISTS idx_cluster_sender ON messages(cluster_id, sender);
CREATE INDEX IF NOT EXISTS idx_cluster_topic ON messages(cluster_id, topic);
CREATE INDEX IF NOT EXISTS idx_cluster_timestamp ON messages(cluster_id, timestamp);
"""

SEQUENCE_DDL = """
CREATE TABLE IF NOT EXISTS agent_output_compaction (
  cluster_id TEXT PRIMARY KEY,
  receipt_message_id TEXT,
  first_omitted_timestamp INTEGER,
  omitted_messages INTEGER NOT NULL DEFAULT 0,
  omitted_export_bytes INTEGER NOT NULL DEFAULT 0,
  omission_digest TEXT NOT NULL,
  retained_messages INTEGER NOT NULL DEFAULT 0,
  retained_export_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS ledger_sequence (
  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
  value INTEGER NOT NULL
);
INSERT OR IGNORE INTO ledger_sequence (singleton, value) VALUES (1, 0);
"""

_INSERT_SQL = (
    "INSERT INTO messages (rowid, id, timestamp, topic, sender, receiver,"
    " content_text, content_data, metadata, cluster_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# zeroshot allocates rowids from this counter so that a rowid freed by compaction is never reused.
_SYNC_SEQUENCE_SQL = (
    "UPDATE ledger_sequence SET value = MAX(value, COALESCE((SELECT MAX(rowid) FROM messages), 0))"
    " WHERE singleton = 1"
)


class ZeroshotFormatError(InvalidInput):
    """A zeroshot file that cannot be read as what it claims to be."""

    code = "zeroshot_format"


class ZeroshotRowError(ZeroshotFormatError):
    """A row of a ledger that cannot be read as a message; ``rowid`` names it."""

    def __init__(self, rowid: int, message: str) -> None:
        super().__init__(f"row {rowid}: {message}", details={"rowid": rowid})
        self.rowid = rowid


class ZeroshotSourceError(ServiceError):
    """A zeroshot path that is missing, already taken, or kept changing while being copied."""

    code = "zeroshot_source"


@dataclass(frozen=True, slots=True)
class ZeroshotMessage:
    """One row of a zeroshot ``messages`` table, its JSON columns parsed."""

    rowid: int
    id: str
    timestamp: int
    topic: str
    sender: str
    receiver: str
    content_text: str | None
    content_data: JSON
    metadata: JSON
    cluster_id: str
    # The column held a value even if it parsed to null or was invalid: ``content.data`` exists.
    has_content_data: bool = False
    # ``content_data`` or ``metadata`` held text that is not JSON; it reads as null.
    json_unreadable: bool = False

    @property
    def content(self) -> dict[str, JSON]:
        """The content object ``{text?, data?}``, a key only for a column that is not NULL."""
        content: dict[str, JSON] = {}
        if self.content_text is not None:
            content["text"] = self.content_text
        if self.content_data is not None or self.has_content_data:
            content["data"] = self.content_data
        return content

    def to_message_fields(self) -> dict[str, JSON]:
        """The SPEC §1.1 fields of this message (everything but our own ``sequence``)."""
        return {
            "id": self.id,
            "cluster_id": self.cluster_id,
            "timestamp": self.timestamp,
            "topic": self.topic,
            "sender": self.sender,
            "receiver": self.receiver,
            "content": self.content,
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class ZeroshotColumns:
    """A batch of rows of a ``messages`` table, one list per column, for a fast import.

    Strings are read as ``ZeroshotMessage`` reads them (an id may be ``""``). The JSON columns
    keep their text: ``content_data`` is ``None`` for NULL and ``"null"`` for text that is not
    JSON, ``metadata`` is ``None`` for NULL, null or text that is not JSON; ``…_values`` hold
    what each parsed to.
    """

    rowids: list[int]
    ids: list[str]
    timestamps: list[int]
    topics: list[str]
    senders: list[str]
    receivers: list[str]
    content_texts: list[str | None]
    content_data: list[str | None]
    content_data_values: list[JSON]
    metadata: list[str | None]
    metadata_values: list[JSON]
    # Rows whose content_data or metadata held text that is not JSON.
    json_unreadable: int

    def __len__(self) -> int:
        return len(self.rowids)


@dataclass(frozen=True, slots=True)
class ZeroshotCluster:
    """One entry of ``clusters.json``; ``raw`` keeps every field zeroshot wrote."""

    id: str
    config: dict[str, JSON]
    state: str | None = None
    created_at: int | None = None
    raw: dict[str, JSON] = field(default_factory=dict)

    @property
    def agents(self) -> list[dict[str, JSON]]:
        agents = self.config.get("agents")
        return [a for a in agents if isinstance(a, dict)] if isinstance(agents, list) else []


@dataclass(frozen=True, slots=True)
class LedgerSource:
    """One ledger file to import, with its ``clusters.json`` entry when there is one."""

    cluster_id: str
    path: Path
    cluster: ZeroshotCluster | None = None


# --- JSON -----------------------------------------------------------------------------------


def as_text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


# One decoder for every column: ``json.loads`` with an option builds a new one per call.
_JSON_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
# Its scanner, which ``decode`` only wraps in skipping whitespace around the value.
_JSON_SCAN = make_scanner(_JSON_DECODER)  # type: ignore[arg-type]  # typeshed wants the C type


def read_json_column(value: object) -> tuple[JSON, bool]:
    """A JSON column's value, and whether it held text that is not strict JSON (read as None).

    NaN and Infinity are not JSON; nesting too deep for the parser is unreadable too.
    """
    text = as_text(value)
    if text is None:
        return None, False
    try:
        return _JSON_DECODER.decode(text), False
    except (ValueError, RecursionError):
        return None, True


def read_json_values(column: list[str | None]) -> tuple[list[JSON], set[int]]:
    """``read_json_column`` over a column of text: what each parsed to (``None`` for NULL or
    unreadable), and the indexes of the unreadable ones."""
    values: list[JSON] = []
    unreadable: set[int] = set()
    append = values.append
    # Text with no whitespace around its value (zeroshot writes none) is parsed by one call
    # into C; any other text goes through ``decode``, which also says what is wrong with it.
    scan = _JSON_SCAN
    for index, text in enumerate(column):
        if text is None:
            append(None)
            continue
        try:
            value, end = scan(text, 0)
            if end != len(text):
                value = _JSON_DECODER.decode(text)
        except StopIteration:
            try:
                value = _JSON_DECODER.decode(text)
            except (ValueError, RecursionError):
                value = None
                unreadable.add(index)
        except (ValueError, RecursionError):
            value = None
            unreadable.add(index)
        append(value)
    return values, unreadable


def compact_json(value: JSON) -> str:
    """JSON as zeroshot's ``JSON.stringify`` writes it: no spaces, characters unescaped."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def message_to_json(wire: dict[str, JSON]) -> str:
    """One message's wire shape (SPEC §1.1) as a single JSON Lines line, without the newline."""
    return compact_json(wire)
