"""zeroshot's own files: the per-cluster SQLite ledgers and the ``clusters.json`` registry.

Plain Python over ``sqlite3`` (no ORM), shared by the import and export commands, the benchmark
and the tests, so that there is one reading of the format (SPEC §6.5). The schema follows
zeroshot's ``src/ledger.js``: ``messages`` plus, in newer versions, ``ledger_sequence`` and
``agent_output_compaction``; a message's position there is its SQLite ``rowid``.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
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
_COPY_ATTEMPTS = 5


class ZeroshotFormatError(InvalidInput):
    """A zeroshot file that cannot be read as what it claims to be."""

    code = "zeroshot_format"


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


# --- reading ledgers -------------------------------------------------------------------------


@contextmanager
def open_snapshot(path: StrPath) -> Iterator[sqlite3.Connection]:
    """Open a private copy of a ledger and its WAL files; delete the copy afterwards."""
    source = Path(path)
    if not source.is_file():
        raise ZeroshotSourceError(f"{source} is not a file")
    # Even a `mode=ro` connection writes the source's -shm file (and may recover its WAL), and
    # zeroshot may be writing the ledger right now. Copying the database with its -wal and -shm
    # leaves the source untouched, and SQLite applies the copied WAL when it opens the copy, so
    # rows that were never checkpointed are read too.
    with tempfile.TemporaryDirectory(prefix="zeroshot-snapshot-") as tmp:
        copy = _copy_ledger_files(source, Path(tmp))
        conn = sqlite3.connect(copy)
        try:
            try:
                conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            except sqlite3.DatabaseError as exc:
                raise ZeroshotFormatError(f"{source} is not a SQLite database: {exc}") from exc
            yield conn
        finally:
            conn.close()


def read_messages(
    conn: sqlite3.Connection, *, after_rowid: int = 0, batch_size: int = 5000
) -> Iterator[list[ZeroshotMessage]]:
    """Yield the messages in zeroshot's replay order, ``(timestamp, rowid)``, in batches."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    select, default_cluster_id = _select_messages(conn)
    sql = f"{select} WHERE rowid > ? ORDER BY timestamp, rowid"
    # Not a generator itself, so that a file that is no ledger fails here, not at the first batch.
    return _batches(conn.execute(sql, (after_rowid,)), batch_size, default_cluster_id)


def read_messages_after_rowid(
    conn: sqlite3.Connection, after_rowid: int, limit: int = 1000
) -> list[ZeroshotMessage]:
    """The next ``limit`` messages after ``after_rowid`` in rowid (commit) order, for tailing."""
    select, default_cluster_id = _select_messages(conn)
    rows = conn.execute(f"{select} WHERE rowid > ? ORDER BY rowid LIMIT ?", (after_rowid, limit))
    return [_message_from_row(row, default_cluster_id) for row in rows]


def count_messages(conn: sqlite3.Connection, *, after_rowid: int = 0) -> int:
    """How many messages the ledger holds after ``after_rowid`` (for a progress bar)."""
    _message_columns(conn)
    row = conn.execute("SELECT COUNT(*) FROM messages WHERE rowid > ?", (after_rowid,)).fetchone()
    return int(row[0])


def _batches(
    cursor: sqlite3.Cursor, batch_size: int, default_cluster_id: str
) -> Iterator[list[ZeroshotMessage]]:
    try:
        while rows := cursor.fetchmany(batch_size):
            yield [_message_from_row(row, default_cluster_id) for row in rows]
    finally:
        cursor.close()


def _message_columns(conn: sqlite3.Connection) -> set[str]:
    try:
        columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(messages)")}
    except sqlite3.DatabaseError as exc:
        raise ZeroshotFormatError(f"not a zeroshot ledger: {exc}") from exc
    if not columns:
        raise ZeroshotFormatError("not a zeroshot ledger: there is no messages table")
    missing = REQUIRED_COLUMNS - columns
    if missing:
        raise ZeroshotFormatError(
            f"not a zeroshot ledger: messages lacks {', '.join(sorted(missing))}"
        )
    return columns


def _select_messages(conn: sqlite3.Connection) -> tuple[str, str]:
    columns = _message_columns(conn)
    # Column names come from MESSAGE_COLUMNS only, never from the file.
    select = ", ".join(name if name in columns else f"NULL AS {name}" for name in MESSAGE_COLUMNS)
    # open_snapshot keeps the file name, so a ledger without cluster ids is named by its file.
    main = next((row for row in conn.execute("PRAGMA database_list") if row[1] == "main"), None)
    default_cluster_id = Path(main[2]).stem if main is not None and main[2] else ""
    return f"SELECT rowid, {select} FROM messages", default_cluster_id


