"""The timeline's rows, written in Python: the page's markup kept, every tenant string escaped."""

from __future__ import annotations

import re

import pytest
from django.template.loader import render_to_string

from dashboard.fragments import timeline_rows_html
from dashboard.presentation.timeline import WrittenRows, _row, rows_html
from ledger.interfaces import MessageRecord, SearchHit
from ledger.records import MATCH_END, MATCH_START

HOSTILE = "<script>\"&'</script>"
ESCAPED = "&lt;script&gt;&quot;&amp;&#x27;&lt;/script&gt;"

# The row as the page's template printed it before rows were written in Python.
ROW = """
<li class="msg" id="msg-7" data-sequence="7">
  <details>
    <summary>
      <time class="msg-time num" datetime="2026-02-02T09:20:00.123Z" data-ms="1770024000123" data-format="stamp" title="2026-02-02 09:20:00 UTC">02-02 09:20:00</time>
      <span class="msg-topic"><span class="topic tone-0" title="Topic AGENT_OUTPUT">AGENT_OUTPUT</span></span>
      <span class="msg-sender"><span class="chip mono" title="Sender worker">worker</span></span>
      <span class="msg-line">Done.</span>
    </summary>
    <div class="msg-body">
      <dl class="facts">
        <div><dt>Sequence</dt><dd class="mono">7</dd></div>
        <div><dt>Id</dt><dd class="mono">msg_1</dd></div>
        <div><dt>Sender</dt><dd class="mono">worker</dd></div>
        <div><dt>Receiver</dt><dd class="mono">broadcast</dd></div>
        <div><dt>Time</dt><dd><time datetime="2026-02-02T09:20:00.123Z" data-ms="1770024000123" data-format="full" title="2026-02-02 09:20:00 UTC">2026-02-02 09:20:00 UTC</time></dd></div>
      </dl>
      <h3>Text</h3><pre class="text">Done.
All tests pass.</pre>
      <h3>Data</h3><pre class="json">{
  &quot;taskId&quot;: &quot;task_00000000000000000000000000000000&quot;,
  &quot;ok&quot;: true
}</pre>
      <h3>Metadata</h3><pre class="json">{
  &quot;attempt&quot;: 2
}</pre>
      <p class="small"><a href="/clusters/c-1/messages/7.json">Message as JSON</a> · <a href="/tasks/task_00000000000000000000000000000000/">Its task, step by step</a></p>
    </div>
  </details>
</li>
"""  # noqa: E501


def message(**fields: object) -> MessageRecord:
    given: dict[str, object] = {
        "id": "msg_1",
        "cluster_id": "c-1",
        "sequence": 7,
        "timestamp": 1_770_024_000_123,
        "topic": "AGENT_OUTPUT",
        "sender": "worker",
    }
    return MessageRecord(**{**given, **fields})  # type: ignore[arg-type]


def test_a_row_reads_as_the_template_wrote_it() -> None:
    row = message(
        content={
            "text": "Done.\nAll tests pass.",
            "data": {"taskId": "task_" + "0" * 32, "ok": True},
        },
        metadata={"attempt": 2},
    )

    assert rows_html([(row, None)]) == ROW


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ({}, '<span class="muted">no content</span>'),
        ({"data": None}, '<span class="muted">no content</span>'),
        ({"data": 0}, '<span class="muted">data only</span>'),
        ({"text": "  \n\n second line  "}, "second line"),
    ],
)
def test_a_row_without_a_first_line_says_what_it_holds(
    content: dict[str, object], line: str
) -> None:
    html = rows_html([(message(content=content), None)])

    assert f'<span class="msg-line">{line}</span>' in html
    assert ("<h3>Data</h3>" in html) == ("data" in content)
    assert ("<h3>Text</h3>" in html) == bool(content.get("text"))
    assert "<h3>Metadata</h3>" not in html
    assert "Its task" not in html


def test_every_tenant_string_is_escaped() -> None:
    hostile = message(
        id="m" + HOSTILE,
        topic="T" + HOSTILE,
        sender="s" + HOSTILE,
        receiver="r" + HOSTILE,
        content={"text": HOSTILE, "data": {"taskId": HOSTILE, "k": HOSTILE}},
        metadata={"m": HOSTILE},
    )
    hit = SearchHit(message=hostile, snippet=f"a {MATCH_START}{HOSTILE}{MATCH_END} {HOSTILE}")

    for html in (rows_html([(hostile, None)]), rows_html([(hostile, hit)])):
        assert "<script" not in html
        assert html.count(ESCAPED) >= 8
        # the data and metadata are escaped JSON; a task id not made by the server links nowhere
        assert "&quot;k&quot;: &quot;&lt;script&gt;\\&quot;&amp;&#x27;&lt;/script&gt;&quot;" in html
        assert "Its task" not in html
    searched = rows_html([(hostile, hit)])
    assert f'<span class="msg-line snippet">a <mark>{ESCAPED}</mark> {ESCAPED}</span>' in searched


