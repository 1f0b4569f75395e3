"""The context inspector in a real browser: what-if in place, compare two builds, no XSS."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from context.services import context_build
from ledger.interfaces import MessageDraft, cluster_create, message_publish

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS = "<script>window.__xss=1</script><img src=x onerror=window.__xss=2>"
DEMO = "/clusters/amber-comet-7/agents/worker/"


@pytest.fixture
def demo(transactional_db: None) -> None:
    call_command("demo", stdout=StringIO())


def test_what_if_rebuilds_in_place(signed_in_page: Any, demo: None, screenshot: Any) -> None:
    page = signed_in_page
    page.goto(DEMO)
    page.wait_for_selector("svg.bb-bar g.seg")
    assert page.locator("#inspector-region .seg.over").count() == 0
    page.evaluate("window.__inspectorMarker = 'kept'")

    page.fill("#max-tokens", "1")
    page.wait_for_url("**max_tokens=1**")
    page.wait_for_selector("#inspector-region .seg.over")

    assert page.evaluate("window.__inspectorMarker") == "kept"  # no full reload
    row = page.locator(
        "tr.decision", has=page.locator("code", has_text="source:IMPLEMENTATION_READY:2")
    )
    assert "skipped" in row.inner_text()
    assert "nothing was left after required packs" in row.inner_text()
    assert page.locator(".left-out").is_visible()
    assert "over budget" in page.locator(".bb-summary").inner_text()
    assert page.input_value("#max-tokens-range") == "1"  # the slider follows the number box
    page.locator("#inspector-region .seg").first.focus()
    assert "header" in page.locator("[data-caption]").inner_text()
    assert page.console_errors == []
    screenshot(page, "inspector-what-if")


def test_compare_two_recorded_builds(signed_in_page: Any, demo: None, screenshot: Any) -> None:
    context_build(cluster_id="amber-comet-7", agent_id="worker", max_tokens=1)
    message_publish(
        cluster_id="amber-comet-7",
        draft=MessageDraft(
            topic="IMPLEMENTATION_READY", sender="worker", content={"text": "One more step done."}
        ),
    )
    context_build(cluster_id="amber-comet-7", agent_id="worker")
    page = signed_in_page
    page.goto(DEMO)

    page.click("text=Compare A → B")
    page.wait_for_url("**/diff/**")
    assert "a=" in page.url
    assert "b=" in page.url

    added = page.locator(
        "tr.change-added", has=page.locator("code", has_text="IMPLEMENTATION_READY")
    )
    assert added.count() == 1
    assert page.locator(".dl-add", has_text="One more step done.").count() == 1
    assert page.locator("svg.bb-bar").count() == 2
    assert page.console_errors == []
    screenshot(page, "inspector-diff")


def test_agent_text_never_runs(signed_in_page: Any, screenshot: Any) -> None:
    cluster_create(
        cluster_id="xss-cluster",
        config={
            "agents": [
                {
                    "id": "worker",
                    "role": "implementation",
                    "prompt": XSS,
                    "triggers": [{"topic": "ISSUE_OPENED"}],
                    "contextStrategy": {
                        "sources": [{"topic": "ISSUE_OPENED", "priority": "required"}]
                    },
                }
            ]
        },
    )
    for topic in ("ISSUE_OPENED", "ISSUE_OPENED"):
        message_publish(
            cluster_id="xss-cluster",
            draft=MessageDraft(topic=topic, sender="system", content={"text": XSS}),
        )
    page = signed_in_page

    page.goto("/clusters/xss-cluster/agents/worker/")
    for block in page.locator("details.pack-block summary").all():
        block.click()

    assert page.evaluate("window.__xss") is None
    assert page.locator("pre.prompt", has_text="<script>window.__xss=1</script>").count() >= 1
    screenshot(page, "inspector-xss")

    # The same text in two recorded builds: their diff and the metrics page stay inert too.
    first = context_build(cluster_id="xss-cluster", agent_id="worker")
    message_publish(
        cluster_id="xss-cluster",
        draft=MessageDraft(topic="ISSUE_OPENED", sender=XSS, content={"text": XSS + " again"}),
    )
    second = context_build(cluster_id="xss-cluster", agent_id="worker")
    page.goto(f"/clusters/xss-cluster/agents/worker/diff/?a={first.build_id}&b={second.build_id}")
    assert page.locator(".dl-add", has_text="<script>window.__xss=1</script>").count() >= 1
    assert page.evaluate("window.__xss") is None
    screenshot(page, "xss-diff")
    for path in ("/clusters/xss-cluster/metrics/", "/clusters/xss-cluster/", "/"):
        page.goto(path)
        assert page.evaluate("window.__xss") is None, path
