"""Importing zeroshot ledgers built here from SPEC §6.5 (`zeroshot_import`, `import_zeroshot`)."""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import replace
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from ledger.bus import bus
from ledger.importing import zeroshot_import
from ledger.models import Cluster, Message
from ledger.selectors import cluster_get, message_tail
from ledger.services import (
    ImportedMessage,
    cluster_create,
    message_import_backfill,
    message_import_batch,
)
from ledger.zeroshot import ZeroshotCluster, ZeroshotMessage, write_clusters_json, write_ledger

pytestmark = pytest.mark.django_db

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


def varied_messages() -> list[ZeroshotMessage]:
    """Rows whose rowid order differs from their timestamp order, with every content shape."""
    return [
        make_message(1, 1000, topic="ISSUE_OPENED", sender="system", metadata={"source": "text"}),
        make_message(2, 1003, content_text=None, content_data={"only": "data"}),
        make_message(3, 1001, content_data=None, receiver="validator"),
        make_message(4, 1001, content_text=None, content_data=None, metadata={"a": [1, 2]}),
        make_message(5, 1002, topic="AGENT_OUTPUT", content_text="", content_data=0),
        make_message(6, 1002, content_data=False, metadata={"replayPolicy": "context"}),
    ]


def stored(cluster_id: str) -> list[dict[str, Any]]:
    return [r.to_wire() for r in message_tail(cluster_id=cluster_id, after=0, limit=1000)]


def expected_wires(messages: list[ZeroshotMessage]) -> list[dict[str, Any]]:
    """What the ledger must hold: zeroshot's replay order, sequences 1.., the source's fields."""
    ordered = sorted(messages, key=lambda m: (m.timestamp, m.rowid))
    wires = []
    for sequence, m in enumerate(ordered, start=1):
        wire: dict[str, Any] = {
            "id": m.id,
            "sequence": str(sequence),
            "timestamp": m.timestamp,
            "cluster_id": CLUSTER,
            "topic": m.topic,
            "sender": m.sender,
            "receiver": m.receiver,
        }
        if m.content:
            wire["content"] = m.content
        wire["metadata"] = m.metadata
        wires.append(wire)
    return wires


