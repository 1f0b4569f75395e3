"""The words and numbers every operator page prints the same way."""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime
from typing import Any, Final

from context.jsformat import iso_ms

PRIORITY_LABELS: Final[dict[str, str]] = {
    "required": "REQ",
    "high": "HIGH",
    "medium": "MED",
    "low": "LOW",
}
# The number of muted topic tones defined in static/css/app.css (.tone-0 … .tone-9).
TOPIC_TONES: Final = 10
FIRST_LINE_CHARS: Final = 160


def tokens_text(value: int) -> str:
    """``1200`` → ``1,200 tokens`` (``1 token``)."""
    return f"{value:,} token" + ("" if value == 1 else "s")


def time_text(ms: int) -> str:
    """The server-side fallback of a ``<time data-ms>``: ``2026-02-02 09:17:55 UTC``."""
    try:
        iso = iso_ms(ms)
    except ValueError:
        return str(ms)
    return f"{iso[:10]} {iso[11:19]} UTC"


def topic_tone(topic: str) -> int:
    """A stable tone index for a topic name: the same topic has the same colour everywhere."""
    return zlib.crc32(str(topic).encode()) % TOPIC_TONES


def first_line(text: str | None) -> str:
    """The first non-blank line of a text, cut to a table cell's worth."""
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= FIRST_LINE_CHARS else line[: FIRST_LINE_CHARS - 1] + "…"
    return ""


def pretty_json(value: Any) -> str:
    """JSON indented for reading."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def moment_of(ms: int | str | None) -> datetime | None:
    """The instant of an epoch-milliseconds value, or None when there is none to show.

    The ledger refuses timestamps past 9999 (``ledger.validation``), but a page must still
    show whatever an older database holds rather than fail.
    """
    if ms is None or ms == "":
        return None
    try:
        return datetime.fromtimestamp(int(ms) / 1000, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return None


def moment_iso(moment: datetime) -> str:
    """An instant as ISO 8601 UTC with milliseconds (for ``<time datetime>``)."""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def moment_utc(moment: datetime) -> str:
    """The readable UTC time shown until the page's script converts it to local time."""
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def moment_stamp(moment: datetime) -> str:
    """A timeline row's time in UTC, with its day."""
    return moment.strftime("%m-%d %H:%M:%S")
