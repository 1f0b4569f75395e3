"""The import's column-wise path (ledger.services.imported_rows): JSON stored as the source wrote
it, checked like any import, refused with the row named. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from ledger import importing
from ledger.errors import InvalidInput
from ledger.filters import MessageFilter
from ledger.importing import zeroshot_import
from ledger.models import Cluster, Message
from ledger.records import JSON, event_of, replay_allowed
from ledger.selectors import message_query
from ledger.services import ImportedMessage, imported_messages_check, imported_rows_from_json
from ledger.services.imported_rows import IMPORT_CACHE_KIB
from ledger.zeroshot import ZeroshotMessage, write_ledger

pytestmark = pytest.mark.django_db

START = 1_770_000_000_000


def ledger(folder: Path, name: str, rows: list[tuple[str | None, str | None, str | None]]) -> Path:
    """A ledger of messages given as ``(content_text, content_data, metadata)`` column texts."""
    path = folder / f"{name}.db"
    write_ledger(
        path,
        (
            ZeroshotMessage(
                rowid=rowid,
                id=f"m-{rowid}",
                timestamp=START + rowid,
                topic="AGENT_OUTPUT" if rowid % 2 else "AGENT_LIFECYCLE",
                sender="worker",
                receiver="broadcast",
                content_text=None,
                content_data=None,
                metadata=None,
                cluster_id=name,
            )
            for rowid in range(1, len(rows) + 1)
        ),
        with_sequence_table=True,
    )
    conn = sqlite3.connect(path)
    with conn:
        for rowid, (text, data, metadata) in enumerate(rows, start=1):
            conn.execute(
                "UPDATE messages SET content_text = ?, content_data = ?, metadata = ? "
                "WHERE rowid = ?",
                (text, data, metadata, rowid),
            )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def stored(cluster_id: str) -> list[Message]:
    return list(Message.objects.filter(cluster_id=cluster_id).order_by("sequence"))


def import_error(path: Path) -> str:
    err = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("import_zeroshot", str(path), stdout=StringIO(), stderr=err)
    return err.getvalue() + str(raised.value)


POLICY_CASES: list[tuple[str | None, str | None, str | None]] = [
    ("plain output", '{"line":"x"}', None),
    ("safe output", '{"contextSafe":true}', None),
    ("unsafe lifecycle", '{"contextSafe":false,"event":"TASK_COMPLETED"}', None),
    (None, '{"event":"TASK_COMPLETED"}', '{"replayPolicy":"context"}'),
    ("logged", '{"event":"' + "E" * 65 + '"}', '{"replayPolicy":"raw_log_only"}'),
    ("meta wins", '{"contextSafe":true}', '{"contextSafe":false}'),
    ("escaped key", '{"\\u0065vent":"STARTED"}', '{"context\\u0053afe":true}'),
    ("data not an object", "[1, 2]", '"just text"'),
    ("data null", "null", "null"),
    ("", '{ "spaced" : [ 1 , 2.5e3 , -0 ] , "é" : "\\u00e9\\ud83d\\ude00" }', "{}"),
    ("no data", None, None),
]


def test_stored_messages_read_back_as_the_source_values_with_the_replay_policy(
    tmp_path: Path,
) -> None:
    path = ledger(tmp_path, "policy-run", POLICY_CASES)

    report = zeroshot_import(path=path)

    assert report.failed == []
    for message, (text, data, metadata) in zip(stored("policy-run"), POLICY_CASES, strict=True):
        content: dict[str, JSON] = {}
        if text is not None:
            content["text"] = text
        if data is not None:
            content["data"] = json.loads(data)
        meta = None if metadata is None else json.loads(metadata)
        assert (message.content, message.metadata) == (content, meta)
        assert message.replayable is replay_allowed(
            topic=message.topic, content=content, metadata=meta
        )
        assert message.event == event_of(content)
        assert message.imported


def test_a_null_metadata_is_stored_as_sql_null(tmp_path: Path) -> None:
    path = ledger(tmp_path, "null-meta", [("a", None, "null"), ("b", None, "{not json")])

    zeroshot_import(path=path)

    assert Message.objects.filter(cluster_id="null-meta", metadata__isnull=True).count() == 2


def test_text_kept_as_the_source_wrote_it_is_found_by_search(tmp_path: Path) -> None:
    path = ledger(tmp_path, "search-run", [("déploiement réussi", '{"x":"\\u00e9"}', None)])

    zeroshot_import(path=path)

    found = message_query(cluster_id="search-run", where=MessageFilter(q="réussi"))
    assert [m.id for m in found] == ["m-1"]


@pytest.mark.parametrize(
    ("data", "metadata", "problem"),
    [
        ('{"x": 1e999}', None, "content.data.x must be a finite number"),
        ("[-1E+400]", None, "content.data[0] must be a finite number"),
        (None, '{"n": ' + "9" * 400 + ".0}", "metadata.n must be a finite number"),
        ("[" * 64 + "1" + "]" * 64, None, "nests deeper than 64 levels"),
        (None, "[" * 65 + "1" + "]" * 65, "nests deeper than 64 levels"),
        ('{"k": "\\ud800"}', None, "content.data.k must not contain lone surrogates"),
        (None, '{"\\u0000": 1}', "must not contain NUL"),
    ],
)
def test_json_the_ledger_cannot_store_names_its_row(
    tmp_path: Path, data: str | None, metadata: str | None, problem: str
) -> None:
    rows: list[tuple[str | None, str | None, str | None]] = [("fine", '{"a":1}', None)] * 5
    rows[2] = ("bad", data, metadata)
    path = ledger(tmp_path, "bad-json", rows)

    error = import_error(path)

    assert f"{path}: row 3: (id 'm-3') " in error
    assert problem in error
    assert not Cluster.objects.filter(pk="bad-json").exists()


@pytest.mark.parametrize(
    ("data", "metadata"),
    [
        ('{"path": "C:\\\\u0000dir"}', None),  # an escaped backslash, then text
        ('{"deep": ' + "[" * 62 + "]" * 62 + "}", '{"s": "' + "[" * 100 + '"}'),
        # A three-digit exponent is looked at closely, and is fine (0.0 on both databases).
        ('{"n": 0e+300, "m": 1E-999, "big": ' + "1" * 400 + "}", None),
        ('{"pair": "\\ud83d\\ude00"}', None),
    ],
)
def test_json_that_only_looks_suspicious_is_stored(
    tmp_path: Path, data: str | None, metadata: str | None
) -> None:
    path = ledger(tmp_path, "look-alike", [("ok", data, metadata)])

    report = zeroshot_import(path=path)

    assert report.failed == []
    (message,) = stored("look-alike")
    assert message.content["data"] == (None if data is None else json.loads(data))
    assert message.metadata == (None if metadata is None else json.loads(metadata))


def cache_size() -> int:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        return int(cursor.fetchone()[0])


def test_the_page_cache_is_larger_during_an_import_and_restored_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("a SQLite setting")
    path = ledger(tmp_path, "cache-run", [("a", None, None)])
    before = cache_size()
    during: list[int] = []
    real_store = importing._store

    def store(*args: Any, **kwargs: Any) -> Any:
        during.append(cache_size())
        return real_store(*args, **kwargs)

    monkeypatch.setattr(importing, "_store", store)

    zeroshot_import(path=path)

    assert during == [-IMPORT_CACHE_KIB]
    assert cache_size() == before != -IMPORT_CACHE_KIB
    assert len(stored("cache-run")) == 1


# --- the same checks, message by message and column by column ---------------------------------


def columns(messages: list[ImportedMessage]) -> dict[str, Any]:
    """The column-wise input for ``messages``, JSON as compact text."""
    return {
        "ids": [m.id for m in messages],
        "timestamps": [m.timestamp for m in messages],
        "topics": [m.topic for m in messages],
        "senders": [m.sender for m in messages],
        "receivers": [m.receiver for m in messages],
        "texts": [m.content.get("text") for m in messages],
        "data": [json.dumps(m.content["data"]) if "data" in m.content else None for m in messages],
        "data_values": [m.content.get("data") for m in messages],
        "metadata": [None if m.metadata is None else json.dumps(m.metadata) for m in messages],
        "metadata_values": [m.metadata for m in messages],
    }


def message(**changes: Any) -> ImportedMessage:
    fields: dict[str, Any] = {
        "id": "m-1",
        "timestamp": START,
        "topic": "T",
        "sender": "s",
        "receiver": "broadcast",
        "content": {"text": "hello", "data": {"n": 1}},
        "metadata": None,
    }
    fields.update(changes)
    return ImportedMessage(**fields)


def nested(levels: int) -> JSON:
    value: JSON = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "bad",
    [
        message(id=""),
        message(id="x" * 129),
        message(topic="T" * 65),
        message(sender="a\x00b"),
        message(receiver="\udc00"),
        message(timestamp=-1),
        message(timestamp=START * 1000),
        message(content={"text": "nul \x00"}),
        message(content={"data": {"k": "\ud800"}}),
        message(metadata=nested(65)),
        message(content={"data": nested(64)}),
    ],
)
def test_both_paths_refuse_the_first_bad_message_alike(bad: ImportedMessage) -> None:
    messages = [message(id=f"ok-{n}") for n in range(4)]
    messages.insert(2, bad)
    messages.append(message(id="", topic="T" * 65))  # a later problem is not the one named

    with pytest.raises(InvalidInput) as by_message:
        imported_messages_check(messages, now=START)
    with pytest.raises(InvalidInput) as by_column:
        imported_rows_from_json(**columns(messages), now=START)

    assert by_column.value.message == by_message.value.message
    assert by_column.value.details == by_message.value.details
    assert by_column.value.details["index"] == 2
