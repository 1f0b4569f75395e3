"""The fleet page and the task page in a real browser: live, reachable, and fitting at each size.

Each saves its screenshots at 1440 (light and dark) and 390 wide into ``test-artifacts/``
(``fleet*.png``, ``task*.png``; the ones in ``docs/screenshots/`` are copies of them).
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from ledger.interfaces import MessageDraft, cluster_create, message_publish
from runs.models import Task
from runs.services import task_claim, task_complete, task_fail, task_output

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDE = {"width": 1440, "height": 900}
NARROW = {"width": 390, "height": 844}


def agent(agent_id: str, topic: str, hook: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "id": agent_id,
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": topic}],
        "contextStrategy": {"sources": [{"topic": topic}]},
    }
    if hook:
        config["hooks"] = {
            "onComplete": {
                "action": "publish_message",
                "config": {"topic": hook, "content": {"text": "{{result.summary}}"}},
            }
        }
    return config


def publish(cluster_id: str, topic: str, text: str = "go") -> None:
    message_publish(
        cluster_id=cluster_id,
        draft=MessageDraft(topic=topic, sender="system", content={"text": text}),
    )


def done(worker: str, usage: dict[str, Any], **claim: Any) -> str:
    claimed = task_claim(worker=worker, **claim)
    assert claimed is not None
    task = claimed.task
    task_output(task_id=task.id, lease_id=task.lease_id, lines=["reading", "writing the fix"])
    task_complete(
        task_id=task.id, lease_id=task.lease_id, result={"summary": "Fixed."}, usage=usage
    )
    return task.id


def fits(page: Any) -> bool:
    """Nothing sticks out sideways: the page scrolls only down."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def shoot(page: Any, screenshot: Any, name: str) -> None:
    """The page at 1440 light, 1440 dark and 390, each checked for sideways overflow."""
    page.set_viewport_size(WIDE)
    page.emulate_media(color_scheme="light")
    assert fits(page)
    screenshot(page, name)
    page.emulate_media(color_scheme="dark")
    screenshot(page, f"{name}-dark")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size(NARROW)
    assert fits(page)
    screenshot(page, f"{name}-390")
    page.set_viewport_size(WIDE)


def test_the_fleet_page_shows_the_fleet_and_follows_it(
    signed_in_page: Any, screenshot: Any
) -> None:
    # given three running clusters in two pools: work done with usage, a task running, a queue
    demo = cluster_create(
        cluster_id="steady-lantern-12",
        config={
            "agents": [
                agent("worker", "GO", "IMPLEMENTATION_READY"),
                agent("validator", "IMPLEMENTATION_READY"),
            ]
        },
        state="running",
        labels={"pool": "demo"},
    ).id
    gpu = cluster_create(
        cluster_id="quiet-harbor-21",
        config={
            "agents": [
                agent("planner", "GO"),
                agent("worker", "PLAN_READY"),
                agent("reviewer", "REVIEW"),
            ]
        },
        state="running",
        labels={"pool": "gpu", "team": "search"},
    ).id
    cluster_create(
        cluster_id="bold-ridge-3", config={"agents": [agent("worker", "GO")]}, state="running"
    )
    publish(demo, "GO")
    done(
        "runner-a:4101",
        {
            "inputTokens": 18_400,
            "outputTokens": 2_150,
            "model": "claude-sonnet-4",
            "costUsd": 0.0874,
        },
        cluster_id=demo,
        labels=[("pool", "demo")],
        providers=["claude"],
    )
    done(
        "runner-a:4101",
        {"inputTokens": 9_200, "outputTokens": 610, "model": "claude-haiku-4", "costUsd": 0.0121},
        cluster_id=demo,
        labels=[("pool", "demo")],
        providers=["claude"],
    )
    publish(gpu, "GO")
    publish(gpu, "REVIEW")
    running = task_claim(
        worker="gpu-box-7:311", cluster_id=gpu, agents=["planner"], labels=[("pool", "gpu")]
    )
    assert running is not None
    page = signed_in_page
    page.set_viewport_size(WIDE)
    # when the operator opens the fleet page from the nav
    page.goto("/")
    page.get_by_role("link", name="Fleet").click()
    expect(page.locator("h1")).to_have_text("Fleet")
    # then the clusters, queue, runners and usage are there
    clusters = page.locator("table.fleet-clusters tbody tr")
    expect(clusters).to_have_count(3)
    gpu_row = page.locator("table.fleet-clusters tr", has_text="quiet-harbor-21")
    expect(gpu_row.locator(".run-running")).to_contain_text("planner")
    expect(gpu_row.locator(".run-queued")).to_contain_text("reviewer")
    expect(page.locator("#fleet-runners ~ .table-wrap")).to_contain_text("runner-a:4101")
    expect(page.locator("#fleet-usage ~ .table-wrap")).to_contain_text("claude-sonnet-4")
    # and it follows the fleet: a new runner claims, the page shows it without a reload
    publish("bold-ridge-3", "GO")
    task_claim(worker="late-runner:99", cluster_id="bold-ridge-3")
    expect(page.locator("#fleet-runners ~ .table-wrap")).to_contain_text(
        "late-runner:99", timeout=12_000
    )
    # a running agent leads to its task
    gpu_row.get_by_role("link", name="planner").click()
    expect(page.locator("h1")).to_contain_text("planner")
    page.go_back()
    expect(page.locator("h1")).to_have_text("Fleet")
    shoot(page, screenshot, "fleet")
    assert page.console_errors == []


