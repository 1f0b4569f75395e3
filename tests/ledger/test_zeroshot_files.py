"""zeroshot's ledger files and clusters.json, built here from SPEC §6.5 and read back."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ledger.zeroshot import (
    ZeroshotCluster,
    ZeroshotFormatError,
    ZeroshotMessage,
    ZeroshotSourceError,
    count_messages,
    create_ledger_schema,
    discover,
    insert_messages,
    message_to_json,
    open_snapshot,
    read_clusters_json,
    read_messages,
    read_messages_after_rowid,
    write_clusters_json,
    write_ledger,
)

CLUSTER = "amber-falcon-7"


def make_message(rowid: int, timestamp: int, **fields: Any) -> ZeroshotMessage:
    message = ZeroshotMessage(
        rowid=rowid,
        id=f"msg_{rowid:032x}",
        timestamp=timestamp,
        topic="PLAN_READY",
        sender="planner",
        receiver="broadcast",
        content_text=f"step {rowid}",
        content_data={"step": rowid},
        metadata=None,
        cluster_id=CLUSTER,
    )
    return replace(message, **fields)


def read_all(path: Path) -> list[ZeroshotMessage]:
    with open_snapshot(path) as conn:
        return [message for batch in read_messages(conn) for message in batch]


def checksums(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()
    }


# --- schema -----------------------------------------------------------------------------------


def test_written_ledger_has_the_spec_schema_in_wal_mode(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"

    # when
    write_ledger(path, [make_message(1, 1000)], with_sequence_table=False)

    # then
    conn = sqlite3.connect(path)
    try:
        columns = [
            (name, kind, notnull, pk)
            for _, name, kind, notnull, _, pk in conn.execute("PRAGMA table_info(messages)")
        ]
        indexes = {
            row[1]: [c[2] for c in conn.execute(f"PRAGMA index_info({row[1]})")]
            for row in conn.execute("PRAGMA index_list(messages)")
        }
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        journal_mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    assert columns == [
        ("id", "TEXT", 0, 1),
        ("timestamp", "INTEGER", 1, 0),
        ("topic", "TEXT", 1, 0),
        ("sender", "TEXT", 1, 0),
        ("receiver", "TEXT", 1, 0),
        ("content_text", "TEXT", 0, 0),
        ("content_data", "TEXT", 0, 0),
        ("metadata", "TEXT", 0, 0),
        ("cluster_id", "TEXT", 1, 0),
    ]
    assert indexes == {
        "sqlite_autoindex_messages_1": ["id"],
        "idx_timestamp": ["timestamp"],
        "idx_topic": ["topic"],
        "idx_cluster_sender": ["cluster_id", "sender"],
        "idx_cluster_topic": ["cluster_id", "topic"],
        "idx_cluster_timestamp": ["cluster_id", "timestamp"],
    }
    assert tables == {"messages"}
    assert journal_mode == "wal"


def test_sequence_schema_adds_the_counter_and_compaction_tables(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    messages = [make_message(3, 1000), make_message(9, 1001)]

    # when
    write_ledger(path, messages, with_sequence_table=True)

    # then
    conn = sqlite3.connect(path)
    try:
        sequence = conn.execute("SELECT singleton, value FROM ledger_sequence").fetchall()
        compaction = [row[1] for row in conn.execute("PRAGMA table_info(agent_output_compaction)")]
    finally:
        conn.close()
    assert sequence == [(1, 9)]
    assert compaction == [
        "cluster_id",
        "receipt_message_id",
        "first_omitted_timestamp",
        "omitted_messages",
        "omitted_export_bytes",
        "omission_digest",
        "retained_messages",
        "retained_export_bytes",
    ]


def test_write_ledger_refuses_an_existing_file(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    write_ledger(path, [make_message(1, 1000)], with_sequence_table=False)
    before = path.read_bytes()

    # when / then
    with pytest.raises(ZeroshotSourceError, match="already exists"):
        write_ledger(path, [make_message(2, 1001)], with_sequence_table=False)
    assert path.read_bytes() == before


# --- reading ----------------------------------------------------------------------------------


@pytest.mark.parametrize("with_sequence_table", [True, False])
def test_messages_read_back_as_written(tmp_path: Path, with_sequence_table: bool) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    messages = [
        make_message(1, 1000, metadata={"replayPolicy": "context"}),
        make_message(2, 1001, topic="AGENT_OUTPUT", receiver="system", content_data=[1, "ü"]),
        make_message(3, 1002, content_text="x\ny", content_data=False, metadata={"n": None}),
    ]
    write_ledger(path, messages, with_sequence_table=with_sequence_table)

    # when
    read = read_all(path)

    # then
    assert [m.to_message_fields() for m in read] == [m.to_message_fields() for m in messages]
    assert [m.rowid for m in read] == [1, 2, 3]
    assert read[2].content == {"text": "x\ny", "data": False}


def test_json_columns_are_written_compactly_and_unescaped(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    message = make_message(1, 1000, content_data={"a": [1, 2], "é": "ü"}, metadata={"k": "v"})

    # when
    write_ledger(path, [message], with_sequence_table=False)

    # then
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT content_data, metadata FROM messages").fetchone()
    finally:
        conn.close()
    assert row == ('{"a":[1,2],"é":"ü"}', '{"k":"v"}')


def test_invalid_json_columns_read_as_none(tmp_path: Path) -> None:
    # given a ledger whose JSON columns were damaged outside zeroshot
    path = tmp_path / f"{CLUSTER}.db"
    write_ledger(path, [make_message(1, 1000), make_message(2, 1001)], with_sequence_table=False)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE messages SET content_data = '{\"open\": ', metadata = '[1,' WHERE rowid = 1"
        )
        conn.execute(
            "UPDATE messages SET content_data = 'NaN', metadata = 'not json' WHERE rowid = 2"
        )
    conn.close()

    # when
    first, second = read_all(path)

    # then the data key stays, as in zeroshot, but holds null
    assert (first.content_data, first.metadata) == (None, None)
    assert first.content == {"text": "step 1", "data": None}
    assert (second.content_data, second.metadata) == (None, None)


def test_null_content_columns_leave_their_keys_out(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    messages = [
        make_message(1, 1000, content_text=None, content_data=None),
        make_message(2, 1001, content_text="only text", content_data=None),
        make_message(3, 1002, content_text=None, content_data={"only": "data"}),
    ]
    write_ledger(path, messages, with_sequence_table=True)

    # when
    read = read_all(path)

    # then
    assert [m.content for m in read] == [{}, {"text": "only text"}, {"data": {"only": "data"}}]
    assert [m.metadata for m in read] == [None, None, None]


def test_full_read_orders_by_timestamp_then_rowid(tmp_path: Path) -> None:
    # given rowids that disagree with timestamps, and equal timestamps
    path = tmp_path / f"{CLUSTER}.db"
    messages = [
        make_message(1, 2000),
        make_message(2, 1000),
        make_message(3, 2000),
        make_message(4, 1000),
        make_message(5, 1500),
    ]
    write_ledger(path, messages, with_sequence_table=True)

    # when
    with open_snapshot(path) as conn:
        batches = [[m.rowid for m in batch] for batch in read_messages(conn, batch_size=2)]

    # then
    assert batches == [[2, 4], [5, 1], [3]]


def test_full_read_after_a_rowid_keeps_the_timestamp_order(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    messages = [make_message(1, 50), make_message(2, 40), make_message(3, 30), make_message(4, 20)]
    write_ledger(path, messages, with_sequence_table=False)

    # when
    with open_snapshot(path) as conn:
        rowids = [m.rowid for batch in read_messages(conn, after_rowid=2) for m in batch]
        remaining = count_messages(conn, after_rowid=2)

    # then
    assert rowids == [4, 3]
    assert remaining == 2


def test_tailing_reads_new_rows_in_rowid_order(tmp_path: Path) -> None:
    # given rows committed in rowid order with timestamps that go backwards
    path = tmp_path / f"{CLUSTER}.db"
    messages = [make_message(rowid, 100 - rowid) for rowid in range(1, 7)]
    write_ledger(path, messages, with_sequence_table=True)

    # when
    with open_snapshot(path) as conn:
        first = read_messages_after_rowid(conn, 2, 3)
        rest = read_messages_after_rowid(conn, first[-1].rowid, 3)
        nothing = read_messages_after_rowid(conn, 6, 3)

    # then
    assert [m.rowid for m in first] == [3, 4, 5]
    assert [m.rowid for m in rest] == [6]
    assert nothing == []


def test_count_messages_counts_every_row(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    write_ledger(path, [make_message(i, 1000 + i) for i in range(1, 8)], with_sequence_table=False)

    # when
    with open_snapshot(path) as conn:
        total = count_messages(conn)

    # then
    assert total == 7


def test_missing_optional_columns_read_as_defaults(tmp_path: Path) -> None:
    # given an old ledger with only the required columns
    path = tmp_path / f"{CLUSTER}.db"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "CREATE TABLE messages"
            " (id TEXT PRIMARY KEY, timestamp INTEGER, topic TEXT, sender TEXT)"
        )
        conn.execute("INSERT INTO messages VALUES ('msg_1', 1000, 'ISSUE_OPENED', 'system')")
    conn.close()

    # when
    (message,) = read_all(path)

    # then
    assert message.to_message_fields() == {
        "id": "msg_1",
        "cluster_id": CLUSTER,
        "timestamp": 1000,
        "topic": "ISSUE_OPENED",
        "sender": "system",
        "receiver": "broadcast",
        "content": {},
        "metadata": None,
    }


def test_a_file_that_is_not_a_ledger_is_a_format_error(tmp_path: Path) -> None:
    # given
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite at all" * 200)
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()

    # when / then
    with pytest.raises(ZeroshotFormatError, match="not a SQLite database"), open_snapshot(garbage):
        pass
    with open_snapshot(other) as conn, pytest.raises(ZeroshotFormatError, match="no messages"):
        read_messages(conn)


def test_open_snapshot_of_a_missing_file_is_a_source_error(tmp_path: Path) -> None:
    # when / then
    with pytest.raises(ZeroshotSourceError), open_snapshot(tmp_path / "missing.db"):
        pass


# --- WAL and read-only sources ------------------------------------------------------------------


def test_uncheckpointed_wal_is_read_and_the_source_left_untouched(tmp_path: Path) -> None:
    # given a live writer whose rows are still only in its WAL, copied as a backup tool would
    live = tmp_path / "live"
    live.mkdir()
    source = tmp_path / "source"
    source.mkdir()
    writer = sqlite3.connect(live / f"{CLUSTER}.db")
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        create_ledger_schema(writer, with_sequence_table=True)
        insert_messages(writer, [make_message(i, 1000 + i) for i in range(1, 51)])
        for suffix in ("", "-wal", "-shm"):
            shutil.copyfile(live / f"{CLUSTER}.db{suffix}", source / f"{CLUSTER}.db{suffix}")
    finally:
        writer.close()
    before = checksums(source)
    bare = tmp_path / "bare.db"
    shutil.copyfile(source / f"{CLUSTER}.db", bare)
    bare_conn = sqlite3.connect(bare)
    try:
        bare_tables = bare_conn.execute("SELECT name FROM sqlite_master").fetchall()
    finally:
        bare_conn.close()

    # when
    read = read_all(source / f"{CLUSTER}.db")

    # then the rows come from the WAL (the main file alone has not even the schema)
    assert bare_tables == []
    assert [m.rowid for m in read] == list(range(1, 51))
    assert checksums(source) == before
    assert sorted(before) == [f"{CLUSTER}.db", f"{CLUSTER}.db-shm", f"{CLUSTER}.db-wal"]


def test_open_snapshot_deletes_its_copy(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    write_ledger(path, [make_message(1, 1000)], with_sequence_table=False)

    # when
    with open_snapshot(path) as conn:
        copy = Path(conn.execute("PRAGMA database_list").fetchone()[2])
        copy_existed = copy.is_file()

    # then
    assert copy_existed
    assert copy.name == path.name
    assert copy.parent != path.parent
    assert not copy.parent.exists()


# --- clusters.json and discovery -----------------------------------------------------------------


def test_clusters_json_round_trips(tmp_path: Path) -> None:
    # given
    path = tmp_path / "clusters.json"
    cluster = ZeroshotCluster(
        id=CLUSTER,
        config={"agents": [{"id": "planner", "role": "planning"}]},
        state="completed",
        created_at=1770023875452,
        raw={"pid": 42, "autoPr": False},
    )

    # when
    write_clusters_json(path, {CLUSTER: cluster})
    read = read_clusters_json(path)

    # then
    assert json.loads(path.read_text())[CLUSTER]["createdAt"] == 1770023875452
    assert read[CLUSTER].config == cluster.config
    assert read[CLUSTER].agents == [{"id": "planner", "role": "planning"}]
    assert (read[CLUSTER].state, read[CLUSTER].created_at) == ("completed", 1770023875452)
    assert read[CLUSTER].raw["pid"] == 42


def test_clusters_json_tolerates_missing_fields(tmp_path: Path) -> None:
    # given
    path = tmp_path / "clusters.json"
    path.write_text(
        json.dumps(
            {
                "bare": {},
                "odd": {"config": {"agents": "none"}, "state": 3, "createdAt": "1700000000000"},
                "skipped": ["not", "an", "object"],
            }
        )
    )

    # when
    clusters = read_clusters_json(path)

    # then
    assert sorted(clusters) == ["bare", "odd"]
    assert clusters["bare"] == ZeroshotCluster(id="bare", config={"agents": []}, raw={})
    assert clusters["odd"].config == {"agents": []}
    assert (clusters["odd"].state, clusters["odd"].created_at) == (None, 1700000000000)


@pytest.mark.parametrize("text", ["{not json", "[]", '"a string"', "", "null"])
def test_malformed_clusters_json_is_a_format_error(tmp_path: Path, text: str) -> None:
    # given
    path = tmp_path / "clusters.json"
    path.write_text(text)

    # when / then
    with pytest.raises(ZeroshotFormatError, match=r"clusters\.json"):
        read_clusters_json(path)


def test_discover_a_folder_matches_ledgers_to_clusters_json(tmp_path: Path) -> None:
    # given a ~/.zeroshot-style folder
    write_ledger(tmp_path / "alpha-one-1.db", [make_message(1, 1)], with_sequence_table=True)
    write_ledger(tmp_path / "beta-two-2.db", [make_message(1, 1)], with_sequence_table=False)
    (tmp_path / "beta-two-2.db-wal").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a ledger")
    (tmp_path / "nested").mkdir()
    write_ledger(tmp_path / "nested" / "deep-three-3.db", [], with_sequence_table=False)
    alpha = ZeroshotCluster(id="alpha-one-1", config={"agents": [{"id": "w"}]}, state="stopped")
    gone = ZeroshotCluster(id="gone-four-4", config={"agents": []})
    write_clusters_json(tmp_path / "clusters.json", [alpha, gone])

    # when
    sources = discover(tmp_path)

    # then
    assert [(s.cluster_id, s.path.name) for s in sources] == [
        ("alpha-one-1", "alpha-one-1.db"),
        ("beta-two-2", "beta-two-2.db"),
    ]
    assert sources[0].cluster is not None
    assert sources[0].cluster.agents == [{"id": "w"}]
    assert sources[1].cluster is None


def test_discover_a_single_file_uses_the_registry_beside_it(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    write_ledger(path, [make_message(1, 1)], with_sequence_table=True)
    cluster = ZeroshotCluster(id=CLUSTER, config={"agents": []}, state="running")
    write_clusters_json(tmp_path / "clusters.json", [cluster])

    # when
    sources = discover(path)

    # then
    assert [(s.cluster_id, s.path) for s in sources] == [(CLUSTER, path)]
    assert sources[0].cluster is not None
    assert (sources[0].cluster.id, sources[0].cluster.state) == (CLUSTER, "running")


def test_discover_a_folder_with_a_broken_registry_is_a_format_error(tmp_path: Path) -> None:
    # given
    write_ledger(tmp_path / f"{CLUSTER}.db", [], with_sequence_table=False)
    (tmp_path / "clusters.json").write_text("[1, 2")

    # when / then
    with pytest.raises(ZeroshotFormatError):
        discover(tmp_path)


def test_discover_a_missing_path_is_a_source_error(tmp_path: Path) -> None:
    # when / then
    with pytest.raises(ZeroshotSourceError, match="does not exist"):
        discover(tmp_path / "nowhere")


# --- export -------------------------------------------------------------------------------------


def test_message_to_json_is_one_compact_line() -> None:
    # given
    wire = {"id": "msg_1", "content": {"text": "two\nlines, ü"}, "metadata": None}

    # when
    line = message_to_json(wire)

    # then
    assert line == '{"id":"msg_1","content":{"text":"two\\nlines, ü"},"metadata":null}'
    assert "\n" not in line
    assert json.loads(line) == wire
