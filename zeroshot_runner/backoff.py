"""Retrying transient HTTP failures: exponential backoff with full jitter, honouring Retry-After."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

# Statuses that say "not now" rather than "never": rate limiting and an unavailable upstream.
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Backoff:
    """How often and how long to wait between attempts of one call."""

    attempts: int = 5
    base: float = 0.5
    cap: float = 30.0
    # A server asking for more than this is waited for this long, then asked again.
    max_retry_after: float = 60.0

    def delay(
        self, attempt: int, *, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0-based)."""
        draw = (rng or random).uniform
        if retry_after is not None:
            # A small jitter on top keeps runners that were told the same time from returning
            # in one burst.
            return min(retry_after, self.max_retry_after) + draw(0.0, self.base)
        return draw(0.0, min(self.cap, self.base * 2**attempt))


def retry_after_seconds(response: httpx.Response, *, now: datetime | None = None) -> float | None:
    """The response's Retry-After header in seconds (delta or HTTP date), or ``None``."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when: datetime = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def is_transient(response: httpx.Response) -> bool:
    """Whether a response is worth asking again."""
    return response.status_code in TRANSIENT_STATUSES


def sleep(seconds: float) -> None:
    """Wait; the default sleeper of calls that must not be cut short."""
    time.sleep(seconds)