def test_rows_come_in_the_order_given_each_with_its_own_links() -> None:
    rows = [
        (message(sequence=3, id="c", content={"data": {"taskId": "task_" + "1" * 32}}), None),
        (message(sequence=2, id="b", cluster_id="other"), None),
        (message(sequence=1, id="a"), None),
    ]

    html = rows_html(rows)

    assert re.findall(r'<li class="msg" id="msg-(\d+)"', html) == ["3", "2", "1"]
    assert re.findall(r'<a href="([^"]+)">Message as JSON', html) == [
        "/clusters/c-1/messages/3.json",
        "/clusters/other/messages/2.json",
        "/clusters/c-1/messages/1.json",
    ]
    assert html.count("Its task, step by step") == 1
    assert rows_html([]) == ""


def test_a_push_carries_the_same_rows_as_an_out_of_band_insert() -> None:
    row = message(content={"text": "hello"})

    assert timeline_rows_html([row]) == (
        f'<ol hx-swap-oob="afterbegin:#timeline-rows">{rows_html([(row, None)])}</ol>'
    )
    # the page's region prints them unescaped, inside its list
    region = render_to_string(
        "dashboard/cluster_detail.html#timeline",
        {"rows": rows_html([(row, None)]), "cluster": None},
    )
    assert '<li class="msg" id="msg-7" data-sequence="7">' in region
    assert "No messages yet" not in region


def test_a_row_written_before_is_reused_with_the_same_bytes() -> None:
    rows = WrittenRows()
    row = message(content={"text": "Done.", "data": {"taskId": "task_" + "0" * 32}})
    urls = {"json_url": "/clusters/c-1/messages/7.json", "task_url": "/tasks/x/"}

    first = rows.row(row, **urls)
    again = rows.row(
        message(content={"text": "Done.", "data": {"taskId": "task_" + "0" * 32}}), **urls
    )

    assert again == first
    assert rows.writes == 1
    assert rows_html([(row, None)]) == rows_html([(row, None)])


@pytest.mark.parametrize(
    "other",
    [
        {"content": {"data": True}},  # == 1 in Python, ``true`` on the page
        {"content": {"data": 1.0}},
        {"content": {"data": {"b": 1, "a": 2}}},  # the same dict in another order
        {"metadata": 1},
        {"timestamp": 1_770_024_000_124},
        {"topic": "OTHER"},
        {"sender": "another"},
        {"receiver": "validator"},
    ],
)
def test_a_kept_row_is_not_used_for_a_message_written_from_anything_else(
    other: dict[str, object],
) -> None:
    """A cluster made again under the same id may repeat a message's id and sequence with
    other fields: its row is written anew, as printing it fresh would."""
    rows = WrittenRows()
    urls = {"json_url": "/clusters/c-1/messages/7.json", "task_url": None}
    rows.row(message(content={"data": {"a": 2, "b": 1}}, metadata=1.0), **urls)
    rows.row(message(content={"data": 1}), **urls)
    changed = message(**{"content": {"data": 1}, **other})

    assert rows.row(changed, **urls) == _row(changed, None, **urls)
    assert rows.writes == 3
    assert rows.row(changed, json_url="/elsewhere/7.json", task_url=None) == _row(
        changed, None, json_url="/elsewhere/7.json", task_url=None
    )


def test_kept_rows_are_bounded_the_oldest_written_forgotten_first() -> None:
    rows = WrittenRows(keep=2)
    urls = {"json_url": "/j", "task_url": None}
    for sequence in (1, 2, 3):
        rows.row(message(sequence=sequence, id=f"m{sequence}"), **urls)
    rows.row(message(sequence=3, id="m3"), **urls)
    rows.row(message(sequence=2, id="m2"), **urls)
    assert rows.writes == 3
    rows.row(message(sequence=1, id="m1"), **urls)
    assert rows.writes == 4

    by_chars = WrittenRows(keep_chars=1)
    for _ in range(2):
        by_chars.row(message(), **urls)
    assert by_chars.writes == 1  # the newest row is kept, however long
    by_chars.row(message(sequence=8, id="m8"), **urls)
    by_chars.row(message(), **urls)
    assert by_chars.writes == 3


def test_a_searched_row_is_written_each_time_and_kept_rows_do_not_serve_it() -> None:
    row = message(content={"text": "find me"})
    hit = SearchHit(message=row, snippet=f"{MATCH_START}find{MATCH_END} me")
    plain = rows_html([(row, None)])

    searched = rows_html([(row, hit)])

    assert "<mark>find</mark>" in searched
    assert searched != plain
    assert rows_html([(row, None)]) == plain
