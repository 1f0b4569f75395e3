"""``make run`` with a user's cluster beside it (issue 19): the demo runner, started as the
Makefile starts it, serves only the demo's pool; the README's recipe is left to the user's own
runner."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from context.services.templates import templates_load_builtin
from ledger.interfaces import cluster_get
from ledger.keys import api_key_create
from runs.models import Runner, Task
from tests.live_server import REPO, LiveServer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path) as live:
        yield live


def makefile_demo_runner() -> list[str]:
    """The runner options of ``make run``'s demo runner, read from the Makefile."""
    makefile = (REPO / "Makefile").read_text()
    found = re.search(r"manage\.py run_agents (.*?)\) &", makefile, re.DOTALL)
    assert found is not None, "the Makefile starts no demo runner"
    options = shlex.split(found.group(1).replace("\\\n", " "))
    url = options.index("--url")
    return options[:url] + options[url + 2 :]  # the Makefile's $(HOST):$(PORT)


def wait_for(condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def test_the_demo_runner_leaves_a_readme_recipe_cluster_alone(server: LiveServer) -> None:
    # given make run's server and its demo runner, started with the Makefile's options
    templates_load_builtin()
    _, key = api_key_create(name="operator")
    options = makefile_demo_runner()
    assert options[options.index("--label") :][:2] == ["--label", "pool=demo"]
    log = (server.data_dir / "demo-runner.log").open("wb")
    runner = subprocess.Popen(
        [sys.executable, "manage.py", "run_agents", "--url", server.url, *options],
        env={**server.env, "ZEROSHOT_WEB_KEY": key, "DJANGO_DEBUG": "1"},
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"})
    try:
        # when a user follows the README: a cluster from a template, started with an issue
        created = api.post("/api/v1/clusters", json={"id": "login", "template": "worker-validator"})
        assert created.status_code == 201, created.text
        assert created.json()["labels"] == {}
        started = api.post(
            "/api/v1/clusters/login/start", json={"issue": {"text": "Add a login button"}}
        )
        assert started.status_code == 200, started.text
        # and a cluster of the demo's pool is started beside it
        demo = api.post(
            "/api/v1/clusters",
            json={"id": "demo-run", "template": "worker-validator", "labels": {"pool": "demo"}},
        )
        assert demo.status_code == 201, demo.text
        api.post("/api/v1/clusters/demo-run/start", json={"issue": {"text": "Add a button"}})

        # then the demo runner completes the demo's cluster
        wait_for(lambda: cluster_get(cluster_id="demo-run").state == "completed", timeout=90)
        # while the user's cluster still waits for its own runner: its task never claimed
        time.sleep(1)
        user_tasks = list(Task.objects.filter(cluster_id="login").values("state", "attempts"))
        assert user_tasks == [{"state": "queued", "attempts": 0}]
        assert cluster_get(cluster_id="login").state == "running"
        # and the server saw the demo runner, serving the demo's pool
        runners = api.get("/api/v1/runners").json()
        assert [r["labels"] for r in runners] == [{"pool": "demo"}]
        assert runners[0]["completed"] == Runner.objects.get().completed >= 4
    finally:
        api.close()
        runner.terminate()
        try:
            runner.wait(timeout=20)
        except subprocess.TimeoutExpired:
            runner.kill()
            runner.wait()
        log.close()