def test_the_task_page_draws_a_task_and_is_reachable(
    signed_in_page: Any, screenshot: Any, settings: Any
) -> None:
    # given a task that failed once, was claimed again, streamed output and completed with a hook
    settings.RUNS_RETRY_BASE_SECONDS = 0
    cid = cluster_create(
        cluster_id="calm-meadow-8",
        config={"agents": [agent("worker", "GO", "IMPLEMENTATION_READY")]},
        state="running",
        labels={"pool": "demo"},
    ).id
    publish(cid, "GO", "Add a login button to the header")
    first = task_claim(worker="runner-a:4101", lease_seconds=120)
    assert first is not None
    task_fail(
        task_id=first.task.id, lease_id=first.task.lease_id, error="the model timed out after 600 s"
    )
    second = task_claim(worker="runner-b:4102", lease_seconds=300)
    assert second is not None
    lease = second.task.lease_id
    task_output(
        task_id=first.task.id,
        lease_id=lease,
        lines=["$ git status", "On branch main", "nothing to commit"],
    )
    task_output(
        task_id=first.task.id,
        lease_id=lease,
        lines=["Editing templates/base.html", "Tests: 12 passed"],
        offset=3,
    )
    task_complete(
        task_id=first.task.id,
        lease_id=lease,
        result={"summary": "Added the button; 12 tests pass."},
        usage={
            "inputTokens": 18_400,
            "outputTokens": 2_150,
            "model": "claude-sonnet-4",
            "costUsd": 0.0874,
        },
    )
    page = signed_in_page
    page.set_viewport_size(WIDE)
    # when the operator follows the Tasks tab's link to it
    page.goto(f"/clusters/{cid}/tasks/")
    page.locator("a.task-link").first.click()
    # then the waterfall shows every step, both attempts and the output
    expect(page.locator("h1")).to_contain_text("worker")
    steps = page.locator("ol.waterfall .step-label")
    expect(steps.first).to_have_text("Queued")
    expect(page.locator("ol.waterfall")).to_contain_text("Failed · retry scheduled")
    expect(page.locator("ol.waterfall")).to_contain_text("by runner-b:4102 · lease 300 s")
    expect(page.locator("ol.waterfall")).to_contain_text("Hook published")
    expect(page.locator("pre.task-output")).to_contain_text("Tests: 12 passed")
    shoot(page, screenshot, "task")
    # the recorded build is one click away
    page.locator("ol.waterfall a", has_text="build").last.click()
    expect(page).to_have_url(
        f"{page.url.split('/clusters/')[0]}/clusters/{cid}/builds/{Task.objects.get(pk=first.task.id).build_id}/"
    )
    # and the timeline's rows of the task lead to it
    page.goto(f"/clusters/{cid}/")
    row = page.locator("li.msg", has_text="TASK_COMPLETED").first
    row.locator("summary").click()
    row.get_by_role("link", name="Its task, step by step").click()
    expect(page.locator("ol.waterfall")).to_be_visible()
    assert page.console_errors == []
