"""A cluster timeline's rows as the page prints them, written by one Python function.

The page, the live push and a page catching up print the same rows (``rows_html``). A
page holds a hundred of them, and a row is fixed once its message is stored (messages are
immutable), so rows are written here rather than by the template engine, whose lookups, filters
and escaping per value cost about ten times as much. Every text that comes from a message is
escaped exactly once (``html.escape``, quotes included, as the template's autoescape does).

Rows already written are kept per process (``WrittenRows``): a page loaded again, another page
of the same cluster or a push's render reuses the row of a message it has written before,
checked against everything the row is written from (docs/decisions/0245).
"""

from __future__ import annotations

import html
import json
import re
import threading
from collections.abc import Iterable
from typing import Any

from django.utils.safestring import SafeString

from dashboard.links import reverse_kept
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

_escape = html.escape


def rows_html(rows: Iterable[tuple[MessageRecord, SearchHit | None]]) -> SafeString:
    """The rows of messages (with their search hits, if any), in the order given."""
    task_prefix = _escape(
        reverse_kept("dashboard:task", kwargs={"task_id": "0"}).removesuffix("0/")
    )
    prefixes: dict[str, str] = {}
    written = []
    for message, hit in rows:
        prefix = prefixes.get(message.cluster_id)
        if prefix is None:
            prefix = prefixes[message.cluster_id] = _json_url_prefix(message.cluster_id)
        task_id = _task_of(message)
        # The prefixes are escaped once; a sequence and a task id (``_TASK_ID``) need none.
        json_url = f"{prefix}{message.sequence}.json"
        task_url = f"{task_prefix}{task_id}/" if task_id else None
        if hit is not None:  # a search's row marks its hits: written each time
            written.append(_row(message, hit, json_url=json_url, task_url=task_url))
            continue
        written.append(written_rows.row(message, json_url=json_url, task_url=task_url))
    return SafeString("".join(written))


class WrittenRows:
    """The rows of messages written before, kept up to ``keep`` rows and ``keep_chars``
    characters, the oldest written forgotten first.

    A row is found by its message's cluster, sequence and id, and used only when everything it
    is written from is the same: the message's other fields, its content and metadata as exact
    JSON (``_content_text``: ``1``, ``1.0`` and ``true`` differ there, as do keys in another
    order, where Python's ``==`` sees none) and the two links. A cluster made again under the
    same id, whose messages may repeat ids and sequences with other contents, gets its own rows.
    Safe across threads (a page's view and a push's render run on different ones).
    """

    def __init__(self, *, keep: int = 4096, keep_chars: int = 8_000_000) -> None:
        self.keep = keep
        self.keep_chars = keep_chars
        self.writes = 0  # rows written, for the tests and a debugger
        self._rows: dict[tuple[str, int, str], tuple[tuple[Any, ...], str]] = {}
        self._chars = 0
        self._lock = threading.Lock()

    def row(self, message: MessageRecord, *, json_url: str, task_url: str | None) -> str:
        """The row of ``message`` (no search hit), written once and kept."""
        key = (message.cluster_id, message.sequence, message.id)
        source = (
            message.timestamp,
            message.topic,
            message.sender,
            message.receiver,
            _content_text([message.content, message.metadata]),
            json_url,
            task_url,
        )
        kept = self._rows.get(key)
        if kept is not None and kept[0] == source:
            return kept[1]
        self.writes += 1
        written = _row(message, None, json_url=json_url, task_url=task_url)
        with self._lock:
            previous = self._rows.pop(key, None)
            if previous is not None:
                self._chars -= len(previous[1])
            self._rows[key] = (source, written)
            self._chars += len(written)
            while len(self._rows) > self.keep or (
                self._chars > self.keep_chars and len(self._rows) > 1
            ):
                oldest = next(iter(self._rows))
                self._chars -= len(self._rows.pop(oldest)[1])
        return written


def _content_text(value: Any) -> str:
    """A JSON value as exact text: what ``pretty_json`` prints is a function of it (both use
    the same ``default``, neither sorts the keys)."""
    return json.dumps(value, default=str)


written_rows = WrittenRows()


# A task id as the server makes them; anything else in ``data.taskId`` links nowhere.
_TASK_ID = re.compile(r"task_[0-9a-f]{32}")


