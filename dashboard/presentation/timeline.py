"""A cluster timeline's rows as the page prints them: each value worked out and escaped once.

The page and the live push print rows with one loop in one template
(``cluster_detail.html#timeline-rows``). A page holds a hundred of them, so a row is made of
ready values that the loop only looks up: no filter, tag or ``reverse()`` runs per row, a time
is read once for its three spellings, and a value printed in several places (the sequence, the
sender, the time) is escaped once rather than at each place.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString

from dashboard.presentation.labels import (
    first_line,
    moment_iso,
    moment_of,
    moment_stamp,
    moment_utc,
    pretty_json,
    topic_tone,
)
from ledger.interfaces import MessageRecord, SearchHit


# A dict rather than a dataclass: the template engine tries ``row[key]`` before an attribute,
# and on an object that first try costs a raised and caught TypeError per lookup.
class TimelineRow(TypedDict):
    """One message as its timeline row shows it; every text is already escaped."""

    sequence: SafeString
    id: SafeString
    topic: SafeString
    tone: SafeString
    sender: SafeString
    receiver: SafeString
    ms: SafeString
    iso: SafeString
    utc: SafeString
    stamp: SafeString
    # The search snippet as (text, matched) pieces, escaped by the template; empty unless a
    # search found the message. Without them the row shows ``line``.
    parts: list[tuple[str, bool]]
    line: SafeString
    has_data: bool
    text: SafeString | None
    data_json: SafeString | None
    metadata_json: SafeString | None
    json_url: SafeString


def timeline_rows(rows: Iterable[tuple[MessageRecord, SearchHit | None]]) -> list[TimelineRow]:
    """The rows of messages (with their search hits, if any), in the order given."""
    prefixes: dict[str, str] = {}
    shaped = []
    for message, hit in rows:
        prefix = prefixes.get(message.cluster_id)
        if prefix is None:
            prefix = prefixes[message.cluster_id] = _json_url_prefix(message.cluster_id)
        shaped.append(_row(message, hit, json_url=f"{prefix}{message.sequence}.json"))
    return shaped


def _json_url_prefix(cluster_id: str) -> str:
    """The URL of a message as JSON without its last part: one ``reverse()`` per cluster."""
    url = reverse("dashboard:message-json", kwargs={"cluster_id": cluster_id, "sequence": 0})
    return url.removesuffix("0.json")


def _row(message: MessageRecord, hit: SearchHit | None, *, json_url: str) -> TimelineRow:
    moment = moment_of(message.timestamp)
    ms = str(message.timestamp)
    text = message.text
    content = message.content
    return {
        "sequence": escape(message.sequence),
        "id": escape(message.id),
        "topic": escape(message.topic),
        "tone": escape(topic_tone(message.topic)),
        "sender": escape(message.sender),
        "receiver": escape(message.receiver),
        "ms": escape(ms),
        "iso": escape(moment_iso(moment) if moment is not None else ""),
        "utc": escape(moment_utc(moment) if moment is not None else ms),
        "stamp": escape(moment_stamp(moment) if moment is not None else ms),
        "parts": hit.parts if hit is not None else [],
        "line": escape(first_line(text)),
        "has_data": content.get("data") is not None,
        "text": escape(text) if text else None,
        "data_json": escape(pretty_json(content["data"])) if "data" in content else None,
        "metadata_json": (
            escape(pretty_json(message.metadata)) if message.metadata is not None else None
        ),
        "json_url": escape(json_url),
    }
