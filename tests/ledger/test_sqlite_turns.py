"""SQLite: the write transactions of one process take turns (ledger/backends/sqlite3) instead
of meeting the database's write lock in SQLite's busy handler, which sleeps between tries."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.db import connection, transaction

from ledger.backends.sqlite3.base import write_turn
from ledger.services import MessageDraft, message_publish
from ledger.statements import pipeline_cursor_move

pytestmark = pytest.mark.django_db(transaction=True)

# How long a writer is given to reach the database while another holds the turn. A writer
# without turns reaches it at once; with them, it never does while the turn is held, however
# long it is given: the wait only makes the test fail sooner without the turns.
GIVEN_SECONDS = 0.3


@pytest.fixture(autouse=True)
def _sqlite_only() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's write lock; PostgreSQL locks rows")


@contextmanager
def statements_seen(seen: list[str] | None = None) -> Iterator[list[str]]:
    """Every statement SQLite runs on this thread's connection, as SQLite sees it (the driver's
    own cursors included, which Django's wrappers do not see), as it runs it, into ``seen``."""
    seen = [] if seen is None else seen
    connection.ensure_connection()
    connection.connection.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        connection.connection.set_trace_callback(None)


def writer_in_thread(
    write: Callable[[], object],
) -> tuple[threading.Thread, list[str], list[BaseException]]:
    """``write`` on a thread of its own (its own connection), started; the statements its
    connection ran, and what it raised."""
    seen: list[str] = []
    errors: list[BaseException] = []
    ready = threading.Event()

    def run() -> None:
        try:
            with statements_seen(seen):
                ready.set()
                write()
        except BaseException as error:
            errors.append(error)
        finally:
            ready.set()
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    ready.wait(5)
    return thread, seen, errors


WRITES: dict[str, Callable[[str], Callable[[], object]]] = {
    # The ledger's own transaction on the driver's cursor (a publish).
    "publish": lambda cluster: (
        lambda: message_publish(
            cluster_id=cluster, draft=MessageDraft(topic="WORKER_PROGRESS", sender="w")
        )
    ),
    # One statement outside any transaction (the pipeline's cursor over messages nobody reads).
    "cursor move": lambda cluster: (
        lambda: pipeline_cursor_move(cluster_id=cluster, after=10**9, to=10**9)
    ),
}


@pytest.mark.parametrize("kind", ["publish", "cursor move"])
def test_a_writer_waits_for_the_turn_not_for_the_lock(cluster: str, kind: str) -> None:
    # given a transaction of this thread that holds the database's write lock
    with transaction.atomic():
        connection.cursor().execute("SELECT 1")
        # when another thread's connection writes meanwhile
        thread, seen, errors = writer_in_thread(WRITES[kind](cluster))
        thread.join(GIVEN_SECONDS)
        # then it waits for this process's turn, before it asks SQLite for the lock
        assert thread.is_alive()
        assert not any(sql.startswith(("BEGIN", "UPDATE")) for sql in seen), seen
    # and it writes once the transaction ends
    thread.join(10)
    assert not thread.is_alive()
    assert not errors
    assert any(sql.startswith(("BEGIN", "UPDATE")) for sql in seen), seen


def test_an_atomic_block_waits_for_the_turn(cluster: str) -> None:
    done = threading.Event()

    def write() -> None:
        with transaction.atomic():
            connection.cursor().execute("SELECT 1")
        done.set()

    with transaction.atomic():
        connection.cursor().execute("SELECT 1")
        thread, seen, errors = writer_in_thread(write)
        thread.join(GIVEN_SECONDS)
        assert not done.is_set()
        assert not any(sql.startswith("BEGIN") for sql in seen), seen
    thread.join(10)
    assert done.is_set()
    assert not errors
    assert seen[0].startswith("BEGIN IMMEDIATE"), seen


def test_the_turn_is_given_back_however_the_transaction_ends(cluster: str) -> None:
    turn = write_turn(str(connection.settings_dict["NAME"]))
    # a commit
    with transaction.atomic():
        assert turn.locked()
    assert not turn.locked()
    # a rollback
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        1 / 0  # noqa: B018
    assert not turn.locked()
    # a connection closed inside its transaction
    with transaction.atomic():
        connection.close()
        assert not turn.locked()
    # the ledger's own transaction, and a statement of its own
    message_publish(cluster_id=cluster, draft=MessageDraft(topic="WORKER_PROGRESS", sender="w"))
    pipeline_cursor_move(cluster_id=cluster, after=10**9, to=10**9)
    assert not turn.locked()


def test_a_turn_not_had_in_time_leaves_the_wait_to_sqlite(cluster: str) -> None:
    # given the turn held elsewhere in the process (not by a connection: nothing will free it)
    turn = write_turn(str(connection.settings_dict["NAME"]))
    options = connection.settings_dict["OPTIONS"]
    timeout = options["timeout"]
    turn.acquire()
    options["timeout"] = 0.05
    try:
        # when a transaction begins, then it goes on without the turn after its timeout
        with statements_seen() as seen, transaction.atomic():
            connection.cursor().execute("SELECT 1")
        assert seen[0].startswith("BEGIN IMMEDIATE")
        # and gives back nothing it did not take
        assert turn.locked()
    finally:
        options["timeout"] = timeout
        turn.release()
