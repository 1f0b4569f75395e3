"""zeroshot's conductor-bootstrap watched live (SPEC §7.7): the agents its CLUSTER_OPERATIONS
load appear on the open page, guidance sent from the page reaches the conductor's prompt
(SPEC §7.8), and the config versions can be browsed afterwards.

Takes about 15 s: the scripted agents take a few seconds each so that the page is seen working.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from context.models import ContextBuild
from context.services.templates import cluster_create_from_template, templates_load_builtin
from ledger.interfaces import api_key_create
from runs.services import cluster_start

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]

SCRIPT = {
    "junior-conductor": [
        {
            "delay": 2.5,
            "output": ["Reading the issue", "A small change with a known fix"],
            "result": {
                "complexity": "SIMPLE",
                "taskType": "TASK",
                "reasoning": "One flag and its test: a worker and a reviewer suffice.",
            },
        }
    ],
    "worker": [
        {
            "delay": 2,
            "result": {
                "summary": f"try {n}",
                "completionStatus": {"canValidate": True, "percentComplete": 100},
            },
        }
        for n in (1, 2)
    ],
    "validator": [
        {
            "delay": 1.5,
            "result": {"approved": False, "summary": "no test", "errors": ["Missing tests"]},
        },
        {"delay": 1.5, "result": {"approved": True, "summary": "good", "errors": []}},
    ],
}


def test_a_conductor_run_loads_its_agents_live_and_keeps_its_config_versions(
    signed_in_page: Any, live_url: str, screenshot: Any, tmp_path: Path
) -> None:
    # given zeroshot's conductor-bootstrap, started, and a scripted runner working for it
    templates_load_builtin()
    cluster_id = cluster_create_from_template(
        template_name="zeroshot/conductor-bootstrap", params={}
    ).id
    script = tmp_path / "agents.json"
    script.write_text(json.dumps(SCRIPT))
    _, key = api_key_create(name="runner", cluster_id=cluster_id)
    cluster_start(
        cluster_id=cluster_id, issue={"title": "Dry run", "text": "Add a --dry-run flag."}
    )
    page = signed_in_page
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"/clusters/{cluster_id}/")
    # the page shows the conductors (and zeroshot's completion-detector, which joins a config
    # without a completion handler) before anything ran
    agents = page.locator("#agents-panel li.agent .agent-name a")
    expect(agents).to_have_text(["junior-conductor", "senior-conductor", "completion-detector"])
    # and the operator sends the junior conductor guidance from the page before it runs
    box = page.locator("#guidance-form")
    box.get_by_label("To").select_option("junior-conductor")
    box.get_by_label("Guidance").fill("Prefer the smallest workflow that can validate this.")
    box.get_by_role("button", name="Send").click()
    expect(page.locator("#guidance-form [role=status]")).to_contain_text("junior-conductor")
    runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zeroshot_runner",
            "--url",
            live_url,
            "--cluster",
            cluster_id,
            "--provider",
            "scripted",
            "--script",
            str(script),
            "--wait",
            "2",
        ],
        env={**os.environ, "ZEROSHOT_WEB_KEY": key},
        cwd=REPO,
        stdout=(tmp_path / "runner.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        # then the page, never reloaded, shows the agents its CLUSTER_OPERATIONS loaded
        expect(agents).to_have_text(
            ["junior-conductor", "senior-conductor", "worker", "validator", "completion-detector"],
            timeout=20_000,
        )
        topology = page.locator("#topology-panel")
        expect(topology.locator("svg.topology")).to_contain_text("worker")
        expect(topology.locator(".config-versions li")).to_have_count(2)
        expect(page.locator("#run-controls .state")).to_have_text("completed", timeout=40_000)
        # the conductor's prompt carried the guidance, delivered by its completed task
        (build,) = ContextBuild.objects.filter(cluster_id=cluster_id, agent_id="junior-conductor")
        assert "Prefer the smallest workflow that can validate this." in json.dumps(
            build.pack_texts
        )
        assert build.guidance_delivered
        page.reload()
        screenshot(page, "conductor-run")
        page.emulate_media(color_scheme="dark")
        screenshot(page, "conductor-run-dark")
        page.emulate_media(color_scheme="light")
        page.set_viewport_size({"width": 390, "height": 844})
        screenshot(page, "conductor-run-390")
        page.set_viewport_size({"width": 1440, "height": 900})

        # when the operator picks the first config version
        topology.locator(".config-versions a", has_text="v1").click()

        # then the agents and topology are the conductors' alone, said to be as of v1
        expect(page.locator("#agents-title")).to_contain_text("as of config v1")
        expect(agents).to_have_text(["junior-conductor", "senior-conductor", "completion-detector"])
        expect(page.locator("#topology-panel .node title", has_text="validator")).to_have_count(0)
        screenshot(page, "conductor-run-v1")
        assert page.console_errors == []
    finally:
        runner.terminate()
        runner.wait(timeout=20)