def checksums(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


@pytest.mark.parametrize("with_sequence_table", [False, True], ids=["old", "sequence"])
def test_both_schemas_import_with_exact_fields(tmp_path: Path, with_sequence_table: bool) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    messages = varied_messages()
    write_ledger(path, messages, with_sequence_table=with_sequence_table)

    # when
    report = zeroshot_import(path=path)

    # then
    assert [(r.cluster_id, r.imported, r.skipped, r.created) for r in report.ledgers] == [
        (CLUSTER, 6, 0, True)
    ]
    assert stored(CLUSTER) == expected_wires(messages)
    replayable = dict(Message.objects.values_list("message_id", "replayable"))
    assert replayable["msg_00000000000000000000000000000005"] is False


def test_a_second_import_adds_nothing(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    write_ledger(path, varied_messages(), with_sequence_table=True)
    zeroshot_import(path=path)
    before = stored(CLUSTER)

    # when
    report = zeroshot_import(path=path)

    # then
    assert [(r.imported, r.skipped, r.created) for r in report.ledgers] == [(0, 6, False)]
    assert stored(CLUSTER) == before
    assert cluster_get(cluster_id=CLUSTER).last_sequence == 6


def test_new_rows_of_a_grown_ledger_are_appended(tmp_path: Path) -> None:
    # given a ledger imported once, then written to again
    path = tmp_path / f"{CLUSTER}.db"
    write_ledger(path, [make_message(1, 1000), make_message(2, 1001)], with_sequence_table=True)
    zeroshot_import(path=path)
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        ("msg_new", 1002, "PLAN_READY", "planner", "broadcast", "again", None, None, CLUSTER),
    )
    conn.commit()
    conn.close()

    # when
    report = zeroshot_import(path=path)

    # then
    assert [(r.imported, r.skipped) for r in report.ledgers] == [(1, 2)]
    assert [(w["id"], w["sequence"]) for w in stored(CLUSTER)][-1] == ("msg_new", "3")


def test_a_folder_with_clusters_json_picks_up_the_cluster(tmp_path: Path) -> None:
    # given a ~/.zeroshot-style folder: two ledgers, one of them in the registry
    agents = [{"id": "planner", "role": "planning"}, {"id": "worker", "role": "implementation"}]
    write_ledger(tmp_path / f"{CLUSTER}.db", [make_message(1, 5000)], with_sequence_table=True)
    other = [make_message(1, 7000, cluster_id="quiet-heron-2")]
    write_ledger(tmp_path / "quiet-heron-2.db", other, with_sequence_table=False)
    write_clusters_json(
        tmp_path / "clusters.json",
        [ZeroshotCluster(id=CLUSTER, config={"agents": agents}, state="killed", created_at=4000)],
    )
    (tmp_path / "notes.txt").write_text("not a ledger")

    # when
    report = zeroshot_import(path=tmp_path)

    # then
    assert [(r.cluster_id, r.imported) for r in report.ledgers] == [
        (CLUSTER, 1),
        ("quiet-heron-2", 1),
    ]
    known = cluster_get(cluster_id=CLUSTER)
    assert (known.config, known.state, known.created_at) == ({"agents": agents}, "killed", 4000)
    unknown = cluster_get(cluster_id="quiet-heron-2")
    assert (unknown.config, unknown.state, unknown.created_at) == ({"agents": []}, "stopped", 7000)


def test_without_a_registry_the_final_topic_gives_the_state(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    messages = [make_message(1, 1000), make_message(2, 1001, topic="CLUSTER_COMPLETE")]
    write_ledger(path, messages, with_sequence_table=True)

    # when
    zeroshot_import(path=path)

    # then
    assert cluster_get(cluster_id=CLUSTER).state == "completed"


def test_an_existing_cluster_is_kept_and_only_gains_messages(tmp_path: Path) -> None:
    # given
    cluster_create(cluster_id=CLUSTER, config={"agents": [{"id": "mine"}]}, created_at=1)
    path = tmp_path / f"{CLUSTER}.db"
    write_ledger(path, varied_messages(), with_sequence_table=True)
    write_clusters_json(
        tmp_path / "clusters.json",
        [ZeroshotCluster(id=CLUSTER, config={"agents": []}, state="failed", created_at=9)],
    )

    # when
    report = zeroshot_import(path=tmp_path)

    # then
    assert report.ledgers[0].created is False
    cluster = cluster_get(cluster_id=CLUSTER)
    assert (cluster.config, cluster.state, cluster.created_at) == (
        {"agents": [{"id": "mine"}]},
        "initializing",
        1,
    )
    assert len(stored(CLUSTER)) == 6


def test_an_uncheckpointed_wal_ledger_imports_every_row_and_stays_unchanged(
    tmp_path: Path,
) -> None:
    # given a ledger whose rows are only in its WAL, with its writer still open
    path = tmp_path / f"{CLUSTER}.db"
    write_ledger(path, [], with_sequence_table=True)
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    rows = [make_message(i, 1000 + i) for i in range(1, 51)]
    with writer:
        writer.executemany(
            "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    m.id,
                    m.timestamp,
                    m.topic,
                    m.sender,
                    m.receiver,
                    m.content_text,
                    "{}",
                    None,
                    CLUSTER,
                )
                for m in rows
            ],
        )
    assert (tmp_path / f"{CLUSTER}.db-wal").stat().st_size > 0
    before = checksums(tmp_path)

    # when
    try:
        report = zeroshot_import(path=path)
    finally:
        after = checksums(tmp_path)
        writer.close()

    # then
    assert report.ledgers[0].imported == 50
    assert [w["id"] for w in stored(CLUSTER)] == [m.id for m in rows]
    assert after == before


def test_invalid_json_columns_import_as_null(tmp_path: Path) -> None:
    # given
    path = tmp_path / f"{CLUSTER}.db"
    write_ledger(path, [], with_sequence_table=False)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ("msg_bad", 1000, "PLAN_READY", "planner", "broadcast", "hi", "{oops", "NaN", CLUSTER),
        )
    conn.close()

    # when
    zeroshot_import(path=path)

    # then
    [wire] = stored(CLUSTER)
    assert wire["content"] == {"text": "hi", "data": None}
    assert wire["metadata"] is None


