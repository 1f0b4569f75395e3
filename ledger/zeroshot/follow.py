"""Following a live zeroshot ledger: the rows it gains, read from a private, refreshed copy."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from ledger.zeroshot.format import LedgerSource, ZeroshotMessage, ZeroshotSourceError
from ledger.zeroshot.reader import copy_ledger_files, read_messages_after_rowid

# Rows read per poll; a poll that fills it reads again at once.
FOLLOW_BATCH = 1000


class LedgerTail:
    """A private, refreshed copy of one live ledger, read after the last rowid seen.

    The database file changes only when zeroshot checkpoints its WAL, the WAL on every write. So
    each poll copies nothing when neither changed, only the WAL when the database file held
    still (checked before and after the copy), and everything otherwise. The copy is opened
    read-only, so closing it never checkpoints the copied WAL into the copied database: the copy
    stays "database as of the last full copy + a later state of the same WAL".
    """

    def __init__(self, *, source: LedgerSource, last_rowid: int, copy_dir: Path) -> None:
        self.source = source
        self.last_rowid = last_rowid
        self.copy_dir = copy_dir
        self.copy = copy_dir / source.path.name
        self._main_stamp: tuple[int, int] | None = None
        self._wal_stamp: tuple[int, int] | None = None

    def poll(self) -> list[ZeroshotMessage]:
        """The rows committed since the last poll, in rowid order (at most ``FOLLOW_BATCH``)."""
        if not self._refresh():
            return []
        conn = sqlite3.connect(f"{self.copy.as_uri()}?mode=ro", uri=True)
        try:
            rows = read_messages_after_rowid(conn, self.last_rowid, FOLLOW_BATCH)
        finally:
            conn.close()
        if len(rows) == FOLLOW_BATCH:
            # More to read: the next poll reads this copy again without waiting for a change.
            self._wal_stamp = None
        if rows:
            self.last_rowid = rows[-1].rowid
        return rows

    def _refresh(self) -> bool:
        """Bring the copy up to date; False when the source has not changed since last time."""
        source_wal = Path(f"{self.source.path}-wal")
        main, wal = _stamp(self.source.path), _stamp(source_wal)
        if main is None:
            raise ZeroshotSourceError(f"{self.source.path} is gone")
        if main == self._main_stamp and wal == self._wal_stamp:
            return False
        if main == self._main_stamp:
            copied_wal = Path(f"{self.copy}-wal")
            try:
                shutil.copyfile(source_wal, copied_wal)
            except FileNotFoundError:
                copied_wal.unlink(missing_ok=True)
            Path(f"{self.copy}-shm").unlink(missing_ok=True)
            # A checkpoint during the copy would pair the old database with a newer WAL.
            if _stamp(self.source.path) == main:
                self._wal_stamp = wal
                return True
        # First poll, or a checkpoint moved pages into the database file: copy everything.
        copy_ledger_files(self.source.path, self.copy_dir)
        # SQLite rebuilds the WAL index from the copied WAL; a -shm copied mid-write could lie.
        Path(f"{self.copy}-shm").unlink(missing_ok=True)
        self._main_stamp = _stamp(self.source.path)
        self._wal_stamp = wal
        return True


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_size, stat.st_mtime_ns)
