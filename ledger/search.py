"""Full-text search over the messages' text (SPEC §1.3 ``q``): the index and the query.

The database keeps the index (docs/decisions/0022-message-search.md):

- SQLite: an FTS5 table with external content (the view ``ledger_message_text``) and the porter
  stemmer. It follows new messages in batches (docs/decisions/0313): ``search_index_catch_up``
  indexes every message past ``ledger_message_search_upto`` in one transaction, called by each
  search before it reads and by a server's pipeline scheduler shortly after commits; triggers on
  ``ledger_message`` make it forget deleted (and edited) messages it indexed;
- PostgreSQL: a GIN index over ``to_tsvector('english', content ->> 'text')``, which follows
  every insert by itself.

Every word of a search must match, by stem or by prefix ("export" finds "exports", "exporting"
and "exporter"). Matches come in sequence order: the order in which the ledger recorded them,
which is what lets SQLite read the index newest first and stop after one page.
"""

from __future__ import annotations

from typing import Any, Final

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, CharField, QuerySet
from django.db.models.expressions import RawSQL

from ledger.models import Message
from ledger.records import MATCH_END, MATCH_START

FTS_TABLE: Final = "ledger_message_search"
TEXT_VIEW: Final = "ledger_message_text"
PG_INDEX: Final = "msg_text_search"
# Words of context around the matches in a snippet.
SNIPPET_WORDS: Final = 24
ELLIPSIS: Final = "…"

PROGRESS_TABLE: Final = "ledger_message_search_upto"
# The most messages one catch-up transaction indexes: SQLite's write lock is held meanwhile
# (about 6 µs a message).
CATCH_UP_ROWS: Final = 2000

