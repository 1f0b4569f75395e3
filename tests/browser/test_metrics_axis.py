"""The metrics page's time axis in a real browser: labels never overlap, none goes missing."""

from __future__ import annotations

import itertools
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from dashboard.charts import X_TICK_TIERS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

METRICS = "/clusters/steady-lantern-12/metrics/"
# (viewport width, the tier whose plot width it promises)
WIDTHS = [(390, "narrow"), (760, "narrow"), (761, "wide"), (1440, "wide")]


@pytest.mark.parametrize(("width", "tier"), WIDTHS)
def test_time_labels_fit_at_every_width(
    signed_in_page: Any, screenshot: Any, width: int, tier: str
) -> None:
    call_command("demo", stdout=StringIO())
    page = signed_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(METRICS)
    plots = page.locator("svg.chart-tokens")
    assert plots.count() >= 1
    for i in range(plots.count()):
        plot = plots.nth(i)
        # the tier's promise about the plot's width holds at this viewport
        assert plot.bounding_box()["width"] >= dict(X_TICK_TIERS)[tier]
        boxes = plot.locator("text.axis").evaluate_all(
            "ts => ts.filter(t => getComputedStyle(t).display !== 'none')"
            ".map(t => { const b = t.getBoundingClientRect(); return [b.left, b.right]; })"
        )
        boxes.sort()
        assert boxes, "no time label"
        for (_, right), (left, _) in itertools.pairwise(boxes):
            assert right <= left, f"labels overlap at {width}px: {boxes}"
        columns = plot.locator("g.col").count()
        if tier == "wide" and columns <= 7:
            assert len(boxes) == columns, "a column has no time label"
    screenshot(page, f"metrics-axis-{width}", full_page=False)
    assert page.console_errors == []
