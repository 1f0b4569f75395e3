"""The dashboard in a real browser: sign-in, demo clusters, live timeline, filters, escaping."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from ledger.keys import api_key_create
from ledger.services import MessageDraft, cluster_create, message_publish

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS = "<script>window.__xss=1</script><img src=x onerror=window.__xss=2>"
AGENTS = [
    {
        "id": "worker",
        "role": "implementation",
        "triggers": [{"topic": "ISSUE_OPENED"}],
        "hooks": {"onComplete": {"config": {"topic": "IMPLEMENTATION_READY"}}},
    },
    {"id": "validator", "role": "validator", "triggers": [{"topic": "IMPLEMENTATION_READY"}]},
]


def publish_over_http(live_url: str, cluster_id: str, body: dict[str, Any]) -> None:
    """Publish like an agent does: through the API of the running server, with a Bearer key."""
    _, key = api_key_create(name="browser-test-agent")
    request = urllib.request.Request(
        f"{live_url}/api/v1/clusters/{cluster_id}/messages",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 201


def test_operator_signs_in_and_sees_the_demo_clusters(browser_page: Any, screenshot: Any) -> None:
    call_command("demo", stdout=StringIO())
    page = browser_page

    page.goto("/")
    expect(page.locator("h1")).to_have_text("Sign in")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "zeroshot-demo")
    page.click("button[type=submit]")

    expect(page.locator("h1")).to_have_text("Clusters")
    rows = page.locator("#cluster-rows tr")
    expect(rows).to_have_count(4)
    for cluster_id in ("amber-comet-7", "quiet-harbor-21", "bold-ridge-3", "steady-lantern-12"):
        expect(page.get_by_role("link", name=cluster_id)).to_be_visible()
    # Times are rewritten by the page's script into the operator's local, relative form.
    expect(page.locator("#cluster-rows time").first).to_have_text(
        __import__("re").compile(r"ago|now")
    )
    screenshot(page, "dashboard-clusters")

    page.fill("#q", "amber")
    expect(rows).to_have_count(1)
    expect(page).to_have_url(__import__("re").compile(r"\?q=amber$"))
    assert page.console_errors == []


@pytest.mark.timed
def test_new_message_appears_live_without_reload(
    signed_in_page: Any, live_url: str, screenshot: Any
) -> None:
    cluster_create(cluster_id="live-1", config={"agents": AGENTS})
    message_publish(
        cluster_id="live-1",
        draft=MessageDraft(topic="ISSUE_OPENED", sender="system", content={"text": "Fix it"}),
    )
    page = signed_in_page
    page.goto("/clusters/live-1/")
    expect(page.locator("[data-live-status]")).to_have_attribute("data-state", "open")
    page.evaluate("window.__notReloaded = true")

    publish_over_http(
        live_url,
        "live-1",
        {"topic": "PLAN_READY", "sender": "planner", "content": {"text": "A plan, pushed live"}},
    )
    started = time.monotonic()

    row = page.locator("#timeline-rows li.msg", has=page.locator(".topic", has_text="PLAN_READY"))
    expect(row).to_be_visible(timeout=2000)
    assert time.monotonic() - started < 2
    assert page.evaluate("window.__notReloaded") is True
    # Newest first: the pushed row sits above the message the page was loaded with.
    texts = page.locator("#timeline-rows .msg-line").all_inner_texts()
    assert texts.index("A plan, pushed live") < texts.index("Fix it")
    row.locator("summary").click()
    expect(row.locator("pre.text")).to_have_text("A plan, pushed live")
    screenshot(page, "dashboard-live-row")
    assert page.console_errors == []


def test_topic_filter_updates_the_list_and_the_url(signed_in_page: Any, screenshot: Any) -> None:
    cluster_create(cluster_id="filter-1", config={"agents": AGENTS})
    for topic, text in [
        ("ISSUE_OPENED", "the issue"),
        ("WORKER_PROGRESS", "first step"),
        ("IMPLEMENTATION_READY", "done"),
        ("WORKER_PROGRESS", "second step"),
    ]:
        message_publish(
            cluster_id="filter-1",
            draft=MessageDraft(topic=topic, sender="worker", content={"text": text}),
        )
    page = signed_in_page
    page.goto("/clusters/filter-1/")
    everything = page.locator("#timeline-rows li.msg").count()
    assert everything >= 4  # the state snapshotter may add its own messages

    page.fill("#f-topic", "WORKER_PROGRESS")
    page.press("#f-topic", "Enter")

    expect(page).to_have_url(
        __import__("re").compile(r"/clusters/filter-1/\?topic=WORKER_PROGRESS$")
    )
    rows = page.locator("#timeline-rows li.msg")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("second step")
    expect(rows.nth(1)).to_contain_text("first step")
    screenshot(page, "dashboard-topic-filter")

    page.go_back()
    expect(page.locator("#timeline-rows li.msg")).to_have_count(everything)
    assert page.console_errors == []


def test_agent_text_renders_as_text_and_never_runs(
    signed_in_page: Any, live_url: str, screenshot: Any
) -> None:
    cluster_create(cluster_id="xss-1", config={"agents": AGENTS})
    message_publish(
        cluster_id="xss-1",
        draft=MessageDraft(topic="ISSUE_OPENED", sender=XSS, content={"text": XSS, "data": XSS}),
    )
    page = signed_in_page
    page.goto("/clusters/xss-1/")
    expect(page.locator("[data-live-status]")).to_have_attribute("data-state", "open")

    publish_over_http(
        live_url, "xss-1", {"topic": "PLAN_READY", "sender": XSS, "content": {"text": XSS}}
    )

    rows = page.locator("#timeline-rows li.msg", has=page.locator(".chip", has_text="<script>"))
    expect(rows).to_have_count(2)
    for i in range(2):
        expect(rows.nth(i).locator(".msg-line")).to_have_text(XSS)
        expect(rows.nth(i).locator(".chip")).to_have_text(XSS)
    rows.nth(1).locator("summary").click()
    expect(rows.nth(1).locator("pre.text")).to_have_text(XSS)
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("#timeline img").count() == 0
    screenshot(page, "dashboard-xss-escaped")


def test_a_burst_of_messages_reaches_open_pages_whole_in_order_and_escaped(
    signed_in_page: Any, live_url: str, screenshot: Any
) -> None:
    """Pushes that arrive close together reach a page in few frames, several messages each:
    every row shows once, newest first, the count ends at the last message, agent text stays
    text, and a page filtered by sender grows by its sender's rows only."""
    cluster_create(cluster_id="burst-1", config={"agents": AGENTS})
    page = signed_in_page
    filtered = page.context.new_page()
    frames: list[str | bytes] = []

    def note_frames(socket: Any) -> None:
        socket.on("framereceived", lambda payload: frames.append(payload))

    page.on("websocket", note_frames)
    page.goto("/clusters/burst-1/")
    filtered.goto("/clusters/burst-1/?sender=w1")
    for shown in (page, filtered):
        expect(shown.locator("[data-live-status]")).to_have_attribute("data-state", "open")

    def publish_many(n: int) -> None:
        for i in range(6):
            body = {
                "topic": "AGENT_OUTPUT",
                "sender": f"w{n}",
                "content": {"text": f"{n}-{i} {XSS}"},
            }
            publish_over_http(live_url, "burst-1", body)

    threads = [threading.Thread(target=publish_many, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    expect(page.locator("#cluster-count")).to_have_text("24 messages")
    rows = page.locator("#timeline-rows li.msg")
    expect(rows).to_have_count(24)
    sequences = [int(s) for s in rows.evaluate_all("rs => rs.map(r => r.dataset.sequence)")]
    assert sequences == list(range(24, 0, -1))
    texts = page.locator("#timeline-rows .msg-line").all_inner_texts()
    assert sorted(texts) == sorted(f"{n}-{i} {XSS}" for n in range(4) for i in range(6))
    expect(filtered.locator("#cluster-count")).to_have_text("24 messages")
    expect(filtered.locator("#timeline-rows li.msg")).to_have_count(6)
    only = filtered.locator("#timeline-rows .msg-line").all_inner_texts()
    assert sorted(only) == sorted(f"1-{i} {XSS}" for i in range(6))
    assert len(frames) <= 24
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("#timeline img").count() == 0
    screenshot(page, "dashboard-burst-rows", full_page=False)
    assert page.console_errors == []
    filtered.close()
