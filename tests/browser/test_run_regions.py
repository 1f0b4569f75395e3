"""Regions of the run pages in a real browser: the live tasks table, regions opened directly."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from context.services.templates import templates_load_builtin
from ledger.interfaces import MessageDraft, cluster_create, message_publish
from ledger.models import Cluster
from runs.services import task_claim, task_complete

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WORKER = {
    "id": "worker",
    "role": "implementation",
    "prompt": "Work.",
    "triggers": [{"topic": "GO"}],
    "contextStrategy": {"sources": [{"topic": "GO"}]},
}


def test_the_tasks_tab_follows_a_task_from_claimed_to_completed(
    signed_in_page: Any, screenshot: Any
) -> None:
    # given a running cluster whose worker holds a task
    cid = cluster_create(cluster_id="tasks-live", config={"agents": [WORKER]}, state="running").id
    message_publish(
        cluster_id=cid, draft=MessageDraft(topic="GO", sender="system", content={"text": "go"})
    )
    claimed = task_claim(worker="box-1")
    assert claimed is not None
    page = signed_in_page
    page.goto(f"/clusters/{cid}/tasks/")
    row = page.locator("table.tasks tbody tr").first
    expect(row.locator(".run-state")).to_have_text("claimed")
    expect(page.locator("#run-controls .state")).to_have_text("running")
    # when the task completes and the cluster with it
    task_complete(task_id=claimed.task.id, lease_id=claimed.task.lease_id, result={})
    Cluster.objects.filter(id=cid).update(state="completed")
    # then the open page shows both without a reload
    expect(row.locator(".run-state")).to_have_text("completed", timeout=10_000)
    expect(page.locator("#run-controls .state")).to_have_text("completed")
    expect(page.locator("#run-controls button")).to_have_count(0)
    screenshot(page, "tasks-live-completed")
    assert page.console_errors == []


def test_launch_and_the_agents_panel_opened_directly_are_pages(
    signed_in_page: Any, screenshot: Any
) -> None:
    templates_load_builtin()
    cluster_create(cluster_id="other", config={"agents": [WORKER]})
    cid = cluster_create(cluster_id="panel-direct", config={"agents": [WORKER]}).id
    page = signed_in_page
    # a reloaded /launch/ (where a form error leaves the address bar) shows the launch form
    response = page.goto("/launch/")
    assert response is not None
    assert response.status == 200
    assert page.url.endswith("/#launch-form")
    expect(page.locator("#launch-form")).to_be_visible()
    expect(page.locator("#launch-form select[name=template]")).to_be_visible()
    screenshot(page, "launch-get", full_page=False)
    # the agents panel's own address leads to its cluster's page, styled
    page.goto(f"/clusters/{cid}/agents-panel/")
    assert page.url.endswith(f"/clusters/{cid}/")
    expect(page.locator("#agents-panel")).to_be_visible()
    expect(page.locator("h1")).to_contain_text(cid)
    assert page.evaluate("document.styleSheets.length") >= 1
    screenshot(page, "agents-panel-direct", full_page=False)
    assert page.console_errors == []
