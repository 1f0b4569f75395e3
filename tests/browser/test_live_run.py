"""A cluster run watched live: started from the dashboard, worked by the demo's runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from context.services.templates import templates_load_builtin
from ledger.interfaces import api_key_create, cluster_get
from runs.models import Task

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]
DEMO_SCRIPT = REPO / "dashboard" / "demo" / "agents.json"


def test_start_the_demo_template_and_watch_it_run_to_completion(
    signed_in_page: Any, live_url: str, screenshot: Any, tmp_path: Path
) -> None:
    # given the built-in templates and the demo's scripted runner working for the server
    templates_load_builtin()
    _, key = api_key_create(name="demo runner")
    log = (tmp_path / "runner.log").open("wb")
    runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zeroshot_runner",
            "--url",
            live_url,
            "--provider",
            "scripted",
            # as `make run` starts it: the demo's pool only, which the start form's default is
            "--label",
            "pool=demo",
            "--script",
            str(DEMO_SCRIPT),
            "--concurrency",
            "4",
            "--wait",
            "2",
        ],
        env={**os.environ, "ZEROSHOT_WEB_KEY": key},
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    page = signed_in_page
    try:
        # when the operator starts worker-validator from the clusters page with an issue
        page.goto("/")
        launch = page.locator("details.launch")
        if launch.get_attribute("open") is None:  # open by itself while there is no cluster
            launch.locator("summary").click()
        page.select_option("#launch-form select[name=template]", "worker-validator")
        page.fill("#launch-form input[name=title]", "Login button")
        page.fill("#launch-form textarea[name=text]", "Add a login button to the header.")
        page.click("#launch-form button[type=submit]")
        expect(page.locator("#run-controls .state")).to_have_text("running")
        cluster_id = page.url.rstrip("/").split("/")[-1]

        # then, without a reload, the agents change state as the runner works
        worker = page.locator("#agents-panel li.agent", has_text="worker")
        expect(worker.locator(".run-state")).to_have_text("running", timeout=20_000)
        screenshot(page, "live-run-working")
        validator = page.locator("#agents-panel li.agent", has_text="validator")
        expect(validator.locator(".run-state")).to_have_text("running", timeout=30_000)
        # and the cluster completes: the validator rejected once and approved the second time
        expect(page.locator("#run-controls .state")).to_have_text("completed", timeout=60_000)
        expect(page.locator("#timeline-rows")).to_contain_text("CLUSTER_COMPLETE")
        expect(page.locator("#snapshot-panel")).to_contain_text("Validation: approved")
        screenshot(page, "live-run-completed")
        # the tasks tab lists the four tasks, each with its build and what the model billed
        page.get_by_role("link", name="Tasks").click()
        expect(page.locator("table.tasks tbody tr")).to_have_count(4)
        screenshot(page, "live-run-tasks")
        page.locator("table.tasks tbody tr").first.get_by_role("link", name="build").click()
        expect(page.locator(".reality")).to_contain_text("Billed input")
        expect(page.locator(".reality")).to_contain_text("4,900")
        screenshot(page, "live-run-build")
    finally:
        runner.terminate()
        runner.wait(timeout=30)
    assert cluster_get(cluster_id=cluster_id).state == "completed"
    ran = list(
        Task.objects.filter(cluster_id=cluster_id)
        .order_by("created_at")
        .values_list("agent_id", "iteration", "state")
    )
    assert ran == [
        ("worker", 1, "completed"),
        ("validator", 1, "completed"),
        ("worker", 2, "completed"),
        ("validator", 2, "completed"),
    ]
    assert page.console_errors == []
