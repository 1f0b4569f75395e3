"""Interop with real files written by zeroshot (SPEC §6.5), kept in ``tests/fixtures/zeroshot``.

They are only ever read through copies.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ledger.zeroshot import (
    ZeroshotMessage,
    count_messages,
    discover,
    open_snapshot,
    read_clusters_json,
    read_messages,
)
from tests.fixtures import ZEROSHOT

FIXTURES = ZEROSHOT

CLUSTER = "emerald-prism-4"
LEDGER = FIXTURES / f"{CLUSTER}.db"
UNCHECKPOINTED = FIXTURES / "wal-uncheckpointed" / f"{CLUSTER}.db"

# (id, timestamp, topic, sender) of every row, in rowid order, as zeroshot stored them.
EXPECTED = [
    ("msg_73342869779cb0ab5646746b5baf7ff7", 1770023875553, "AGENT_LIFECYCLE", "test-conductor"),
    ("msg_2498c3c33452d5e584d04b1bd7fc834f", 1770023875560, "AGENT_LIFECYCLE", "git-pusher"),
    ("msg_2a6776e437ef8610b6031e7faeab9d20", 1770023875561, "ISSUE_OPENED", "system"),
    ("msg_766d88b363f30cb6b40f14346be8d2d7", 1770023875567, "STATE_SNAPSHOT", "state-snapshotter"),
    ("msg_706be75ccaec8983840581d0e3768d9d", 1770023875573, "AGENT_LIFECYCLE", "test-conductor"),
    ("msg_960ff9f32725f63e4dbd00dd65c45e4b", 1770023875590, "AGENT_LIFECYCLE", "test-conductor"),
    ("msg_7fc04feedae8a31ae03e0971b5ae36dd", 1770023905596, "AGENT_LIFECYCLE", "test-conductor"),
    ("msg_51796cf52fbe8a255c88e3fa6b6ef66c", 1770023907899, "AGENT_LIFECYCLE", "test-conductor"),
    ("msg_2f657c93239243623e9c34ff3e7f1905", 1770023907932, "AGENT_LIFECYCLE", "test-conductor"),
    ("msg_f860023600837ccc3fee412f15d9854d", 1770023937947, "AGENT_LIFECYCLE", "test-conductor"),
    ("msg_4c41042e581e1b1bf99f7cd4d580ca0e", 1770023941757, "AGENT_LIFECYCLE", "test-conductor"),
    ("msg_83d28091796c73483835edfd4165edb7", 1770023941766, "AGENT_LIFECYCLE", "test-conductor"),
]


def fixture_state() -> dict[str, tuple[str, int]]:
    """Checksum and modification time of every fixture file."""
    return {
        str(p.relative_to(FIXTURES)): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(FIXTURES.rglob("*"))
        if p.is_file()
    }


def read_all(path: Path) -> tuple[int, list[ZeroshotMessage]]:
    with open_snapshot(path) as conn:
        return count_messages(conn), [m for batch in read_messages(conn) for m in batch]


def test_the_real_ledger_reads_as_stored() -> None:
    # when
    count, messages = read_all(LEDGER)

    # then
    assert count == 12
    assert [(m.id, m.timestamp, m.topic, m.sender) for m in messages] == EXPECTED
    assert [m.rowid for m in messages] == list(range(1, 13))
    assert {m.cluster_id for m in messages} == {CLUSTER}
    issue = messages[2]
    assert issue.receiver == "broadcast"
    assert issue.content == {
        "text": "# Manual Input\n\nAdd a login button\n",
        "data": {"issue_number": None, "title": "Manual Input"},
    }
    assert issue.metadata == {"source": "text"}
    assert messages[0].receiver == "system"
    assert messages[0].metadata is None
    assert messages[0].content_data["event"] == "STARTED"
    assert messages[3].content_data["clusterId"] == CLUSTER


def test_the_uncheckpointed_copy_gives_the_same_rows() -> None:
    # given the same ledger whose rows are only in its WAL file
    _, checkpointed = read_all(LEDGER)

    # when
    count, messages = read_all(UNCHECKPOINTED)

    # then
    assert count == 12
    assert messages == checkpointed


def test_reading_leaves_the_fixture_files_unchanged() -> None:
    # given
    before = fixture_state()

    # when
    read_all(LEDGER)
    read_all(UNCHECKPOINTED)
    discover(FIXTURES)

    # then
    assert fixture_state() == before
    assert "wal-uncheckpointed/emerald-prism-4.db-wal" in before


def test_clusters_json_gives_the_cluster_config_with_its_agents() -> None:
    # when
    clusters = read_clusters_json(FIXTURES / "clusters.json")

    # then
    cluster = clusters[CLUSTER]
    assert cluster.id == CLUSTER
    assert cluster.state == "running"
    assert cluster.created_at == 1770023875452
    assert [a["id"] for a in cluster.agents] == ["test-conductor", "git-pusher"]
    assert [a["role"] for a in cluster.agents] == ["conductor", "completion-detector"]
    assert cluster.config["agents"][0]["triggers"] == [
        {"topic": "ISSUE_OPENED", "action": "execute_task"}
    ]
    assert cluster.raw["autoPr"] is True


def test_discover_the_fixture_folder_finds_the_ledger_and_its_cluster() -> None:
    # when
    sources = discover(FIXTURES)

    # then
    assert [(s.cluster_id, s.path) for s in sources] == [(CLUSTER, LEDGER)]
    assert sources[0].cluster is not None
    assert sources[0].cluster.state == "running"