_SQLITE_TEXT = "json_extract({row}.content, '$.text')"
# Whether the index holds a message: ids grow in commit order (AUTOINCREMENT, one writer at a
# time), so the index holds exactly the messages up to the last one a catch-up indexed.
_SQLITE_INDEXED = f"{{row}}.id <= (SELECT upto FROM {PROGRESS_TABLE} WHERE id = 1)"
_SQLITE_TRIGGERS: Final = {
    # An external-content index forgets a row by being told the text it indexed for it; a row
    # it never indexed must not be "forgotten", which would corrupt it.
    f"{FTS_TABLE}_delete": (
        f"CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_delete AFTER DELETE ON ledger_message "
        f"WHEN {_SQLITE_INDEXED.format(row='old')} BEGIN "
        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) "
        f"VALUES ('delete', old.id, {_SQLITE_TEXT.format(row='old')}); "
        "END"
    ),
    # Messages are never edited; this keeps the index right if a migration ever rewrites them.
    f"{FTS_TABLE}_update": (
        f"CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_update AFTER UPDATE OF content ON "
        f"ledger_message WHEN {_SQLITE_INDEXED.format(row='old')} BEGIN "
        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) "
        f"VALUES ('delete', old.id, {_SQLITE_TEXT.format(row='old')}); "
        f"INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, {_SQLITE_TEXT.format(row='new')}); "
        "END"
    ),
}
# The insert trigger of before docs/decisions/0313, dropped wherever it is left.
_SQLITE_OLD_INSERT_TRIGGER: Final = f"{FTS_TABLE}_insert"
_SQLITE_REBUILD: Final = (
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')",
    f"UPDATE {PROGRESS_TABLE} SET upto = COALESCE((SELECT max(id) FROM ledger_message), 0) "
    "WHERE id = 1",
)
_SQLITE_CREATE: Final = (
    f"CREATE VIEW IF NOT EXISTS {TEXT_VIEW} AS "
    f"SELECT id, {_SQLITE_TEXT.format(row='ledger_message')} AS text FROM ledger_message",
    # porter over unicode61: stems, case and diacritics folded; the prefix indexes make the
    # short prefixes of a word typed so far cheap.
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(text, content='{TEXT_VIEW}', "
    "content_rowid='id', tokenize='porter unicode61', prefix='2 3')",
    # One row: the id of the last message the index holds.
    f"CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} "
    "(id INTEGER PRIMARY KEY CHECK (id = 1), upto INTEGER NOT NULL)",
    f"INSERT OR IGNORE INTO {PROGRESS_TABLE} (id, upto) VALUES (1, 0)",
    f"DROP TRIGGER IF EXISTS {_SQLITE_OLD_INSERT_TRIGGER}",
    *_SQLITE_TRIGGERS.values(),
    *_SQLITE_REBUILD,
)
_SQLITE_DROP: Final = (
    *(f"DROP TRIGGER IF EXISTS {name}" for name in (*_SQLITE_TRIGGERS, _SQLITE_OLD_INSERT_TRIGGER)),
    f"DROP TABLE IF EXISTS {PROGRESS_TABLE}",
    f"DROP TABLE IF EXISTS {FTS_TABLE}",
    f"DROP VIEW IF EXISTS {TEXT_VIEW}",
)
# A catch-up's statements: the last id of the next messages to index (none: nothing to do),
# their text into the index, the progress moved to it.
_SQLITE_NEXT_UPTO: Final = (
    f"SELECT max(id), count(*) FROM (SELECT id FROM ledger_message WHERE id > "
    f"(SELECT upto FROM {PROGRESS_TABLE} WHERE id = 1) ORDER BY id LIMIT %s)"
)
_SQLITE_INDEX_UPTO: Final = (
    f"INSERT INTO {FTS_TABLE}(rowid, text) SELECT id, "
    f"{_SQLITE_TEXT.format(row='ledger_message')} FROM ledger_message "
    f"WHERE id > (SELECT upto FROM {PROGRESS_TABLE} WHERE id = 1) AND id <= %s ORDER BY id"
)
_SQLITE_MOVE_UPTO: Final = f"UPDATE {PROGRESS_TABLE} SET upto = %s WHERE id = 1"
_SQLITE_BEHIND: Final = (
    f"SELECT (SELECT upto FROM {PROGRESS_TABLE} WHERE id = 1) < "
    "(SELECT COALESCE(max(id), 0) FROM ledger_message)"
)

# The same expression in the index and in every query, or PostgreSQL does not use the index.
_PG_VECTOR: Final = (
    "to_tsvector('english', COALESCE(\"ledger_message\".\"content\" ->> 'text', ''))"
)
_PG_CREATE: Final = (
    f"CREATE INDEX IF NOT EXISTS {PG_INDEX} ON ledger_message USING GIN "
    "(to_tsvector('english', COALESCE(content ->> 'text', '')))",
)
_PG_DROP: Final = (f"DROP INDEX IF EXISTS {PG_INDEX}",)


def _run(connection: BaseDatabaseWrapper, statements: tuple[str, ...]) -> None:
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def search_index_create(connection: BaseDatabaseWrapper) -> None:
    """Create the full-text index of the connection's database and fill it (a migration)."""
    if connection.vendor == "sqlite":
        _run(connection, _SQLITE_CREATE)
    elif connection.vendor == "postgresql":
        _run(connection, _PG_CREATE)


def search_index_drop(connection: BaseDatabaseWrapper) -> None:
    """Remove the full-text index (the migration's reverse)."""
    if connection.vendor == "sqlite":
        _run(connection, _SQLITE_DROP)
    elif connection.vendor == "postgresql":
        _run(connection, _PG_DROP)


def search_index_ensure(*, using: str = "default") -> bool:
    """Put back the SQLite triggers if a migration dropped them; True when it had to.

    Django's SQLite backend alters a table by copying it into a new one, which drops the
    table's triggers: the index would keep deleted messages' words. After every ``migrate``
    this recreates missing triggers and rebuilds the index from the messages.
    """
    connection = connections[using]
    if connection.vendor != "sqlite":
        return False
    names = [FTS_TABLE, TEXT_VIEW, PROGRESS_TABLE, _SQLITE_OLD_INSERT_TRIGGER, *_SQLITE_TRIGGERS]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT name FROM sqlite_master WHERE name IN ({', '.join(['%s'] * len(names))})",
            names,
        )
        present = {name for (name,) in cursor.fetchall()}
    if FTS_TABLE not in present:
        return False  # migrated back past the index: nothing to keep in step
    if present == {FTS_TABLE, TEXT_VIEW, PROGRESS_TABLE, *_SQLITE_TRIGGERS}:
        return False
    with transaction.atomic(using=using):
        _run(connection, _SQLITE_CREATE)
    return True


def search_index_catch_up(*, using: str = "default", rows: int = CATCH_UP_ROWS) -> int:
    """Index the messages stored since the index last caught up, ``rows`` at most in each
    transaction, until none is left; how many it indexed. SQLite only: PostgreSQL's index
    follows every insert by itself (0). One read when there is nothing to index."""
    connection = connections[using]
    if connection.vendor != "sqlite":
        return 0
    with connection.cursor() as cursor:
        cursor.execute(_SQLITE_BEHIND)
        behind = cursor.fetchone()
    if not behind or not behind[0]:
        return 0
    indexed = 0
    while True:
        # ``transaction_mode`` IMMEDIATE: the progress is read under the write lock, so two
        # catch-ups (threads, processes) never index a message twice.
        with transaction.atomic(using=using), connection.cursor() as cursor:
            cursor.execute(_SQLITE_NEXT_UPTO, [rows])
            upto, count = cursor.fetchone()
            if upto is not None:
                cursor.execute(_SQLITE_INDEX_UPTO, [upto])
                cursor.execute(_SQLITE_MOVE_UPTO, [upto])
                indexed += count
        if count < rows:
            return indexed


