"""Reading zeroshot's ledgers and registry through private copies (SPEC §6.5).

A source file is never opened by SQLite in place: it is copied with its WAL first, so an import
never changes it, even while zeroshot is writing.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ledger.zeroshot.format import (
    CLUSTERS_JSON,
    DEFAULT_RECEIVER,
    JSON,
    LEDGER_SUFFIX,
    MESSAGE_COLUMNS,
    REQUIRED_COLUMNS,
    LedgerSource,
    StrPath,
    ZeroshotCluster,
    ZeroshotColumns,
    ZeroshotFormatError,
    ZeroshotMessage,
    ZeroshotRowError,
    ZeroshotSourceError,
    as_text,
    read_json_column,
    read_json_values,
)

_COPY_ATTEMPTS = 5


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
        copy = copy_ledger_files(source, Path(tmp))
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
) -> Generator[list[ZeroshotMessage], None, None]:
    """Yield the messages in zeroshot's replay order, ``(timestamp, rowid)``, in batches.

    Close it (``contextlib.closing``) before the connection when not reading to the end.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    select, default_cluster_id = _select_messages(conn)
    sql = f"{select} WHERE rowid > ? ORDER BY timestamp, rowid"
    # Not a generator itself, so that a file that is no ledger fails here, not at the first batch.
    return _batches(conn.execute(sql, (after_rowid,)), batch_size, default_cluster_id)


def read_message_columns(
    conn: sqlite3.Connection, *, after_rowid: int = 0, batch_size: int = 5000
) -> Generator[ZeroshotColumns, None, None]:
    """``read_messages`` as columns, for an import that stores many rows: no object per row.

    Close it (``contextlib.closing``) before the connection when not reading to the end.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    select, _ = _select_messages(conn)
    sql = f"{select} WHERE rowid > ? ORDER BY timestamp, rowid"
    return _column_batches(conn.execute(sql, (after_rowid,)), batch_size)


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
) -> Generator[list[ZeroshotMessage], None, None]:
    try:
        while rows := cursor.fetchmany(batch_size):
            yield [_message_from_row(row, default_cluster_id) for row in rows]
    finally:
        cursor.close()


def _column_batches(
    cursor: sqlite3.Cursor, batch_size: int
) -> Generator[ZeroshotColumns, None, None]:
    try:
        while rows := cursor.fetchmany(batch_size):
            yield _columns(rows)
    finally:
        cursor.close()


def _columns(rows: list[tuple[Any, ...]]) -> ZeroshotColumns:
    """Rows as columns, each value read as ``_message_from_row`` reads it."""
    rowids, ids, timestamps, topics, senders, receivers, texts, data, metadata, _ = (
        list(column) for column in zip(*rows, strict=True)
    )
    if set(map(type, timestamps)) != {int}:
        timestamps = [_timestamp(t, rowid=r) for t, r in zip(timestamps, rowids, strict=True)]
    data = _texts(data)
    metadata = _texts(metadata)
    data_values, data_unreadable = read_json_values(data)
    metadata_values, metadata_unreadable = read_json_values(metadata)
    # A column that is not NULL gives ``content.data``, null when its text is not JSON.
    for index in data_unreadable:
        data[index] = "null"
    # Metadata is stored as SQL NULL when it is null or not JSON.
    if metadata_values.count(None) != metadata.count(None):
        metadata = [
            None if value is None else text
            for text, value in zip(metadata, metadata_values, strict=True)
        ]
    return ZeroshotColumns(
        rowids=rowids,
        ids=_strings(ids, ""),
        timestamps=timestamps,
        topics=_strings(topics, ""),
        senders=_strings(senders, ""),
        receivers=_strings(receivers, DEFAULT_RECEIVER),
        content_texts=_texts(texts),
        content_data=data,
        content_data_values=data_values,
        metadata=metadata,
        metadata_values=metadata_values,
        json_unreadable=len(data_unreadable | metadata_unreadable),
    )


def _strings(column: list[Any], default: str) -> list[str]:
    """A column of strings, NULL and empty read as ``default``, other types as text."""
    if set(map(type, column)) <= {str} and (default == "" or "" not in column):
        return column
    return [as_text(value) or default for value in column]


def _texts(column: list[Any]) -> list[str | None]:
    """A column of text or NULL, other types as text."""
    if set(map(type, column)) <= {str, type(None)}:
        return column
    return [as_text(value) for value in column]


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
    content_data, data_unreadable = read_json_column(data)
    metadata_value, metadata_unreadable = read_json_column(metadata)
    return ZeroshotMessage(
        rowid=int(rowid),
        id=as_text(id_) or "",
        timestamp=_timestamp(timestamp, rowid=int(rowid)),
        topic=as_text(topic) or "",
        sender=as_text(sender) or "",
        receiver=as_text(receiver) or DEFAULT_RECEIVER,
        content_text=as_text(text),
        content_data=content_data,
        metadata=metadata_value,
        cluster_id=as_text(cluster_id) or default_cluster_id,
        has_content_data=data is not None,
        json_unreadable=data_unreadable or metadata_unreadable,
    )


def _timestamp(value: object, *, rowid: int) -> int:
    """A row's timestamp as an integer of ms; SQLite's column affinity lets text or NULL in."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    shown = repr(value) if not isinstance(value, str | bytes) else repr(value[:40])
    raise ZeroshotRowError(rowid, f"timestamp is {shown}, not an integer of milliseconds")


def copy_ledger_files(source: Path, target_dir: Path) -> Path:
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
        try:
            files = sorted(p for p in root.iterdir() if p.suffix == LEDGER_SUFFIX and p.is_file())
        except OSError as exc:
            raise ZeroshotSourceError(f"cannot read the folder {root}: {exc.strerror}") from exc
        registry = root / CLUSTERS_JSON
    elif root.is_file():
        files = [root]
        # A ledger picked from ~/.zeroshot still gets its config from the registry beside it.
        registry = root.parent / CLUSTERS_JSON
    else:
        raise ZeroshotSourceError(f"{root} does not exist")
    clusters = read_clusters_json(registry) if registry.is_file() else {}
    return [LedgerSource(cluster_id=f.stem, path=f, cluster=clusters.get(f.stem)) for f in files]