def _message_from_row(row: tuple[Any, ...], default_cluster_id: str) -> ZeroshotMessage:
    rowid, id_, timestamp, topic, sender, receiver, text, data, metadata, cluster_id = row
    return ZeroshotMessage(
        rowid=int(rowid),
        id=_as_text(id_) or "",
        timestamp=int(timestamp),
        topic=_as_text(topic) or "",
        sender=_as_text(sender) or "",
        receiver=_as_text(receiver) or DEFAULT_RECEIVER,
        content_text=_as_text(text),
        content_data=_parse_json(data),
        metadata=_parse_json(metadata),
        cluster_id=_as_text(cluster_id) or default_cluster_id,
        has_content_data=data is not None,
    )


def _as_text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


# One decoder for every column: ``json.loads`` with an option builds a new one per call.
_JSON_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _parse_json(value: object) -> JSON:
    """Parse a JSON column; NULL and anything that is not strict JSON read as None."""
    text = _as_text(value)
    if text is None:
        return None
    try:
        return _JSON_DECODER.decode(text)
    except ValueError:
        return None


def _copy_ledger_files(source: Path, target_dir: Path) -> Path:
    """Copy a ledger with its -wal and -shm, again while a live writer changes them mid-copy."""
    names = [source.name, f"{source.name}-wal", f"{source.name}-shm"]
    for _ in range(_COPY_ATTEMPTS):
        before = _file_stamps(source.parent, names)
        for name in names:
            target = target_dir / name
            if name in before:
                # copyfile, not copy2: the copy must be writable even when the source is not.
                shutil.copyfile(source.parent / name, target)
            else:
                target.unlink(missing_ok=True)
        # The -shm is an index that SQLite rebuilds from the WAL, so only these two must hold still.
        if _file_stamps(source.parent, names[:2]) == {
            name: stamp for name, stamp in before.items() if name in names[:2]
        }:
            return target_dir / source.name
    raise ZeroshotSourceError(
        f"{source} kept changing while it was copied; try again when its writer is idle"
    )


def _file_stamps(folder: Path, names: Iterable[str]) -> dict[str, tuple[int, int]]:
    stamps: dict[str, tuple[int, int]] = {}
    for name in names:
        try:
            stat = (folder / name).stat()
        except FileNotFoundError:
            continue
        stamps[name] = (stat.st_size, stat.st_mtime_ns)
    return stamps


# --- clusters.json and discovery ---------------------------------------------------------------


def read_clusters_json(path: StrPath) -> dict[str, ZeroshotCluster]:
    """Read a ``clusters.json`` registry; entries that are not objects are skipped."""
    registry = Path(path)
    try:
        raw = json.loads(registry.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ZeroshotSourceError(f"cannot read {registry}: {exc}") from exc
    except ValueError as exc:
        raise ZeroshotFormatError(f"{registry} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ZeroshotFormatError(
            f"{registry} must hold a JSON object of clusters, not {type(raw).__name__}"
        )
    return {
        key: _cluster_from_json(key, entry) for key, entry in raw.items() if isinstance(entry, dict)
    }


def _cluster_from_json(key: str, entry: dict[str, JSON]) -> ZeroshotCluster:
    config = dict(entry["config"]) if isinstance(entry.get("config"), dict) else {}
    if not isinstance(config.get("agents"), list):
        config["agents"] = []
    state = entry.get("state")
    return ZeroshotCluster(
        # The key names the ledger file, so it wins over an inner id that disagrees.
        id=key,
        config=config,
        state=state if isinstance(state, str) else None,
        created_at=_milliseconds(entry.get("createdAt")),
        raw=entry,
    )


def _milliseconds(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def discover(path: StrPath) -> list[LedgerSource]:
    """The ledgers at ``path``: one ``.db`` file, or those directly inside a zeroshot folder."""
    root = Path(path)
    if root.is_dir():
        files = sorted(p for p in root.iterdir() if p.suffix == LEDGER_SUFFIX and p.is_file())
        registry = root / CLUSTERS_JSON
    elif root.is_file():
        files = [root]
        # A ledger picked from ~/.zeroshot still gets its config from the registry beside it.
        registry = root.parent / CLUSTERS_JSON
    else:
        raise ZeroshotSourceError(f"{root} does not exist")
    clusters = read_clusters_json(registry) if registry.is_file() else {}
    return [LedgerSource(cluster_id=f.stem, path=f, cluster=clusters.get(f.stem)) for f in files]


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


# --- JSON -----------------------------------------------------------------------------------


def compact_json(value: JSON) -> str:
    """JSON as zeroshot's ``JSON.stringify`` writes it: no spaces, characters unescaped."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def message_to_json(wire: dict[str, JSON]) -> str:
    """One message's wire shape (SPEC §1.1) as a single JSON Lines line, without the newline."""
    return compact_json(wire)