def fts5_query(terms: tuple[str, ...]) -> str:
    """The FTS5 query for some words: each a quoted prefix phrase, all required."""
    # A term holds only letters and digits (``ledger.filters.search_terms``): nothing to escape.
    return " AND ".join(f'"{term}"*' for term in terms)


def tsquery(terms: tuple[str, ...]) -> str:
    """The ``to_tsquery`` text for some words: each a prefix, all required."""
    return " & ".join(f"{term}:*" for term in terms)


def search_narrow(
    messages: QuerySet[Message],
    *,
    terms: tuple[str, ...],
    cluster_id: str,
    newest_first: bool,
    before: int | None = None,
    after: int | None = None,
    snippets: bool = False,
) -> QuerySet[Message]:
    """Keep the messages whose text holds every term, in sequence order, LIMIT-able.

    ``before`` / ``after`` keep the sequences below / above them (the search's cursors). With
    ``snippets`` each message gets ``search_snippet``: its text around the matches, marked.

    On SQLite the index is read in rowid order (rowids grow with sequences in a cluster), so a
    page costs what it returns plus the matches of other clusters it steps over; the snippet
    comes from the same read.
    """
    vendor = connections[messages.db].vendor
    if vendor == "sqlite":
        return _sqlite_narrow(
            messages,
            terms=terms,
            cluster_id=cluster_id,
            newest_first=newest_first,
            before=before,
            after=after,
            snippets=snippets,
        )
    if vendor == "postgresql":
        query = tsquery(terms)
        messages = messages.filter(
            RawSQL(
                f"{_PG_VECTOR} @@ to_tsquery('english', %s)", [query], output_field=BooleanField()
            )
        )
        if before is not None:
            messages = messages.filter(sequence__lt=before)
        if after is not None:
            messages = messages.filter(sequence__gt=after)
        if snippets:
            options = (
                f"StartSel={MATCH_START}, StopSel={MATCH_END}, MaxWords={SNIPPET_WORDS}, "
                "MinWords=8, ShortWord=2, MaxFragments=1, "
                f'FragmentDelimiter="{ELLIPSIS}"'
            )
            headline = (
                "ts_headline('english', COALESCE(\"ledger_message\".\"content\" ->> 'text', ''), "
                "to_tsquery('english', %s), %s)"
            )
            messages = messages.annotate(
                search_snippet=RawSQL(headline, [query, options], output_field=CharField())
            )
        return messages.order_by("-sequence" if newest_first else "sequence")
    raise NotImplementedError(f"no full-text search on {vendor}")


def _sqlite_narrow(
    messages: QuerySet[Message],
    *,
    terms: tuple[str, ...],
    cluster_id: str,
    newest_first: bool,
    before: int | None,
    after: int | None,
    snippets: bool,
) -> QuerySet[Message]:
    # Every message stored before the search is found by it (docs/decisions/0313).
    search_index_catch_up(using=messages.db)
    where = [f"{FTS_TABLE}.rowid = ledger_message.id", f"{FTS_TABLE} MATCH %s"]
    params: list[Any] = [fts5_query(terms)]
    # The cursors also bound the index's own rowid (a message's id, which grows with its
    # sequence), so that a later page seeks to its place instead of stepping over the matches
    # of the pages before it; the sequence filters stay as the exact condition.
    if before is not None:
        where.append(
            f"{FTS_TABLE}.rowid < COALESCE((SELECT id FROM ledger_message WHERE cluster_id = %s "
            "AND sequence >= %s ORDER BY sequence LIMIT 1), 9223372036854775807)"
        )
        params += [cluster_id, before]
        messages = messages.filter(sequence__lt=before)
    if after is not None:
        where.append(
            f"{FTS_TABLE}.rowid > COALESCE((SELECT id FROM ledger_message WHERE cluster_id = %s "
            "AND sequence <= %s ORDER BY sequence DESC LIMIT 1), 0)"
        )
        params += [cluster_id, after]
        messages = messages.filter(sequence__gt=after)
    select: dict[str, str] = {}
    select_params: list[Any] = []
    if snippets:
        select["search_snippet"] = f"snippet({FTS_TABLE}, 0, %s, %s, %s, %s)"
        select_params = [MATCH_START, MATCH_END, ELLIPSIS, SNIPPET_WORDS]
    # Ordering by the index's rowid lets SQLite read the index in that order and stop at the
    # LIMIT; ordering by a message column would sort every match first.
    order = f"{'-' if newest_first else ''}{FTS_TABLE}.rowid"
    return messages.extra(
        select=select,
        select_params=select_params,
        tables=[FTS_TABLE],
        where=where,
        params=params,
        order_by=[order],
    )
