"""One process's SQLite write transactions take turns (docs/decisions/0314).

SQLite writes one transaction at a time, and a connection that finds the database locked
sleeps in SQLite's busy handler, 1 ms, then 2, 5… before it looks again: under concurrent
writers most of a wait is sleep after the lock was free. Every write transaction of this
process takes this turn before its ``BEGIN IMMEDIATE`` and gives it back at its end, so the
next one starts at once. Django's transactions take it in ``ledger.sqlite_backend``; the
transactions begun on the driver's own cursor (``ledger.statements.driver_transaction``) with
``sqlite_write_turn``. Other processes, and statements outside a transaction, still meet on
SQLite's lock.

No import of models here: the database backend imports this module.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)

# Longer than any transaction of ours should hold the turn: past it a writer goes on to
# SQLite's own lock and busy timeout, as if there were no turn (a long import, a migration,
# or two locks taken in opposite orders: logged, never a deadlock).
TURN_WAIT_SECONDS = 5.0

# Reentrant: a transaction that begins another on the same thread (which SQLite refuses) must
# fail on SQLite's error, not wait for itself.
_turn = threading.RLock()


def turn_take() -> bool:
    """Wait for this process's turn to write; False when ``TURN_WAIT_SECONDS`` ran out (the
    writer goes on without it)."""
    if _turn.acquire(timeout=TURN_WAIT_SECONDS):
        return True
    logger.warning(
        "waited %g s for this process's SQLite write turn; writing without it",
        TURN_WAIT_SECONDS,
    )
    return False


def turn_give() -> None:
    """Give back the turn taken by ``turn_take`` (on the same thread)."""
    _turn.release()


@contextmanager
def sqlite_write_turn(db: Any) -> Iterator[None]:
    """Hold the turn around a write transaction begun outside Django's (SQLite, outside any
    transaction); nothing elsewhere."""
    if db.vendor != "sqlite" or db.in_atomic_block:
        yield
        return
    taken = turn_take()
    try:
        yield
    finally:
        if taken:
            turn_give()
