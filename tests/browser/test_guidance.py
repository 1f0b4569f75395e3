"""Guidance sent from the cluster page reaches the agent's next prompt (SPEC §7.8), in a real
browser: the box, the live timeline, the inspector, the claim; at 1440 px light and dark, 390."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from context.guidance import guidance_block
from ledger.interfaces import MessageDraft, MessageFilter, cluster_create, message_publish
from ledger.interfaces import message_query as messages
from runs.services import task_claim, task_complete
from tests.browser.conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS = "<img src=x onerror=window.__xss=1>"


def agent(agent_id: str, role: str) -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": role,
        "prompt": f"You are the {role}.",
        "triggers": [{"topic": "GO"}] if agent_id == "worker" else [{"topic": "REVIEW"}],
        "contextStrategy": {"sources": [{"topic": "GO", "amount": 1}], "maxTokens": 2000},
    }


def go(cluster_id: str, text: str) -> None:
    message_publish(
        cluster_id=cluster_id,
        draft=MessageDraft(topic="GO", sender="system", content={"text": text}),
    )


def test_guidance_sent_from_the_page_reaches_the_next_prompt(
    signed_in_page: Any, screenshot: Any
) -> None:
    # given a running cluster whose worker finished its first task
    config = {"agents": [agent("worker", "implementation"), agent("reviewer", "validator")]}
    cid = cluster_create(cluster_id="guided", config=config, state="running").id
    go(cid, "Add a login button")
    first = task_claim(worker="box-1")
    assert first is not None
    task_complete(task_id=first.task.id, lease_id=first.task.lease_id, result={"summary": "ok"})
    page = signed_in_page
    page.goto(f"/clusters/{cid}/")
    box = page.locator("#guidance-form")
    expect(box).to_be_visible()
    expect(page.locator("#timeline .live-text")).to_have_text("live")

    # a refusal is said in the box, the text kept
    box.locator("textarea").fill("   ")
    box.get_by_role("button", name="Send").click()
    expect(page.locator("#guidance-form [role=alert]")).to_have_text("the guidance needs a text")
    expect(page.locator("#guidance-text")).to_be_focused()  # to fix it, or to write the next
    page.locator("#guidance-form").screenshot(
        path=str(ARTIFACTS / "guidance-refused.png"), caret="initial"
    )

    # when the operator sends guidance to the worker
    box = page.locator("#guidance-form")
    box.get_by_label("To").select_option("worker")
    box.get_by_label("Guidance").fill(f"Use the existing form component {XSS}")
    box.get_by_role("button", name="Send").click()

    # then the box says so and the timeline shows it live, escaped
    expect(page.locator("#guidance-form [role=status]")).to_contain_text("Sent to worker as #")
    expect(page.locator("#guidance-form [role=alert]")).to_have_count(0)
    row = page.locator("#timeline-rows li.msg", has_text="USER_GUIDANCE_AGENT")
    expect(row).to_have_count(1, timeout=10_000)
    expect(row.locator(".msg-line")).to_have_text(f"Use the existing form component {XSS}")
    assert page.evaluate("window.__xss") is None

    # the inspector explains the pack the next prompt will carry
    page.goto(f"/clusters/{cid}/agents/worker/")
    reason = page.locator("td.reason", has_text="full — required: guidance queued for this agent")
    expect(reason).to_be_visible()
    screenshot(page, "guidance-inspector")
    page.goto(f"/clusters/{cid}/")

    # and the worker's next prompt carries it, once
    go(cid, "Now the logout button")
    second = task_claim(worker="box-1")
    assert second is not None
    (note,) = messages(cluster_id=cid, where=MessageFilter(topic="USER_GUIDANCE_AGENT"))
    assert (note.receiver, note.sender) == ("worker", "user")
    assert guidance_block([note]) in second.prompt
    packs = [p["id"] for p in second.metrics["packs"] if p["status"] == "included"]
    assert "queuedGuidance" in packs
    task_complete(task_id=second.task.id, lease_id=second.task.lease_id, result={"summary": "ok"})
    go(cid, "And the footer")
    third = task_claim(worker="box-1")
    assert third is not None
    assert "## Guidance (Queued)" not in third.prompt

    # the page at 1440 px, light and dark, and at 390 px
    page.reload()
    box = page.locator("#guidance-form")
    box.get_by_label("To").select_option("")
    box.get_by_label("Guidance").fill("Keep the public API unchanged.")
    box.get_by_role("button", name="Send").click()
    expect(page.locator("#guidance-form [role=status]")).to_contain_text("every agent")
    page.set_viewport_size({"width": 1440, "height": 900})
    screenshot(page, "guidance")
    page.emulate_media(color_scheme="dark")
    screenshot(page, "guidance-dark")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#guidance-form").scroll_into_view_if_needed()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(page, "guidance-390", full_page=False)
    assert page.console_errors == []
