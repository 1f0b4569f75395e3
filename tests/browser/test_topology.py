"""The topology panel with four agents in a real browser: nothing cut at the panel's edge."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.interfaces import cluster_create
from tests.dashboard.test_topology_layout import fan_out

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1440, 390])
def test_four_agents_fit_their_panel(signed_in_page: Any, screenshot: Any, width: int) -> None:
    cluster_create(cluster_id="four", config={"agents": fan_out()})
    page = signed_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/clusters/four/")
    panel = page.locator("#topology-panel")
    panel.scroll_into_view_if_needed()
    box = panel.bounding_box()
    assert box is not None
    texts = panel.locator("svg.topology text").evaluate_all(
        "ts => ts.map(t => { const b = t.getBoundingClientRect(); return [b.left, b.right]; })"
    )
    # the four agents, zeroshot's completion-detector (the config has no completion handler:
    # orchestrator.js _injectCompletionAgent) and the outside; one label per topic
    assert len(texts) == 6 + 4
    for left, right in texts:
        assert box["x"] <= left, (left, box)
        assert right <= box["x"] + box["width"], (right, box)
    panel.screenshot(path=f"test-artifacts/topology-four-{width}.png")
    assert page.console_errors == []
