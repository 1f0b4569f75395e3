"""A cluster timeline's rows as the page prints them: each value worked out and escaped once.

The page and the live push print rows with one loop in one template
(``cluster_detail.html#timeline-rows``). A page holds a hundred of them, so a row is made of
ready values that the loop only looks up: no filter, tag or ``reverse()`` runs per row, a time
is read once for its three spellings, and a value printed in several places (the sequence, the
sender, the time) is escaped once rather than at each place.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import TypedDict

from django.urls import reverse
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
    # The page of the task the message reports on (``content.data.taskId``), if any.
    task_url: SafeString | None


def timeline_rows(rows: Iterable[tuple[MessageRecord, SearchHit | None]]) -> list[TimelineRow]:
    """The rows of messages (with their search hits, if any), in the order given."""
    prefixes: dict[str, str] = {}
    task_prefix = reverse("dashboard:task", kwargs={"task_id": "0"}).removesuffix("0/")
    shaped = []
    for message, hit in rows:
        prefix = prefixes.get(message.cluster_id)
        if prefix is None:
            prefix = prefixes[message.cluster_id] = _json_url_prefix(message.cluster_id)
        task_id = _task_of(message)
        task_url = f"{task_prefix}{task_id}/" if task_id else None
        shaped.append(
            _row(message, hit, json_url=f"{prefix}{message.sequence}.json", task_url=task_url)
        )
    return shaped


# A task id as the server makes them; anything else in ``data.taskId`` links nowhere.
_TASK_ID = re.compile(r"task_[0-9a-f]{32}")


def _task_of(message: MessageRecord) -> str | None:
    """The task a message reports on (lifecycle, output, usage, errors carry its id)."""
    data = message.content.get("data")
    task_id = data.get("taskId") if isinstance(data, dict) else None
    return task_id if isinstance(task_id, str) and _TASK_ID.fullmatch(task_id) else None


def _json_url_prefix(cluster_id: str) -> str:
    """The URL of a message as JSON without its last part: one ``reverse()`` per cluster."""
    url = reverse("dashboard:message-json", kwargs={"cluster_id": cluster_id, "sequence": 0})
    return url.removesuffix("0.json")


def _escaped(text: str) -> SafeString:
    """``django.utils.html.escape`` without its check for lazy strings: a row holds plain str."""
    return SafeString(html.escape(text))


def _times(ms: int) -> tuple[str, str, str]:
    """The ISO instant, the UTC text and the row's stamp of a time, from one reading of it."""
    moment = moment_of(ms)
    if moment is None:
        return "", str(ms), str(ms)
    iso = moment_iso(moment)
    if moment.year < 1000:  # strftime does not pad such years as the ISO form does
        return iso, moment_utc(moment), moment_stamp(moment)
    # The same texts as moment_utc and moment_stamp, cut from the ISO form.
    day, clock = iso[:10], iso[11:19]
    return iso, f"{day} {clock} UTC", f"{day[5:]} {clock}"


def _row(
    message: MessageRecord, hit: SearchHit | None, *, json_url: str, task_url: str | None
) -> TimelineRow:
    iso, utc, stamp = _times(message.timestamp)
    text = message.text
    content = message.content
    return {
        "sequence": _escaped(str(message.sequence)),
        "id": _escaped(message.id),
        "topic": _escaped(message.topic),
        "tone": _escaped(str(topic_tone(message.topic))),
        "sender": _escaped(message.sender),
        "receiver": _escaped(message.receiver),
        "ms": _escaped(str(message.timestamp)),
        "iso": _escaped(iso),
        "utc": _escaped(utc),
        "stamp": _escaped(stamp),
        "parts": hit.parts if hit is not None else [],
        "line": _escaped(first_line(text)),
        "has_data": content.get("data") is not None,
        "text": _escaped(text) if text else None,
        "data_json": _escaped(pretty_json(content["data"])) if "data" in content else None,
        "metadata_json": (
            _escaped(pretty_json(message.metadata)) if message.metadata is not None else None
        ),
        "json_url": _escaped(json_url),
        "task_url": _escaped(task_url) if task_url else None,
    }