def _task_of(message: MessageRecord) -> str | None:
    """The task a message reports on (lifecycle, output, usage, errors carry its id)."""
    data = message.content.get("data")
    task_id = data.get("taskId") if isinstance(data, dict) else None
    return task_id if isinstance(task_id, str) and _TASK_ID.fullmatch(task_id) else None


def _json_url_prefix(cluster_id: str) -> str:
    """The URL of a message as JSON without its last part, escaped: one ``reverse()`` per
    cluster."""
    url = reverse_kept("dashboard:message-json", kwargs={"cluster_id": cluster_id, "sequence": 0})
    return _escape(url.removesuffix("0.json"))


def _times(ms: int) -> tuple[str, str, str]:
    """The ISO instant, the UTC text and the row's stamp of a time, from one reading of it,
    ready for the markup: a date's texts hold digits, ``-``, ``:``, ``.``, ``T``, ``Z``,
    spaces and ``UTC``, nothing to escape."""
    moment = moment_of(ms)
    if moment is None:
        shown = _escape(str(ms))
        return "", shown, shown
    iso = moment_iso(moment)
    if moment.year < 1000:  # strftime does not pad such years as the ISO form does
        return iso, moment_utc(moment), moment_stamp(moment)
    # The same texts as moment_utc and moment_stamp, cut from the ISO form.
    day, clock = iso[:10], iso[11:19]
    return iso, f"{day} {clock} UTC", f"{day[5:]} {clock}"


def _line(message: MessageRecord, hit: SearchHit | None) -> str:
    """What the collapsed row says: the search snippet, else the text's first line."""
    parts = hit.parts if hit is not None else []
    if parts:
        return "".join(
            f"<mark>{_escape(text)}</mark>" if matched else _escape(text) for text, matched in parts
        )
    line = first_line(message.text)
    if line:
        return _escape(line)
    if message.content.get("data") is not None:
        return '<span class="muted">data only</span>'
    return '<span class="muted">no content</span>'


def _row(
    message: MessageRecord, hit: SearchHit | None, *, json_url: str, task_url: str | None
) -> str:
    iso, utc, stamp = _times(message.timestamp)
    sequence, ms = message.sequence, message.timestamp
    topic, sender = _escape(message.topic), _escape(message.sender)
    text, content, metadata = message.text, message.content, message.metadata
    snippet = " snippet" if hit is not None and hit.parts else ""
    text_html = f'<h3>Text</h3><pre class="text">{_escape(text)}</pre>' if text else ""
    data_html = (
        f'<h3>Data</h3><pre class="json">{_escape(pretty_json(content["data"]))}</pre>'
        if "data" in content
        else ""
    )
    metadata_html = (
        f'<h3>Metadata</h3><pre class="json">{_escape(pretty_json(metadata))}</pre>'
        if metadata is not None
        else ""
    )
    task_html = f' · <a href="{task_url}">Its task, step by step</a>' if task_url else ""
    return f"""
<li class="msg" id="msg-{sequence}" data-sequence="{sequence}">
  <details>
    <summary>
      <time class="msg-time num" datetime="{iso}" data-ms="{ms}" data-format="stamp" title="{utc}">{stamp}</time>
      <span class="msg-topic"><span class="topic tone-{topic_tone(message.topic)}" title="Topic {topic}">{topic}</span></span>
      <span class="msg-sender"><span class="chip mono" title="Sender {sender}">{sender}</span></span>
      <span class="msg-line{snippet}">{_line(message, hit)}</span>
    </summary>
    <div class="msg-body">
      <dl class="facts">
        <div><dt>Sequence</dt><dd class="mono">{sequence}</dd></div>
        <div><dt>Id</dt><dd class="mono">{_escape(message.id)}</dd></div>
        <div><dt>Sender</dt><dd class="mono">{sender}</dd></div>
        <div><dt>Receiver</dt><dd class="mono">{_escape(message.receiver)}</dd></div>
        <div><dt>Time</dt><dd><time datetime="{iso}" data-ms="{ms}" data-format="full" title="{utc}">{utc}</time></dd></div>
      </dl>
      {text_html}
      {data_html}
      {metadata_html}
      <p class="small"><a href="{json_url}">Message as JSON</a>{task_html}</p>
    </div>
  </details>
</li>
"""  # noqa: E501 (the row's markup, line for line as the page printed it from its template)
