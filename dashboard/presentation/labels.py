"""The words and numbers every inspector view prints the same way."""

from __future__ import annotations

from typing import Final

from context.jsformat import iso_ms

PRIORITY_LABELS: Final[dict[str, str]] = {
    "required": "REQ",
    "high": "HIGH",
    "medium": "MED",
    "low": "LOW",
}


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
