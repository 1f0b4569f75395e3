"""The hot path of imports: messages as columns, checked and inserted without a row object.

An import of a million messages pays for everything it does per row, so a batch here is one
list per column. The checks of ``imported_messages_check`` run over whole columns in C (``max``
over lengths, one regular-expression scan of the joined strings, the bounds of the timestamps)
and fall back to the row-by-row check only to name the first row that fails, with the same
error. JSON goes to the database as text that is already known to be valid: the text a caller's
value was encoded to once, or a source's own text that parsed, never parsed and encoded again.
See docs/decisions/0063-imports-all-or-nothing.md.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from itertools import repeat
from json.encoder import encode_basestring
from operator import add
from typing import Protocol, TypeVar

from django.conf import settings
from django.db import connection

from ledger.errors import InvalidInput
from ledger.models import Message
from ledger.records import JSON, MessageRecord, event_of, replay_allowed
from ledger.statements import MESSAGE_COLUMNS, message_insert
from ledger.validation import (
    TIMESTAMP_MAX,
    TIMESTAMP_MIN,
    JsonValueError,
    json_encode_checked,
    json_text_suspicious,
    text_problem,
    timestamp_problem,
)

# The widths of the message columns an import fills from its source (ledger.models.Message).
_IMPORT_WIDTHS = (("id", 128), ("topic", 64), ("sender", 128), ("receiver", 128))
# NUL or a lone surrogate anywhere in a string (``ledger.validation.text_problem``).
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
# A number whose float may overflow to infinity: an exponent of three digits or more, or a
# mantissa of hundreds of digits (only in a text that long). A match only means "look closer".
_HUGE_EXPONENT = re.compile(r"[0-9][eE]\+?[0-9]{3}")
_LONG_MANTISSA = 300
_HUGE_MANTISSA = re.compile(f"[0-9]{{{_LONG_MANTISSA}}}")
# Stored ids looked up per query when an import may repeat some.
_LOOKUP_CHUNK = 5000
# SQLite's page cache while an import runs, in KiB: the indexes of a large cluster (the random
# message ids above all) stay in memory instead of being spilled to the WAL and read back.
IMPORT_CACHE_KIB = 256 * 1024
# The columns an import sets itself, in the order ``imported_rows_insert`` binds them: those of
# a publish up to its idempotency columns, then the mark of an import.
_IMPORT_COLUMNS = (*MESSAGE_COLUMNS[: MESSAGE_COLUMNS.index("idempotency_key")], "imported")
T = TypeVar("T")


class Importable(Protocol):
    """A message from another ledger (``ImportedMessage``), as the checks read it."""

    @property
    def id(self) -> str: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def topic(self) -> str: ...
    @property
    def sender(self) -> str: ...
    @property
    def receiver(self) -> str: ...
    @property
    def content(self) -> dict[str, JSON]: ...
    @property
    def metadata(self) -> JSON: ...


@dataclass(frozen=True, slots=True)
class ImportRows:
    """Checked messages to import, one list per column, in the order they are to be stored.

    ``contents`` and ``metadata`` hold JSON text (``None``: SQL NULL, a null metadata);
    ``positions`` are the rows' indexes in the batch they were taken from (``None``: all).
    """

    ids: list[str]
    timestamps: list[int]
    topics: list[str]
    senders: list[str]
    receivers: list[str]
    contents: list[str]
    metadata: list[str | None]
    replayable: list[bool]
    events: list[str]
    positions: list[int] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, keep: list[int]) -> ImportRows:
        """The rows at the indexes ``keep``, in that order."""

        def pick(column: list[T]) -> list[T]:
            return [column[i] for i in keep]

        return ImportRows(
            ids=pick(self.ids),
            timestamps=pick(self.timestamps),
            topics=pick(self.topics),
            senders=pick(self.senders),
            receivers=pick(self.receivers),
            contents=pick(self.contents),
            metadata=pick(self.metadata),
            replayable=pick(self.replayable),
            events=pick(self.events),
            positions=keep if self.positions is None else pick(self.positions),
        )

    def without(self, present: set[str]) -> ImportRows:
        """The rows whose id is not in ``present`` and not repeated earlier in the batch."""
        if not present and len(set(self.ids)) == len(self.ids):
            return self
        seen = set(present)
        keep = []
        for index, message_id in enumerate(self.ids):
            if message_id not in seen:
                seen.add(message_id)
                keep.append(index)
        return self if len(keep) == len(self.ids) else self.take(keep)

    def records(self, *, cluster_id: str, first_sequence: int) -> list[MessageRecord]:
        """The records of these rows once stored from ``first_sequence`` on."""
        loads = json.loads
        records = []
        for offset, content_text in enumerate(self.contents):
            content = loads(content_text)
            metadata = self.metadata[offset]
            records.append(
                MessageRecord(
                    id=self.ids[offset],
                    cluster_id=cluster_id,
                    sequence=first_sequence + offset,
                    timestamp=self.timestamps[offset],
                    topic=self.topics[offset],
                    sender=self.senders[offset],
                    receiver=self.receivers[offset],
                    content=content if isinstance(content, dict) else {},
                    metadata=None if metadata is None else loads(metadata),
                )
            )
        return records


# --- checks ----------------------------------------------------------------------------------


def imported_messages_check(messages: Sequence[Importable], *, now: int | None = None) -> None:
    """Refuse what the ledger cannot store from an import, naming the message's ``index``.

    Imports keep the source's values (SPEC §1.1: no topic pattern, no timestamp adjustment),
    but not values the databases refuse or that would break the cluster: strings wider than
    their columns or holding NUL or lone surrogates, timestamps outside 0 … 9999-12-31 or
    further ahead of the clock than ``LEDGER_MAX_CLOCK_SKEW_MS`` (the cluster's clock would
    jump there), and JSON with NaN or nested deeper than ``LEDGER_MAX_JSON_DEPTH``.
    """
    imported_rows(messages, now=now)


def imported_rows(messages: Sequence[Importable], *, now: int | None = None) -> ImportRows:
    """Check messages as ``imported_messages_check`` does and make them rows to insert; each
    JSON value is encoded once, by its check."""
    clock = _clock(now)
    skew, depth = settings.LEDGER_MAX_CLOCK_SKEW_MS, settings.LEDGER_MAX_JSON_DEPTH
    contents: list[str] = []
    metadata: list[str | None] = []
    for index, message in enumerate(messages):
        found = _fields_problem(message, now=clock, skew=skew)
        if found is not None:
            raise _refused(index, message.id, found)
        field = "content"
        try:
            content = json_encode_checked(message.content, max_depth=depth)
            field = "metadata"
            value = message.metadata
            meta = None if value is None else json_encode_checked(value, max_depth=depth)
        except JsonValueError as error:
            raise _refused(index, message.id, (f"{field}{error.path}", error.problem)) from None
        contents.append(content)
        metadata.append(meta)
    return ImportRows(
        ids=[m.id for m in messages],
        timestamps=[m.timestamp for m in messages],
        topics=[m.topic for m in messages],
        senders=[m.sender for m in messages],
        receivers=[m.receiver for m in messages],
        contents=contents,
        metadata=metadata,
        replayable=[
            replay_allowed(topic=m.topic, content=m.content, metadata=m.metadata) for m in messages
        ],
        events=[event_of(m.content) for m in messages],
    )


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    """A message from another ledger: its id and timestamp are kept as they are."""

    id: str
    timestamp: int
    topic: str
    sender: str
    receiver: str
    content: dict[str, JSON]
    metadata: JSON

    def as_record(self, *, cluster_id: str, sequence: int) -> MessageRecord:
        """The record of this message once stored at ``sequence`` in a cluster."""
        fields = {f.name: getattr(self, f.name) for f in dataclass_fields(self)}
        if not isinstance(self.content, dict):
            fields["content"] = {}
        return MessageRecord(cluster_id=cluster_id, sequence=sequence, **fields)


def imported_rows_from_json(
    *,
    ids: list[str],
    timestamps: list[int],
    topics: list[str],
    senders: list[str],
    receivers: list[str],
    texts: list[str | None],
    data: list[str | None],
    data_values: list[JSON],
    metadata: list[str | None],
    metadata_values: list[JSON],
    now: int | None = None,
) -> ImportRows:
    """Rows from a source that keeps JSON as text (a zeroshot ledger), checked as
    ``imported_messages_check`` checks messages, without encoding the JSON again.

    ``texts`` are ``content.text`` (``None``: absent); ``data`` is the JSON text of
    ``content.data`` (``None``: absent) and ``data_values`` what it parsed to; ``metadata`` the
    JSON text of the metadata (``None``: null) and ``metadata_values`` its values. Each JSON
    text must be one that Python's strict parser accepted, giving its value.
    """
    clock = _clock(now)
    skew, depth = settings.LEDGER_MAX_CLOCK_SKEW_MS, settings.LEDGER_MAX_JSON_DEPTH
    suspects = _suspect_rows(
        ids=ids,
        timestamps=timestamps,
        strings=(topics, senders, receivers),
        texts=texts,
        data=data,
        metadata=metadata,
        now=clock,
        skew=skew,
        depth=depth,
    )
    for index in suspects:
        content: dict[str, JSON] = {}
        if texts[index] is not None:
            content["text"] = texts[index]
        if data[index] is not None:
            content["data"] = data_values[index]
        message = ImportedMessage(
            id=ids[index],
            timestamp=timestamps[index],
            topic=topics[index],
            sender=senders[index],
            receiver=receivers[index],
            content=content,
            metadata=metadata_values[index],
        )
        found = _imported_problem(message, now=clock, skew=skew, depth=depth)
        if found is not None:
            raise _refused(index, ids[index], found)
    replayable: list[bool] = []
    events: list[str] = []
    # Without metadata to read and without ``contextSafe`` in the data, the policy is the
    # topic's: asked once per topic. The functions read only ``content.data``, so a content
    # holding just that decides alike.
    by_topic = {t: replay_allowed(topic=t, content=None, metadata=None) for t in set(topics)}
    for topic, value, meta in zip(topics, data_values, metadata_values, strict=True):
        if type(value) is dict:
            if meta is None and "contextSafe" not in value:
                replayable.append(by_topic[topic])
            else:
                replayable.append(
                    replay_allowed(topic=topic, content={"data": value}, metadata=meta)
                )
            events.append(event_of({"data": value}) if "event" in value else "")
        else:
            replayable.append(
                by_topic[topic]
                if meta is None
                else replay_allowed(topic=topic, content=None, metadata=meta)
            )
            events.append("")
    return ImportRows(
        ids=ids,
        timestamps=timestamps,
        topics=topics,
        senders=senders,
        receivers=receivers,
        contents=[
            '{"text":' + encode_basestring(text) + ',"data":' + value + "}"
            if text is not None and value is not None
            else _content_json(text, value)
            for text, value in zip(texts, data, strict=True)
        ],
        metadata=metadata,
        replayable=replayable,
        events=events,
    )


def _content_json(text: str | None, data: str | None) -> str:
    if text is None:
        return "{}" if data is None else '{"data":' + data + "}"
    if data is None:
        return '{"text":' + encode_basestring(text) + "}"
    return '{"text":' + encode_basestring(text) + ',"data":' + data + "}"


def _suspect_rows(
    *,
    ids: list[str],
    timestamps: list[int],
    strings: tuple[list[str], ...],
    texts: list[str | None],
    data: list[str | None],
    metadata: list[str | None],
    now: int,
    skew: int,
    depth: int,
) -> Iterator[int]:
    """The rows that a column-wide test could not clear, in order: all of them when a test
    over a whole column failed, else those whose JSON needs a closer look."""
    present_texts = [t for t in texts if t is not None]
    data_texts = [t for t in data if t is not None]
    meta_texts = [t for t in metadata if t is not None]
    try:
        strings_ok = (
            _all_str(ids, *strings, present_texts)
            and "" not in ids
            and all(
                not column or max(map(len, column)) <= width
                for column, (_, width) in zip((ids, *strings), _IMPORT_WIDTHS, strict=True)
            )
            and all(_clean("\n".join(column)) for column in (ids, *strings, present_texts))
        )
        times_ok = not timestamps or (
            set(map(type, timestamps)) == {int}
            and min(timestamps) >= TIMESTAMP_MIN
            and max(timestamps) <= min(TIMESTAMP_MAX, now + skew)
        )
        json_ok = not any(map(json_text_suspicious, ("\n".join(data_texts), "\n".join(meta_texts))))
    except TypeError:
        strings_ok = times_ok = json_ok = False
    if not (strings_ok and times_ok and json_ok):
        yield from range(len(ids))
        return
    # The text decides cheaply whether a value may nest too deep (brackets inside strings count
    # too) or hold a number that overflowed to infinity; only those rows are walked.
    suspects = _json_suspects(data, depth - 1) | _json_suspects(metadata, depth)
    yield from sorted(suspects)


def _json_suspects(column: list[str | None], max_brackets: int) -> set[int]:
    """Rows whose JSON text has more opening brackets than ``max_brackets`` or a number that
    may have overflowed; each test runs in C over the whole column first."""
    texts = [text or "" for text in column]
    count = str.count
    opens = list(map(add, map(count, texts, repeat("{")), map(count, texts, repeat("["))))
    suspects = (
        {i for i, n in enumerate(opens) if n > max_brackets}
        if opens and max(opens) > max_brackets
        else set()
    )
    if _HUGE_EXPONENT.search("\n".join(texts)) is not None:
        suspects.update(i for i, text in enumerate(texts) if _HUGE_EXPONENT.search(text))
    if max(map(len, texts), default=0) >= _LONG_MANTISSA:
        suspects.update(
            i
            for i, text in enumerate(texts)
            if len(text) >= _LONG_MANTISSA and _HUGE_MANTISSA.search(text)
        )
    return suspects


def _all_str(*columns: list[str]) -> bool:
    return all(set(map(type, column)) <= {str} for column in columns)


def _clean(text: str) -> bool:
    """No NUL and no lone surrogate in ``text``; ASCII text is cleared without a regex."""
    return "\x00" not in text and (text.isascii() or _BAD_CHARS.search(text) is None)


def _clock(now: int | None) -> int:
    return now if now is not None else time.time_ns() // 1_000_000


def _refused(index: int, message_id: str, found: tuple[str, str]) -> InvalidInput:
    field, problem = found
    return InvalidInput(
        f"{field} {problem}", details={"index": index, "id": message_id, "field": field}
    )


def _fields_problem(message: Importable, *, now: int, skew: int) -> tuple[str, str] | None:
    for field, width in _IMPORT_WIDTHS:
        value = getattr(message, field)
        if not isinstance(value, str):
            return field, "must be a string"
        if len(value) > width:
            return field, f"is longer than {width} characters"
        if (problem := text_problem(value)) is not None:
            return field, problem
    if not message.id:
        return "id", "must not be empty"
    if (problem := timestamp_problem(message.timestamp, now=now, max_ahead=skew)) is not None:
        return "timestamp", problem
    return None


def _imported_problem(
    message: Importable, *, now: int, skew: int, depth: int
) -> tuple[str, str] | None:
    found = _fields_problem(message, now=now, skew=skew)
    if found is not None:
        return found
    for field, value in (("content", message.content), ("metadata", message.metadata)):
        try:
            json_encode_checked(value, max_depth=depth)
        except JsonValueError as error:
            return f"{field}{error.path}", error.problem
    return None


# --- the database ----------------------------------------------------------------------------


def imported_rows_insert(*, cluster_id: str, after_sequence: int, rows: ImportRows) -> None:
    """Insert checked rows with sequences from ``after_sequence + 1``.

    ``bulk_create`` compiles every value into multi-row SQL (about 90 rows per statement on
    SQLite), which costs three times the database's own work on an import of a million rows,
    and a ``Message`` instance per row costs about as much as the INSERT itself. So: tuples
    zipped from the columns, given to ``statements.message_insert`` (statements of a few hundred
    rows on SQLite, one ``COPY`` on PostgreSQL: docs/decisions/0240, 0241); a field the import
    does not set is inserted too, with its default.
    """
    count = len(rows)
    params = list(
        zip(
            repeat(cluster_id, count),
            rows.ids,
            range(after_sequence + 1, after_sequence + 1 + count),
            rows.timestamps,
            rows.topics,
            rows.senders,
            rows.receivers,
            rows.contents,
            rows.metadata,
            rows.replayable,
            rows.events,
            repeat(True, count),
            strict=True,
        )
    )
    # The JSON arrives as text: PostgreSQL casts it to jsonb, SQLite stores it as it is.
    message_insert(params, columns=_IMPORT_COLUMNS, json_as_text=True)


def stored_message_ids(*, cluster_id: str, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` the cluster already holds."""
    present: set[str] = set()
    # In chunks well under SQLite's limit of 32,766 bound parameters per statement.
    for start in range(0, len(ids), _LOOKUP_CHUNK):
        present.update(
            Message.objects.filter(
                cluster_id=cluster_id, message_id__in=ids[start : start + _LOOKUP_CHUNK]
            ).values_list("message_id", flat=True)
        )
    return present


@contextmanager
def import_cache() -> Iterator[None]:
    """A larger SQLite page cache for the connection while an import runs, restored after."""
    if connection.vendor != "sqlite":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        before = int(cursor.fetchone()[0])
        cursor.execute(f"PRAGMA cache_size = {-IMPORT_CACHE_KIB}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA cache_size = {before}")
