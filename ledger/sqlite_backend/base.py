"""Django's SQLite backend, whose transactions take this process's write turn
(``ledger.write_turn``, docs/decisions/0314): from ``BEGIN IMMEDIATE`` to the commit, the
rollback or the connection's close."""

from __future__ import annotations

from typing import Any

from django.db.backends.sqlite3 import base

from ledger.write_turn import turn_give, turn_take


class DatabaseWrapper(base.DatabaseWrapper):
    """Django's SQLite wrapper; its transactions hold the write turn."""

    _holds_turn = False

    def _start_transaction_under_autocommit(self) -> None:
        self._holds_turn = turn_take()
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]  # not in the stubs
        except BaseException:
            self._give_turn()
            raise

    def _commit(self) -> Any:
        try:
            return super()._commit()  # type: ignore[misc]  # not in the stubs
        finally:
            self._give_turn()

    def _rollback(self) -> Any:
        try:
            return super()._rollback()  # type: ignore[misc]  # not in the stubs
        finally:
            self._give_turn()

    def _close(self) -> Any:
        try:
            return super()._close()  # type: ignore[misc]  # not in the stubs
        finally:
            self._give_turn()

    def _give_turn(self) -> None:
        if self._holds_turn:
            self._holds_turn = False
            turn_give()
