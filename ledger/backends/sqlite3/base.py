"""Django's SQLite backend, with the write transactions of one process taking turns.

SQLite lets one writer at a time hold a database's write lock. A connection that finds it held
waits in SQLite's busy handler, which polls: it sleeps 1 ms, then 2, 5, 10 … between tries, so
the lock stands free while a waiter sleeps. A server runs its write transactions on several
threads at once (the database threads of the API, the pipeline's workers), each with its own
connection: under load, most of a task cycle's transactions found the lock held and slept
(docs/decisions/0307). Here a transaction takes its process's turn for the database file before
``BEGIN IMMEDIATE``, and gives it back at its ``COMMIT`` or ``ROLLBACK``: a writer waiting for
the turn wakes as soon as the one before it ends. Writers in other processes still meet the
lock in SQLite's busy handler, as before; a turn not had within the connection's ``timeout``
leaves the wait to SQLite as well, so the turns never make a wait longer than SQLite's own.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db.backends.sqlite3 import base

_turns: dict[str, threading.Lock] = {}
_turns_lock = threading.Lock()


def write_turn(name: str) -> threading.Lock:
    """The turn of the writers of this process to the database file ``name``."""
    turn = _turns.get(name)
    if turn is None:
        with _turns_lock:
            turn = _turns.setdefault(name, threading.Lock())
    return turn


class DatabaseWrapper(base.DatabaseWrapper):
    """``django.db.backends.sqlite3``, whose write transactions take their process's turn."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turn_held: threading.Lock | None = None

    def write_turn_take(self) -> bool:
        """Wait for this process's turn to write, up to the connection's ``timeout``; past it,
        go on without it (SQLite's busy handler then waits, as without turns). True when this
        call took the turn: False when the connection holds it already, or went on without."""
        if self._turn_held is not None or self.is_in_memory_db():
            return False
        turn = write_turn(str(self.settings_dict["NAME"]))
        timeout = float(self.settings_dict.get("OPTIONS", {}).get("timeout", 5))
        if not turn.acquire(timeout=timeout):
            return False
        self._turn_held = turn
        return True

    def write_turn_give(self) -> None:
        """Give the turn back (the transaction ended), if this connection holds it."""
        turn, self._turn_held = self._turn_held, None
        if turn is not None:
            turn.release()

    def _start_transaction_under_autocommit(self) -> None:
        # ``atomic()``'s outermost block on SQLite: ``BEGIN IMMEDIATE``.
        self.write_turn_take()
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
        except BaseException:
            self.write_turn_give()
            raise

    def _commit(self) -> None:
        try:
            super()._commit()  # type: ignore[misc]
        finally:
            self.write_turn_give()

    def _rollback(self) -> None:
        try:
            super()._rollback()  # type: ignore[misc]
        finally:
            self.write_turn_give()

    def _close(self) -> None:
        # Closing a connection ends its transaction.
        try:
            super()._close()  # type: ignore[misc]
        finally:
            self.write_turn_give()
