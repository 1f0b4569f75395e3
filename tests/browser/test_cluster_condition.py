"""A cluster that can no longer move is never shown running (issue 20 item 3, SPEC §7.3):
the list and the cluster page say ``stalled`` (amber) or ``failed``, each with its reason."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from playwright.sync_api import expect

from ledger.interfaces import (
    ImportedMessage,
    cluster_create,
    cluster_state_set,
    message_import_batch,
    now_ms,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WORKER = {
    "id": "worker",
    "role": "implementation",
    "prompt": "Work.",
    "triggers": [{"topic": "ISSUE_OPENED"}],
    "hooks": {"onComplete": {"action": "publish_message", "config": {"topic": "PATCH_READY"}}},
}


def history(cluster_id: str, minutes_ago: int, *topics: tuple[str, str, dict[str, Any]]) -> None:
    """Messages imported with past timestamps (imports never trigger, SPEC §7.1)."""
    start = now_ms() - minutes_ago * 60_000
    message_import_batch(
        cluster_id=cluster_id,
        messages=[
            ImportedMessage(
                id=f"msg_{secrets.token_hex(8)}",
                timestamp=start + n * 1000,
                topic=topic,
                sender=sender,
                receiver="broadcast",
                content=content,
                metadata=None,
            )
            for n, (topic, sender, content) in enumerate(topics)
        ],
    )


def clusters() -> None:
    """A stalled cluster (its worker's hook answered by nobody, two hours ago), a failed one and
    one running now."""
    issue = ("ISSUE_OPENED", "system", {"text": "Add a login button"})
    cluster_create(cluster_id="quiet-meadow-5", config={"agents": [WORKER]}, state="running")
    history("quiet-meadow-5", 120, issue, ("PATCH_READY", "worker", {"text": "Patched"}))
    cluster_create(cluster_id="broken-kiln-8", config={"agents": [WORKER]}, state="running")
    failed = {
        "text": "Critical agent worker exhausted its retry budget: provider down",
        "data": {"reason": "critical_agent_failed", "agentId": "worker"},
    }
    history("broken-kiln-8", 30, issue, ("CLUSTER_FAILED", "worker", failed))
    cluster_state_set(cluster_id="broken-kiln-8", state="failed")
    cluster_create(cluster_id="busy-harbor-2", config={"agents": [WORKER]}, state="running")
    history("busy-harbor-2", 0, issue)


@pytest.mark.parametrize(
    ("name", "scheme", "width"),
    [("", "light", 1440), ("-dark", "dark", 1440), ("-390", "light", 390)],
)
def test_stalled_and_failed_clusters_say_so_with_their_reason(
    signed_in_page: Any, screenshot: Any, name: str, scheme: str, width: int
) -> None:
    clusters()
    page = signed_in_page
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": width, "height": 900 if width > 400 else 844})
    # the list: stalled in amber with why, failed with its reason, the live one running
    page.goto("/")
    stalled = page.locator("tr", has=page.locator("a", has_text="quiet-meadow-5"))
    expect(stalled.locator(".state")).to_have_text("stalled")
    expect(stalled.locator(".state-reason")).to_contain_text("nothing queued, claimed")
    amber = stalled.locator(".state").evaluate(
        "e => getComputedStyle(e, '::before').backgroundColor"
    )
    assert amber == "rgb(230, 159, 0)"
    failed = page.locator("tr", has=page.locator("a", has_text="broken-kiln-8"))
    expect(failed.locator(".state")).to_have_text("failed")
    expect(failed.locator(".state-reason")).to_contain_text("critical_agent_failed")
    busy = page.locator("tr", has=page.locator("a", has_text="busy-harbor-2"))
    expect(busy.locator(".state")).to_have_text("running")
    expect(busy.locator(".state-reason")).to_have_count(0)
    no_overflow = page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert no_overflow
    screenshot(page, f"clusters-stalled{name}", full_page=False)
    # the cluster page: the header says stalled and why, and offers to stop it
    page.goto("/clusters/quiet-meadow-5/")
    header = page.locator("h1 .run-controls")
    expect(header.locator(".state")).to_have_text("stalled")
    expect(header.locator(".state-reason")).to_contain_text("nothing will wake one")
    expect(header.get_by_role("button", name="Stop")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(page, f"cluster-stalled{name}", full_page=False)
    assert page.console_errors == []
