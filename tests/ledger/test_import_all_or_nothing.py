"""Imports that used to leave half a cluster behind or end in a traceback (issue 9): each source
now imports whole or not at all, with a one-line error naming the file and the row, while the
other sources still import. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from ledger.importing import zeroshot_import
from ledger.models import Cluster, Message
from ledger.services import MessageDraft, cluster_create, message_publish, now_ms
from ledger.zeroshot import ZeroshotCluster, ZeroshotMessage, write_clusters_json, write_ledger

pytestmark = pytest.mark.django_db

START = 1_770_000_000_000


def rows(count: int, *, cluster: str = "big-run", start: int = 1) -> Iterator[ZeroshotMessage]:
    for rowid in range(start, start + count):
        yield ZeroshotMessage(
            rowid=rowid,
            id=f"msg_{rowid:032x}",
            timestamp=START + rowid,
            topic="WORKER_PROGRESS",
            sender="worker",
            receiver="broadcast",
            content_text=f"step {rowid} of the work " * 3,
            content_data={"step": rowid},
            metadata=None,
            cluster_id=cluster,
        )


def ledger(folder: Path, name: str, count: int, **kwargs: Any) -> Path:
    path = folder / f"{name}.db"
    write_ledger(path, rows(count, cluster=name, **kwargs), with_sequence_table=True)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def change(path: Path, sql: str, *params: Any) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql, params)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def import_command(*paths: Path) -> tuple[str, str, bool]:
    out, err = StringIO(), StringIO()
    try:
        call_command("import_zeroshot", *map(str, paths), stdout=out, stderr=err)
    except CommandError as error:
        err.write(str(error))
        return out.getvalue(), err.getvalue(), False
    return out.getvalue(), err.getvalue(), True


def nothing_of(cluster_id: str) -> bool:
    return (
        not Cluster.objects.filter(pk=cluster_id).exists()
        and not Message.objects.filter(cluster_id=cluster_id).exists()
    )


# --- import_zeroshot ----------------------------------------------------------------------------


def test_a_text_timestamp_after_the_first_batch_stores_nothing_and_names_the_row(
    tmp_path: Path,
) -> None:
    path = ledger(tmp_path, "big-run", 25_001)
    change(path, "UPDATE messages SET timestamp = 'soon' WHERE rowid = 25001")

    _out, err, ok = import_command(path)

    assert not ok
    assert f"{path}: row 25001: timestamp is 'soon', not an integer of milliseconds" in err
    assert nothing_of("big-run")


def test_a_corrupted_page_after_the_first_batch_stores_nothing(tmp_path: Path) -> None:
    path = ledger(tmp_path, "big-run", 24_000)
    size, page = os.path.getsize(path), 4096
    with path.open("r+b") as file:
        file.seek(int(size * 0.9) // page * page)
        file.write(b"\xff" * page * 8)

    report = zeroshot_import(path=path)

    (result,) = report.ledgers
    assert result.error is not None
    assert result.error.startswith(f"{path}: unreadable as a SQLite database")
    assert "\n" not in result.error
    assert nothing_of("big-run")


def test_a_null_timestamp_in_the_first_row_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "old-run.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE messages (id TEXT PRIMARY KEY, timestamp INTEGER, topic TEXT, "
        "sender TEXT, receiver TEXT, content_text TEXT, content_data TEXT, metadata TEXT, "
        "cluster_id TEXT)"
    )
    with conn:
        conn.execute(
            "INSERT INTO messages (id, timestamp, topic, sender) VALUES ('a', NULL, 'T', 's')"
        )
    conn.close()

    _out, err, ok = import_command(path)

    assert not ok
    assert f"{path}: row 1: timestamp is None, not an integer of milliseconds" in err
    assert nothing_of("old-run")


def test_one_unreadable_ledger_in_a_folder_is_reported_and_the_others_import(
    tmp_path: Path,
) -> None:
    ledger(tmp_path, "a-first", 3)
    (tmp_path / "b-broken.db").write_bytes(b"this is no database at all" * 200)
    ledger(tmp_path, "c-last", 2)

    out, err, ok = import_command(tmp_path)

    assert not ok
    assert "a-first: imported 3, skipped 0 (new cluster)" in out
    assert "c-last: imported 2, skipped 0 (new cluster)" in out
    assert f"b-broken: not imported: {tmp_path / 'b-broken.db'}:" in err
    assert "1 source(s) could not be imported" in err
    assert nothing_of("b-broken")


def test_an_unreadable_folder_is_reported_and_the_other_paths_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    ledger(locked, "hidden-run", 2)
    elsewhere = ledger(tmp_path, "open-run", 2)
    real_iterdir = Path.iterdir

    def iterdir(self: Path) -> Iterator[Path]:
        # The file system's answer for a folder this process may not list (tests run as root).
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)

    out, err, ok = import_command(locked, elsewhere)

    assert not ok
    assert f"{locked}: not imported: cannot read the folder {locked}: Permission denied" in err
    assert "open-run: imported 2" in out
    assert nothing_of("hidden-run")


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("topic", "T" * 65, "topic is longer than 64 characters"),
        ("sender", "a\x00b", "sender must not contain NUL"),
        ("content_text", "bad \x00 text", "content.text must not contain NUL"),
        ("content_data", '{"x": "\\u0000"}', "content.data.x must not contain NUL"),
        (
            "metadata",
            '{"k\\ud800": 1}',
            "metadata[key 'k\\ud800'] must not contain lone surrogates",
        ),
        ("timestamp", 2**63 - 1, "timestamp must be between 0 and 253402300799999"),
        ("timestamp", 253402300800000, "timestamp must be between 0 and 253402300799999"),
        ("id", "m" * 129, "id is longer than 128 characters"),
    ],
)
def test_a_row_the_ledger_cannot_store_leaves_no_cluster_behind(
    tmp_path: Path, column: str, value: object, problem: str
) -> None:
    path = ledger(tmp_path, "run-7", 5)
    change(path, f"UPDATE messages SET {column} = ? WHERE rowid = 4", value)

    _out, err, ok = import_command(path)

    assert not ok
    assert f"{path}: row 4: (id " in err
    assert problem in err
    assert nothing_of("run-7")


def test_a_timestamp_far_ahead_of_the_clock_is_refused(tmp_path: Path) -> None:
    path = ledger(tmp_path, "run-8", 3)
    change(path, "UPDATE messages SET timestamp = ? WHERE rowid = 2", now_ms() + 86_400_000)

    _out, err, ok = import_command(path)

    assert not ok
    assert "row 2:" in err
    assert "ahead of the server's clock" in err
    assert nothing_of("run-8")


def test_a_failed_import_into_an_existing_cluster_adds_nothing_and_it_stays_usable(
    tmp_path: Path,
) -> None:
    cluster_create(cluster_id="run-9")
    message_publish(cluster_id="run-9", draft=MessageDraft(topic="T", sender="s"))
    path = ledger(tmp_path, "run-9", 4)
    change(path, "UPDATE messages SET sender = ? WHERE rowid = 3", "a\x00b")

    _out, _err, ok = import_command(path)

    assert not ok
    assert Message.objects.filter(cluster_id="run-9").count() == 1
    after = message_publish(cluster_id="run-9", draft=MessageDraft(topic="T", sender="s"))
    assert after.sequence == 2


def test_rows_with_unreadable_json_are_counted_per_file(tmp_path: Path) -> None:
    path = ledger(tmp_path, "run-json", 5)
    change(path, "UPDATE messages SET content_data = '{not json' WHERE rowid = 2")
    change(path, "UPDATE messages SET metadata = '[1, NaN]' WHERE rowid = 3")
    change(path, "UPDATE messages SET content_data = 'nope', metadata = '{' WHERE rowid = 5")

    out, err, ok = import_command(path)

    assert ok, err
    assert (
        "run-json: imported 5, skipped 0, 3 with unreadable JSON in content_data or metadata "
        "(stored as null) (new cluster)"
    ) in out
    assert Message.objects.get(cluster_id="run-json", message_id=f"msg_{2:032x}").content == {
        "text": "step 2 of the work " * 3,
        "data": None,
    }


def test_a_registry_entry_with_an_agent_id_no_route_takes_is_refused_clearly(
    tmp_path: Path,
) -> None:
    ledger(tmp_path, "run-cfg", 2)
    agents = [{"id": "team/worker", "role": "implementation"}]
    write_clusters_json(
        tmp_path / "clusters.json",
        [ZeroshotCluster(id="run-cfg", config={"agents": agents}, state="completed")],
    )

    _out, err, ok = import_command(tmp_path)

    assert not ok
    assert "clusters.json entry cannot make a cluster: config.agents[0].id must be 1-64" in err
    assert "'team/worker'" in err
    assert nothing_of("run-cfg")


def test_a_clean_ledger_still_imports_whole(tmp_path: Path) -> None:
    path = ledger(tmp_path, "run-ok", 30)

    _out, err, ok = import_command(path)

    assert ok, err
    assert Message.objects.filter(cluster_id="run-ok").count() == 30
    assert list(
        Message.objects.filter(cluster_id="run-ok")
        .order_by("sequence")
        .values_list("sequence", flat=True)
    ) == list(range(1, 31))


# --- import_cluster -----------------------------------------------------------------------------


def export_lines(count: int, *, cluster: str = "exported") -> list[dict[str, Any]]:
    return [
        {
            "id": f"m-{n}",
            "sequence": str(n),
            "timestamp": START + n,
            "cluster_id": cluster,
            "topic": "T",
            "sender": "s",
            "receiver": "broadcast",
            "content": {"text": f"line {n}"},
            "metadata": None,
        }
        for n in range(1, count + 1)
    ]


def write_jsonl(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(f"{json.dumps(line)}\n" for line in lines))
    return path


def import_cluster(path: Path, *args: str) -> str:
    with pytest.raises(CommandError) as refused:
        call_command("import_cluster", str(path), *args, stdout=StringIO())
    return str(refused.value)


def test_a_bad_second_line_leaves_no_cluster(tmp_path: Path) -> None:
    lines: list[Any] = export_lines(3)
    lines[1] = {"topic": "T"}
    path = write_jsonl(tmp_path / "run.jsonl", lines)

    error = import_cluster(path)

    assert error == f"{path}, line 2: id, timestamp, sender missing or of the wrong type"
    assert nothing_of("exported")


def test_a_bad_line_after_the_first_thousand_stores_nothing(tmp_path: Path) -> None:
    lines: list[Any] = export_lines(6000)
    lines[5499]["timestamp"] = "yesterday"
    path = write_jsonl(tmp_path / "run.jsonl", lines)

    error = import_cluster(path)

    assert error.startswith(f"{path}, line 5500: timestamp missing")
    assert nothing_of("exported")


def test_a_timestamp_of_two_to_the_64_names_its_line(tmp_path: Path) -> None:
    lines = export_lines(3)
    lines[2]["timestamp"] = 2**64
    path = write_jsonl(tmp_path / "run.jsonl", lines)

    error = import_cluster(path)

    assert error.startswith(f"{path}, line 3: timestamp must be between 0 and 253402300799999")
    assert nothing_of("exported")


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("sender", "a\x00b", "sender must not contain NUL"),
        ("content", {"data": {"x": "\ud800"}}, "content.data.x must not contain lone surrogates"),
        ("metadata", {"deep": json.loads("[" * 70 + "]" * 70)}, "metadata.deep"),
        ("topic", "T" * 65, "topic is longer than 64 characters"),
    ],
)
def test_unstorable_values_in_an_export_name_their_line(
    tmp_path: Path, field: str, value: Any, problem: str
) -> None:
    lines = export_lines(3)
    lines[1][field] = value
    path = write_jsonl(tmp_path / "run.jsonl", lines)

    error = import_cluster(path)

    assert error.startswith(f"{path}, line 2: {problem}")
    assert nothing_of("exported")


def test_a_binary_file_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "photo.jsonl"
    path.write_bytes(bytes(range(256)) * 64)

    error = import_cluster(path, "--cluster", "exported")

    assert error.startswith(f"{path} is not UTF-8 text")
    assert nothing_of("exported")


def test_a_failed_import_into_an_existing_cluster_keeps_it_as_it_was(tmp_path: Path) -> None:
    cluster_create(cluster_id="exported")
    message_publish(cluster_id="exported", draft=MessageDraft(topic="T", sender="s"))
    lines: list[Any] = export_lines(3)
    lines[2] = "not an object"
    path = write_jsonl(tmp_path / "run.jsonl", lines)

    error = import_cluster(path)

    assert error == f"{path}, line 3: a message must be a JSON object"
    assert Message.objects.filter(cluster_id="exported").count() == 1
    after = message_publish(cluster_id="exported", draft=MessageDraft(topic="T", sender="s"))
    assert after.sequence == 2


def test_a_header_with_a_created_at_past_year_9999_is_refused(tmp_path: Path) -> None:
    document = {
        "cluster": {"id": "exported", "created_at": 2**63, "config": {"agents": []}},
        "messages": export_lines(2),
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document))

    error = import_cluster(path)

    assert "created_at must be between 0 and 253402300799999" in error
    assert nothing_of("exported")


def test_a_whole_export_imports_again(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "run.jsonl", export_lines(7000))

    call_command("import_cluster", str(path), stdout=StringIO())

    assert Message.objects.filter(cluster_id="exported").count() == 7000
