"""The admin's template editor in a real browser: problems at their line, the preview, the CSP."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from playwright.sync_api import expect

from context.models import ClusterTemplate
from context.services.templates import template_get, templates_load_builtin
from ledger.interfaces import MessageDraft, cluster_create, message_publish

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_editor_marks_problems_at_their_line_and_previews_every_agent(
    signed_in_page: Any, operator: Any, screenshot: Any
) -> None:
    operator.is_superuser = True  # templates are edited by those allowed to change them
    operator.save()
    templates_load_builtin()
    body = copy.deepcopy(template_get(name="worker-validator").body)
    body["agents"][0]["contextStrategy"]["sources"][0]["strategy"] = "newest"
    # stored as it is, without the save's check: the editor must find the problem itself
    broken = ClusterTemplate.objects.create(name="broken", body=body)
    cluster_create(cluster_id="preview-run", config={})
    message_publish(
        cluster_id="preview-run",
        draft=MessageDraft(topic="ISSUE_OPENED", sender="system", content={"text": "Do it"}),
    )
    page = signed_in_page

    page.goto(f"/admin/context/clustertemplate/{broken.pk}/change/")
    expect(page.locator(".cm-editor")).to_be_visible()
    # once checked, F8 goes to the next problem: the line of the key it names
    page.wait_for_timeout(1500)
    page.locator(".cm-content").click()
    page.keyboard.press("Control+Home")
    page.keyboard.press("F8")
    marked = page.locator(".cm-line", has=page.locator(".cm-lintRange-error"))
    expect(marked).to_have_count(1, timeout=5000)
    expect(marked).to_contain_text('"strategy": "newest"')
    expect(page.locator(".cm-lint-marker-error")).to_have_count(1)
    screenshot(page, "admin-editor-problem-at-its-line", full_page=False)

    # fix it in the editor and preview before saving
    marked.locator(".cm-lintRange-error").dblclick()
    page.keyboard.type("latest")
    expect(page.locator(".cm-lintRange-error")).to_have_count(0, timeout=5000)
    page.select_option("[data-preview-cluster]", "preview-run")
    # From the keyboard: the editor's checks, answered while the pointer moves, redraw its
    # gutter, and the panel below may move away from under a click aimed a moment before.
    page.locator("[data-preview-run]").press("Enter")
    agents = page.locator(".preview-agent")
    # (the preview builds every agent's context on the server: on a machine that runs both
    # halves of the suite at once that has taken longer than the 5 s of a plain expect)
    expect(agents).to_have_count(2, timeout=20_000)
    expect(agents.first.locator("svg.bb-bar")).to_be_visible()
    expect(agents.first).to_contain_text("triggered by ISSUE_OPENED")
    screenshot(page, "admin-editor-preview")
    # a JSON syntax error is marked as it is typed, at its place
    page.locator(".cm-content").click()
    page.keyboard.press("Control+Home")
    page.keyboard.type("x")
    expect(page.locator(".cm-lint-marker-error")).to_have_count(1, timeout=5000)
    first_line = page.locator(".cm-line").first
    expect(first_line.locator(".cm-lintRange-error, .cm-lintPoint-error")).to_have_count(1)
    # the editor needs nothing the CSP refuses
    assert page.console_errors == []
    assert ClusterTemplate.objects.get(pk=broken.pk).body == body  # nothing saved
