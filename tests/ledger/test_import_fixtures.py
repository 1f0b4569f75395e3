"""Importing the real zeroshot ledger of ``tests/fixtures/zeroshot`` (SPEC §5, §6.5)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from ledger.importing import zeroshot_import
from ledger.selectors import cluster_get, message_tail
from ledger.zeroshot import open_snapshot, read_messages
from tests.fixtures import ZEROSHOT

FIXTURES = ZEROSHOT

# The snapshotter must get the chance to react (it does not to imports): commits happen.
pytestmark = pytest.mark.django_db(transaction=True)

CLUSTER = "emerald-prism-4"
LEDGER = FIXTURES / f"{CLUSTER}.db"
UNCHECKPOINTED = FIXTURES / "wal-uncheckpointed" / f"{CLUSTER}.db"


def fixture_state() -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(FIXTURES)): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(FIXTURES.rglob("*"))
        if p.is_file()
    }


def source_wires(path: Path) -> list[dict[str, Any]]:
    """The source's rows as our wire shape, read independently of the import (sequence aside)."""
    with open_snapshot(path) as conn:
        rows = [m for batch in read_messages(conn) for m in batch]
    wires = []
    for m in rows:
        wire: dict[str, Any] = {
            "id": m.id,
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


def stored() -> list[dict[str, Any]]:
    return [r.to_wire() for r in message_tail(cluster_id=CLUSTER, after=0, limit=1000)]


def without_sequence(wires: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in w.items() if k != "sequence"} for w in wires]


def test_the_real_ledger_imports_its_12_messages_exactly() -> None:
    # given
    before = fixture_state()

    # when
    report = zeroshot_import(path=LEDGER)

    # then
    assert [(r.cluster_id, r.imported, r.skipped) for r in report.ledgers] == [(CLUSTER, 12, 0)]
    messages = stored()
    assert [w["sequence"] for w in messages] == [str(i) for i in range(1, 13)]
    assert without_sequence(messages) == source_wires(LEDGER)
    assert messages[0]["id"] == "msg_73342869779cb0ab5646746b5baf7ff7"
    assert messages[2]["content"] == {
        "text": "# Manual Input\n\nAdd a login button\n",
        "data": {"issue_number": None, "title": "Manual Input"},
    }
    assert messages[2]["metadata"] == {"source": "text"}
    assert fixture_state() == before


def test_the_uncheckpointed_copy_gives_the_same_12_and_stays_unchanged() -> None:
    # given
    before = fixture_state()

    # when
    report = zeroshot_import(path=UNCHECKPOINTED)

    # then
    assert report.ledgers[0].imported == 12
    assert without_sequence(stored()) == source_wires(LEDGER)
    assert fixture_state() == before
    assert "wal-uncheckpointed/emerald-prism-4.db-wal" in before


def test_a_second_import_of_either_copy_adds_nothing() -> None:
    # given
    zeroshot_import(path=LEDGER)
    first = stored()

    # when
    again = zeroshot_import(path=LEDGER)
    other_copy = zeroshot_import(path=UNCHECKPOINTED)

    # then
    assert [(r.imported, r.skipped) for r in again.ledgers] == [(0, 12)]
    assert [(r.imported, r.skipped) for r in other_copy.ledgers] == [(0, 12)]
    assert stored() == first


def test_the_folder_form_picks_up_the_config_from_clusters_json() -> None:
    # when
    report = zeroshot_import(path=FIXTURES)

    # then
    assert [(r.cluster_id, r.imported) for r in report.ledgers] == [(CLUSTER, 12)]
    cluster = cluster_get(cluster_id=CLUSTER)
    assert [a["id"] for a in cluster.agents] == ["test-conductor", "git-pusher"]
    assert cluster.state == "running"
    assert cluster.created_at == 1770023875452


def test_the_state_snapshot_is_kept_as_it_is_and_no_new_one_is_published() -> None:
    # when
    zeroshot_import(path=FIXTURES)

    # then
    snapshots = [w for w in stored() if w["topic"] == "STATE_SNAPSHOT"]
    assert len(snapshots) == 1
    assert snapshots[0]["id"] == "msg_766d88b363f30cb6b40f14346be8d2d7"
    assert snapshots[0]["sender"] == "state-snapshotter"
    assert snapshots[0]["content"]["text"].startswith("Task: Manual Input")
    assert snapshots[0]["content"]["data"]["clusterId"] == CLUSTER