def test_a_file_that_is_no_ledger_is_reported_and_the_others_still_import(
    tmp_path: Path,
) -> None:
    # given
    write_ledger(tmp_path / f"{CLUSTER}.db", [make_message(1, 1000)], with_sequence_table=True)
    (tmp_path / "broken-one.db").write_bytes(b"this is not sqlite" * 100)

    # when
    report = zeroshot_import(path=tmp_path)

    # then
    assert [(r.cluster_id, r.imported, r.error is None) for r in report.ledgers] == [
        (CLUSTER, 1, True),
        ("broken-one", 0, False),
    ]
    assert not Cluster.objects.filter(pk="broken-one").exists()


def test_the_command_prints_a_summary_per_ledger_and_a_bar_for_big_ledgers(
    tmp_path: Path,
) -> None:
    # given a ledger of more than 10,000 rows and a small one
    big = [make_message(i, 1000 + i, cluster_id="big-one-1") for i in range(1, 10_002)]
    write_ledger(tmp_path / "big-one-1.db", big, with_sequence_table=True)
    write_ledger(tmp_path / f"{CLUSTER}.db", [make_message(1, 1)], with_sequence_table=True)
    out, err = StringIO(), StringIO()

    # when
    call_command("import_zeroshot", str(tmp_path), stdout=out, stderr=err)
    call_command("import_zeroshot", str(tmp_path / f"{CLUSTER}.db"), stdout=out, stderr=err)

    # then
    assert out.getvalue().splitlines() == [
        f"{CLUSTER}: imported 1, skipped 0 (new cluster)",
        "big-one-1: imported 10001, skipped 0 (new cluster)",
        f"{CLUSTER}: imported 0, skipped 1",
    ]
    bar = err.getvalue().splitlines()
    assert bar[0].startswith("big-one-1 [......")
    assert bar[-1] == f"big-one-1 [{'#' * 30}] 100% 10001/10001"
    assert not any(line.startswith(CLUSTER) for line in bar)


def test_the_command_fails_for_a_missing_path_or_a_broken_ledger(tmp_path: Path) -> None:
    # given
    (tmp_path / "broken-one.db").write_bytes(b"x" * 4096)

    # when / then
    missing = StringIO()
    with pytest.raises(CommandError, match="1 source"):
        call_command(
            "import_zeroshot", str(tmp_path / "nowhere.db"), stdout=StringIO(), stderr=missing
        )
    assert "nowhere.db does not exist" in missing.getvalue()
    err = StringIO()
    with pytest.raises(CommandError, match="1 source"):
        call_command("import_zeroshot", str(tmp_path), stdout=StringIO(), stderr=err)
    assert "broken-one: not imported" in err.getvalue()


def test_a_new_cluster_is_filled_without_the_bus_and_later_rows_reach_it(
    tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    # given a subscriber that takes imported messages too, and a ledger never imported
    seen: list[str] = []
    bus.subscribe(lambda m: seen.append(m.id))
    path = tmp_path / f"{CLUSTER}.db"
    write_ledger(path, [make_message(1, 1000), make_message(2, 1001)], with_sequence_table=True)

    # when it is imported into a new cluster, then grows and is imported again
    with django_capture_on_commit_callbacks(execute=True):
        zeroshot_import(path=path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ("msg_new", 1002, "PLAN_READY", "planner", "broadcast", "again", None, None, CLUSTER),
        )
    conn.close()
    with django_capture_on_commit_callbacks(execute=True):
        zeroshot_import(path=path)

    # then the history went in without deliveries; the row added to an existing cluster was one
    assert seen == ["msg_new"]
    assert [w["id"] for w in stored(CLUSTER)] == [
        "msg_00000000000000000000000000000001",
        "msg_00000000000000000000000000000002",
        "msg_new",
    ]


def test_an_import_larger_than_one_id_lookup_skips_exactly_the_stored_ids() -> None:
    # given a cluster holding 6,000 messages, more than one look-up of stored ids covers
    cluster_create(cluster_id=CLUSTER)
    messages = [
        ImportedMessage(
            f"m{i}", 1000 + i, "AGENT_OUTPUT", "worker", "broadcast", {"text": "x"}, None
        )
        for i in range(6001)
    ]
    message_import_backfill(cluster_id=CLUSTER, messages=messages[:6000])

    # when all of them are imported again with one new message
    stored_now = message_import_batch(cluster_id=CLUSTER, messages=messages)

    # then only the new one is stored, after the others
    assert [(r.id, r.sequence) for r in stored_now] == [("m6000", 6001)]
    assert cluster_get(cluster_id=CLUSTER).last_sequence == 6001
    assert Message.objects.filter(cluster_id=CLUSTER).count() == 6001
