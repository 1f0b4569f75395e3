"""Timeline rows in a real browser: stamps with their year, chips that fit, search snippets."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from ledger.interfaces import MessageDraft, cluster_create, message_publish
from ledger.models import Message

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DAY_MS = 86_400_000
LONG_SENDER = "implementation-validator-for-the-payments-service-eu-west"


def publish(cluster_id: str, topic: str, text: str, sender: str = "worker") -> int:
    draft = MessageDraft(topic=topic, sender=sender, content={"text": text})
    return message_publish(cluster_id=cluster_id, draft=draft).sequence


def dated_rows(cluster_id: str) -> None:
    """Rows from 400 days ago, from 3 days ago and from now; one with a long sender."""
    cluster_create(cluster_id=cluster_id, config={"agents": []})
    now = int(time.time() * 1000)
    for days, topic in ((400, "IMPLEMENTATION_READY"), (3, "VALIDATION_RESULT")):
        sequence = publish(cluster_id, topic, f"{days} days ago")
        Message.objects.filter(cluster_id=cluster_id, sequence=sequence).update(
            timestamp=now - days * DAY_MS
        )
    publish(cluster_id, "WORKER_PROGRESS", "now", sender=LONG_SENDER)


def inside(inner: dict[str, float], outer: dict[str, float]) -> bool:
    return inner["x"] >= outer["x"] - 0.5 and (
        inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 0.5
    )


def test_old_rows_show_their_year_and_stamps_keep_clear_of_the_topic(
    signed_in_page: Any, screenshot: Any
) -> None:
    dated_rows("dated")
    page = signed_in_page
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto("/clusters/dated/")
    rows = page.locator("#timeline-rows li.msg")
    expect(rows).to_have_count(3)
    old, recent, today = (rows.nth(i).locator(".msg-time") for i in (2, 1, 0))
    this_year = str(time.gmtime().tm_year)
    old_year = str(time.gmtime(time.time() - 400 * 86400).tm_year)
    # the 400-day-old row says its year; this year's rows need none
    expect(old).to_contain_text(old_year)
    if time.gmtime(time.time() - 3 * 86400).tm_year == int(this_year):
        expect(recent).not_to_contain_text(this_year)
    expect(today).to_have_text(re.compile(r"^\d\d:\d\d:\d\d$"))
    # and no stamp runs into its topic chip
    for i in range(3):
        row = rows.nth(i)
        stamp = row.locator(".msg-time").evaluate(
            "el => { const r = document.createRange(); r.selectNodeContents(el);"
            " return r.getBoundingClientRect().right; }"
        )
        topic = row.locator(".topic").bounding_box()
        assert topic is not None
        assert stamp <= topic["x"], f"row {i}: stamp ends at {stamp}, topic starts {topic['x']}"
    screenshot(page, "timeline-dated-1440", full_page=False)
    assert page.console_errors == []


def test_a_long_sender_chip_stays_in_its_card_at_390(signed_in_page: Any, screenshot: Any) -> None:
    dated_rows("narrow")
    page = signed_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/clusters/narrow/")
    row = page.locator("#timeline-rows li.msg").first
    chip = row.locator(".msg-sender .chip").bounding_box()
    card = row.locator("summary").bounding_box()
    assert chip is not None
    assert card is not None
    assert inside(chip, card), f"chip {chip} leaves its card {card}"
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(page, "timeline-long-sender-390", full_page=False)
    assert page.console_errors == []


def test_a_search_snippet_shows_the_hit_whole(signed_in_page: Any, screenshot: Any) -> None:
    cluster_create(cluster_id="snippets", config={"agents": []})
    words = " ".join(f"word{i}" for i in range(30))
    publish("snippets", "WORKER_PROGRESS", f"{words} Retry-After is honoured now {words}")
    page = signed_in_page
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto("/clusters/snippets/?q=retry")
    mark = page.locator("#timeline-rows li.msg").first.locator(".msg-line mark").first
    expect(mark).to_have_text(re.compile("^Retry"))
    line = page.locator("#timeline-rows li.msg").first.locator(".msg-line")
    box, line_box = mark.bounding_box(), line.bounding_box()
    assert box is not None
    assert line_box is not None
    assert inside(box, line_box)
    assert box["y"] + box["height"] <= line_box["y"] + line_box["height"] + 0.5
    screenshot(page, "search-snippet-1440", full_page=False)
    assert page.console_errors == []


def test_enter_while_typing_a_search_logs_no_error(signed_in_page: Any, screenshot: Any) -> None:
    cluster_create(cluster_id="typing", config={"agents": []})
    for i in range(30):
        publish("typing", "WORKER_PROGRESS", f"Exported batch {i} of the invoices")
    page = signed_in_page
    page.goto("/clusters/typing/")
    for _ in range(3):
        page.locator("#f-q").fill("")
        page.locator("#f-q").press_sequentially("exported invo", delay=60)
        page.keyboard.press("Enter")
        page.locator("#f-q").press_sequentially("ices", delay=60)
        page.keyboard.press("Enter")
        page.wait_for_timeout(200)
    page.wait_for_url(re.compile(r"\?q=exported(\+|%20)invoices$"))
    page.wait_for_load_state("networkidle")
    expect(page.locator("#timeline-rows li.msg")).to_have_count(30)
    screenshot(page, "search-typed", full_page=False)
    assert page.console_errors == []
