"""Retention once a day, in whichever server process claims the day first.

``OPERATIONS_RETENTION`` (a ``RetentionPolicy``, from ``ZEROSHOT_RETENTION_OLDER_THAN`` and
``ZEROSHOT_RETENTION_STATES``) turns it on; each served process then checks every hour whether
today's prune has run. The day is claimed with an atomic ``cache.add``: with several servers the
cache is Redis, shared, so one of them prunes; a failed prune is logged and tried the next day.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections

from ledger.interfaces import now_ms
from operations.policy import RetentionPolicy
from operations.retention import PrunedCluster, clusters_prune

logger = logging.getLogger(__name__)

DAY_MS = 86_400_000
CHECK_SECONDS = 3600.0


def retention_run_if_due(
    *, policy: RetentionPolicy, now: int, export_dir: Path | None
) -> list[PrunedCluster] | None:
    """Prune by the policy unless some process already did today (UTC); None when it had."""
    day = now // DAY_MS
    if not cache.add(f"zeroshot:retention:{day}", os.getpid(), timeout=2 * 86_400):
        return None
    pruned = clusters_prune(policy=policy, now_ms=now, export_dir=export_dir)
    logger.warning("retention pruned %d cluster(s)", len(pruned))
    return pruned


class RetentionDaily:
    """The daemon thread that runs ``retention_run_if_due`` every ``CHECK_SECONDS``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> bool:
        """Start the thread when the setting asks for retention; True when it runs."""
        if settings.OPERATIONS_RETENTION is None:
            return False
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="retention-daily", daemon=True
                )
                self._thread.start()
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread after its current check (tests)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            policy: RetentionPolicy | None = settings.OPERATIONS_RETENTION
            export = settings.OPERATIONS_RETENTION_EXPORT_DIR
            try:
                if policy is not None:
                    retention_run_if_due(
                        policy=policy, now=now_ms(), export_dir=Path(export) if export else None
                    )
            except Exception:  # reported, and tried again the next day
                logger.exception("retention failed")
            finally:
                close_old_connections()
            self._stop.wait(CHECK_SECONDS)


retention_daily = RetentionDaily()
