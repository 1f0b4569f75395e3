"""The live timeline misses no row: clusters started from the dashboard, watched to the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from context.services.templates import templates_load_builtin
from ledger.interfaces import api_key_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
DEMO_SCRIPT = REPO / "dashboard" / "demo" / "agents.json"
# The demo's agents take 2-4 s each, paced for a person watching; here a quarter of that. The
# rows still arrive one by one while the page is open, only closer together, and a run still
# lasts seconds after its page has subscribed.
PACE = 0.25


def demo_script_paced(path: Path) -> Path:
    """The demo's script with every agent's delay times ``PACE``, written to ``path``."""

    def paced(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: v * PACE if k == "delay" else paced(v) for k, v in value.items()}
        if isinstance(value, list):
            return [paced(item) for item in value]
        return value

    script = json.loads(DEMO_SCRIPT.read_text(encoding="utf-8"))
    path.write_text(json.dumps(paced(script)), encoding="utf-8")
    return path


@pytest.fixture
def demo_runner(live_url: str, tmp_path: Path) -> Iterator[str]:
    """The demo's scripted runner working for the live server; yields its API key."""
    templates_load_builtin()
    _, key = api_key_create(name="demo runner")
    script = demo_script_paced(tmp_path / "agents.json")
    with (tmp_path / "runner.log").open("wb") as log:
        runner = subprocess.Popen(
            [sys.executable, "-m", "zeroshot_runner", "--url", live_url, "--provider",
             "scripted", "--script", str(script), "--concurrency", "4", "--wait", "2"],
            env={**os.environ, "ZEROSHOT_WEB_KEY": key},
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield key
    finally:
        runner.terminate()
        runner.wait(timeout=30)


def _api_count(live_url: str, key: str, cluster_id: str) -> int:
    request = urllib.request.Request(
        f"{live_url}/api/v1/clusters/{cluster_id}", headers={"Authorization": f"Bearer {key}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(json.load(response)["message_count"])


def test_five_runs_started_from_the_dashboard_show_every_message(
    signed_in_page: Any, live_url: str, demo_runner: str, screenshot: Any
) -> None:
    page = signed_in_page
    for run in range(5):
        # given the clusters page, when the operator starts worker-validator with an issue
        page.goto("/")
        launch = page.locator("details.launch")
        if launch.get_attribute("open") is None:
            launch.locator("summary").click()
        page.select_option("#launch-form select[name=template]", "worker-validator")
        page.fill("#launch-form input[name=title]", f"Login button {run}")
        page.fill("#launch-form textarea[name=text]", "Add a login button to the header.")
        page.click("#launch-form button[type=submit]")
        cluster_id = page.url.rstrip("/").split("/")[-1]
        # then the page follows the run to its end without a reload
        expect(page.locator("#run-controls .state")).to_have_text("completed", timeout=60_000)
        expect(page.locator("#timeline-rows")).to_contain_text("CLUSTER_COMPLETE")
        # and every message the API counts is a row, and the header says as many
        count = _api_count(live_url, demo_runner, cluster_id)
        assert count < 100  # one page of the timeline holds them all
        rows = page.locator("#timeline-rows li.msg")
        expect(rows).to_have_count(count, timeout=10_000)
        expect(page.locator("#cluster-count")).to_have_text(f"{count} messages")
        sequences = [int(s) for s in rows.evaluate_all("rs => rs.map(r => r.dataset.sequence)")]
        assert sorted(sequences, reverse=True) == list(range(count, 0, -1))
    screenshot(page, "live-run-every-row")
    assert page.console_errors == []
