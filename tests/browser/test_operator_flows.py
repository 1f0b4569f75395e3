"""What a new operator hit, in a real browser: the what-if race, a live header, the new-rows pill,
a server restart, the keyboard, error pages, search and the narrow layout."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client
from playwright.sync_api import expect

from ledger.interfaces import MessageDraft, cluster_create, message_publish
from tests.browser.test_dashboard import AGENTS, publish_over_http

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

INSPECTOR = "/clusters/amber-comet-7/agents/worker/"


@pytest.fixture
def demo(transactional_db: None) -> None:
    call_command("demo", stdout=StringIO())


@pytest.fixture
def page_at(_browser: Any, operator: Any) -> Iterator[Callable[..., Any]]:
    """``page_at(base_url, width, height)``: a signed-in page of that size (own cookies)."""
    contexts: list[Any] = []

    def open_page(base_url: str, width: int = 1280, height: int = 860) -> Any:
        context = _browser.new_context(
            viewport={"width": width, "height": height}, base_url=base_url, locale="en-GB"
        )
        context.set_default_timeout(5000)
        client = Client()
        client.force_login(operator)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": base_url}]
        )
        contexts.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.console_errors = errors
        return page

    yield open_page
    for context in contexts:
        context.close()


def publish(cluster_id: str, topic: str, text: str, sender: str = "worker") -> int:
    draft = MessageDraft(topic=topic, sender=sender, content={"text": text})
    return message_publish(cluster_id=cluster_id, draft=draft).sequence


# ---- 1. the what-if slider: the last value wins --------------------------------------------


def test_dragging_the_budget_slider_builds_for_where_it_stops(
    signed_in_page: Any, demo: None, screenshot: Any
) -> None:
    page = signed_in_page
    page.goto(INSPECTOR)
    slider = page.locator("#max-tokens-range")
    box = slider.bounding_box()
    assert box is not None
    middle_y = box["y"] + box["height"] / 2
    thumb_x = box["x"] + box["width"] * int(slider.input_value()) / int(slider.get_attribute("max"))

    for stop in (0.18, 0.62, 0.33, 0.81):
        # a quick drag: many input events, each asking for a build, the last on release
        page.mouse.move(thumb_x, middle_y)
        page.mouse.down()
        target = box["x"] + box["width"] * stop
        page.mouse.move(target, middle_y, steps=12)
        page.mouse.up()
        thumb_x = target
        value = slider.input_value()

        # then the number box, the URL, the build and the line above the bar all say it
        expect(page.locator("#max-tokens")).to_have_value(value)
        expect(page.locator("#inspector-region")).to_have_attribute("data-max-tokens", value)
        page.wait_for_function(
            "v => new URL(location.href).searchParams.get('max_tokens') === v", arg=value
        )
        expect(page.locator(".build-line")).to_contain_text(f"budget {int(value):,} tokens")
        assert parse_qs(urlparse(page.url).query)["max_tokens"] == [value]
    assert page.console_errors == []
    screenshot(page, "operator-slider-last-value-wins")


# ---- 8 and 9. the header, the snapshot and the pill while the page is open ----------------


def test_the_header_count_and_the_snapshot_follow_new_messages(
    signed_in_page: Any, live_url: str, screenshot: Any
) -> None:
    cluster_create(cluster_id="live-2", config={"agents": AGENTS})
    for i in range(3):
        publish("live-2", "WORKER_PROGRESS", f"step {i}")
    page = signed_in_page
    page.goto("/clusters/live-2/")
    expect(page.locator("[data-live-status]")).to_have_attribute("data-state", "open")
    expect(page.locator("#cluster-count")).to_have_text("3 messages")
    expect(page.locator("#snapshot-panel")).to_contain_text("No snapshot yet")

    body = {"topic": "ISSUE_OPENED", "sender": "system", "content": {"text": "# Ship the export"}}
    publish_over_http(live_url, "live-2", body)
    for i in range(3):
        body = {"topic": "AGENT_OUTPUT", "sender": "worker", "content": {"text": f"out {i}"}}
        publish_over_http(live_url, "live-2", body)

    # 3 + the issue + its snapshot + 3 outputs
    expect(page.locator("#cluster-count")).to_have_text("8 messages")
    expect(page.locator("#snapshot-panel .snapshot")).to_contain_text("Task: Ship the export")
    expect(page.locator("#timeline-rows li.msg")).to_have_count(8)
    assert page.console_errors == []
    screenshot(page, "operator-live-header-and-snapshot")


def test_the_new_rows_pill_stays_in_view_and_leads_to_the_newest(
    signed_in_page: Any, live_url: str, screenshot: Any
) -> None:
    cluster_create(cluster_id="long-live", config={"agents": AGENTS})
    for i in range(60):
        publish("long-live", "AGENT_OUTPUT", f"earlier output {i}")
    page = signed_in_page
    page.goto("/clusters/long-live/")
    expect(page.locator("[data-live-status]")).to_have_attribute("data-state", "open")
    # scrolled down past the newest rows (below the start form of a cluster not started yet)
    page.mouse.wheel(0, 700)
    page.wait_for_function("window.scrollY >= 690")

    for text in ("first of two", "second of two"):
        body = {"topic": "AGENT_OUTPUT", "sender": "worker", "content": {"text": text}}
        publish_over_http(live_url, "long-live", body)

    pill = page.locator("[data-new-pill]")
    expect(pill).to_have_text("2 new ↑")
    expect(pill).to_be_in_viewport()
    screenshot(page, "operator-new-pill-in-view", full_page=False)
    pill.click()
    newest = page.locator("#timeline-rows li.msg").first
    expect(newest).to_contain_text("second of two")
    expect(newest).to_be_in_viewport()
    expect(pill).to_be_hidden()
    assert page.console_errors == []


# ---- 10. a server restart --------------------------------------------------------------------


@pytest.mark.timed
def test_after_a_server_restart_the_page_is_live_again_and_shows_what_it_missed(
    own_server: Any, page_at: Callable[..., Any], screenshot: Any
) -> None:
    cluster_create(cluster_id="restart-1", config={"agents": AGENTS})
    publish("restart-1", "ISSUE_OPENED", "before the restart", sender="system")
    page = page_at(own_server.url)
    page.goto("/clusters/restart-1/")
    status = page.locator("[data-live-status]")
    expect(status).to_have_attribute("data-state", "open")

    own_server.stop()
    expect(status).to_have_attribute("data-state", "closed")
    # published while the server is down: no push will ever carry these
    for i in range(3):
        publish("restart-1", "WORKER_PROGRESS", f"while it was down {i}")
    own_server.start()
    back_at = time.monotonic()

    expect(status).to_have_attribute("data-state", "open", timeout=5000)
    rows = page.locator("#timeline-rows li.msg", has_text="while it was down")
    expect(rows).to_have_count(3, timeout=5000)
    assert time.monotonic() - back_at < 5
    expect(page.locator("#timeline-rows li.msg").first).to_contain_text("while it was down 2")
    # 1 + its snapshot + 3, counted in the header too
    expect(page.locator("#cluster-count")).to_have_text("5 messages")
    screenshot(page, "operator-live-after-restart")


# ---- 13. the keyboard ------------------------------------------------------------------------


def test_the_keyboard_reaches_max_tokens_in_three_stops_and_sees_where_it_is(
    signed_in_page: Any, demo: None, screenshot: Any
) -> None:
    page = signed_in_page
    page.goto(INSPECTOR)

    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_text("Skip to content")
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_id("max-tokens")  # the second Tab stop

    # the what-if's own skip link lands on it directly
    page.goto(INSPECTOR)
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_text("Skip to the what-if")
    page.keyboard.press("Enter")
    expect(page.locator(":focus")).to_have_id("max-tokens")

    # the bar is one stop; arrows move inside it, with a ring where the focus is
    first = page.locator("#inspector-region .seg").first
    first.focus()
    page.keyboard.press("ArrowRight")
    focused = page.locator("#inspector-region .seg:focus")
    expect(focused).to_have_count(1)
    assert focused.get_attribute("tabindex") == "0"
    assert first.get_attribute("tabindex") == "-1"
    ring = page.evaluate(
        "() => getComputedStyle(document.querySelector('.seg:focus .seg-ring')).strokeWidth"
    )
    assert ring == "4px"
    expect(page.locator("[data-caption]")).not_to_be_empty()
    screenshot(page, "operator-keyboard-focus")
    assert page.console_errors == []


# ---- 14. error pages ----------------------------------------------------------------------------


def test_unknown_pages_get_the_apps_own_styled_page_with_a_way_back(
    signed_in_page: Any, screenshot: Any
) -> None:
    page = signed_in_page
    response = page.goto("/clusters/no-such-cluster/agents/nobody/")

    assert response is not None
    assert response.status == 404
    expect(page.locator("h1")).to_have_text("There is nothing at this address")
    background = page.evaluate(
        "() => getComputedStyle(document.querySelector('.error-page')).backgroundColor"
    )
    assert background not in ("", "rgba(0, 0, 0, 0)")  # the stylesheet applied
    screenshot(page, "operator-404")
    page.get_by_role("link", name="All clusters").click()
    expect(page.locator("h1")).to_have_text("Clusters")


# ---- 19. search ------------------------------------------------------------------------------


def test_searching_the_ledger_marks_the_words_and_keeps_the_filters(
    signed_in_page: Any, screenshot: Any
) -> None:
    cluster_create(cluster_id="search-1", config={"agents": AGENTS})
    publish("search-1", "ISSUE_OPENED", "Export invoices as CSV", sender="system")
    publish("search-1", "WORKER_PROGRESS", "The exporter streams rows now")
    publish("search-1", "AGENT_OUTPUT", "Exported 10,000 rows in 1.2 s")
    publish("search-1", "WORKER_PROGRESS", "Amounts keep two decimals")
    page = signed_in_page
    page.goto("/clusters/search-1/")

    page.fill("#f-q", "exports")
    page.wait_for_url(re.compile(r"\?q=exports$"))
    rows = page.locator("#timeline-rows li.msg")
    expect(rows).to_have_count(4)  # the state snapshot says "Export" too
    expect(rows.first.locator("mark")).to_have_text("Exported")
    expect(page.locator("#timeline-title")).to_contain_text("Search results")

    page.fill("#f-topic", "WORKER_PROGRESS")
    page.press("#f-topic", "Enter")
    page.wait_for_url(re.compile(r"q=exports&topic=WORKER_PROGRESS"))
    expect(rows).to_have_count(1)
    expect(rows.first.locator("mark")).to_have_text("exporter")
    screenshot(page, "operator-search")
    assert page.console_errors == []


# ---- 20. a phone -----------------------------------------------------------------------------


def test_at_390_px_nothing_scrolls_sideways_and_the_essentials_come_first(
    page_at: Callable[..., Any], live_url: str, demo: None, screenshot: Any
) -> None:
    newest = (
        "Retry-After now carries the seconds left in the window, so clients back off exactly "
        "as long as they must."
    )
    publish("amber-comet-7", "WORKER_PROGRESS", newest)
    page = page_at(live_url, 390, 844)

    for name, path in [
        ("clusters", "/"),
        ("cluster", "/clusters/amber-comet-7/"),
        ("inspector", INSPECTOR),
        ("metrics", "/clusters/steady-lantern-12/metrics/"),
        ("search", "/clusters/amber-comet-7/?q=retry"),
        ("diff", "/clusters/amber-comet-7/agents/worker/diff/"),
        ("not-found", "/clusters/nope/"),
    ]:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width} px wide"
        screenshot(page, f"operator-390-{name}")
    # the only console errors so far: the browser noting the 404 of the last page
    assert [e for e in page.console_errors if "404" not in e] == []
    page.console_errors.clear()

    page.goto("/clusters/amber-comet-7/")
    line = page.locator("#timeline-rows li.msg").first.locator(".msg-line")
    expect(line).to_have_text(newest)
    fits = line.evaluate(
        "el => el.scrollWidth <= el.clientWidth && el.getBoundingClientRect().right <= 390"
    )
    assert fits
    # the filters wait behind a button; the search stays
    expect(page.locator("#f-q")).to_be_visible()
    expect(page.locator("#f-topic")).to_be_hidden()
    page.get_by_role("button", name="Filters").click()
    expect(page.locator("#f-topic")).to_be_visible()

    page.goto(INSPECTOR)
    what_if = page.locator("#what-if").bounding_box()
    prompt = page.locator(".prompt-blocks").bounding_box()
    assert what_if is not None
    assert prompt is not None
    assert what_if["y"] + what_if["height"] < prompt["y"]
    assert page.console_errors == []
