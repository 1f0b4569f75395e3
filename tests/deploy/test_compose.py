"""The deployment to copy (issue 21 item 5): the image, its build context and compose's services,
checked from the files, then run as the processes their containers would be.

The run (PostgreSQL + Redis only, about 30 s): the image's build step and compose's migrate job,
three servers started with the image's CMD, a proxy over deploy/nginx.conf's upstreams, compose's
runner command twice (its replicas); a cluster runs to completion through the proxy while one
server is killed, and no task is lost or run twice.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from context.services.templates import cluster_create_from_template, templates_load_builtin
from ledger.interfaces import api_key_create, cluster_get, message_query
from runs.models import Task
from tests.conftest import subprocess_database_url
from tests.deploy.deployment import (
    REPO,
    Proxy,
    build_context,
    compose,
    dockerfile_cmd,
    dockerfile_env,
    dockerfile_values,
    executable,
    free_port,
    nginx_upstreams,
    server_argv,
    service_environment,
    start,
    stop,
    wait_listening,
)

SERVICE_PREFIX = "server-"


def servers(services: dict[str, dict[str, object]]) -> list[str]:
    return sorted(name for name in services if name.startswith(SERVICE_PREFIX))


def test_the_image_is_slim_unprivileged_collects_its_static_files_and_checks_its_health() -> None:
    (base,) = dockerfile_values("FROM")
    assert base.startswith("python:3."), base
    assert base.endswith("-slim"), base
    users = dockerfile_values("USER")
    assert users
    assert users[-1] not in {"root", "0"}
    runs = " ".join(dockerfile_values("RUN"))
    assert "collectstatic --noinput" in runs
    assert (
        f"useradd --system --uid 10001 --user-group --home-dir /data --no-create-home {users[-1]}"
        in runs
    )
    (healthcheck,) = dockerfile_values("HEALTHCHECK")
    assert "http://127.0.0.1:8000/healthz" in healthcheck
    assert dockerfile_values("EXPOSE") == ["8000"]
    cmd = dockerfile_cmd()
    assert cmd[0] == "uvicorn"
    assert cmd[-1] == "zeroshot_web.asgi:application"
    # the server the figures chose (docs/decisions/0190-uvicorn.md, 0211), as they measured it
    for flag, value in {
        "--host": "0.0.0.0",
        "--port": "8000",
        "--backlog": "1024",
        "--loop": "uvloop",
        "--http": "httptools",
        "--ws": "zeroshot_web.websocket_frames:SharedFrameProtocol",
        "--ws-per-message-deflate": "false",
        "--lifespan": "on",
    }.items():
        assert flag in cmd, flag
        assert cmd[cmd.index(flag) + 1] == value, flag
    assert "--no-access-log" in cmd
    env = dockerfile_env()
    assert env["DJANGO_SETTINGS_MODULE"] == "zeroshot_web.settings"
    # static files are collected out of the data volume, which would hide them
    assert not env["ZEROSHOT_STATIC_ROOT"].startswith(env["ZEROSHOT_DATA_DIR"])


def test_the_build_context_holds_the_code_and_nothing_else() -> None:
    files = build_context()
    names = {f.relative_to(REPO).as_posix() for f in files}
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    for package in pyproject["tool"]["importlinter"]["root_packages"]:
        assert f"{package}/__init__.py" in names, package
    for needed in ("manage.py", "pyproject.toml", "README.md", "dashboard/demo/agents.json"):
        assert needed in names
    assert any(n.startswith("static/") for n in names)
    assert any(n.startswith("templates/") for n in names)
    for left_out in (".venv/", "data/", "tests/", "bench/", ".git/"):
        assert not [n for n in names if n.startswith(left_out)], left_out
    assert not [n for n in names if "__pycache__" in n]
    size = sum(f.stat().st_size for f in files if f.is_file())
    assert size < 20 * 1024 * 1024, f"{size:,} bytes"
    # every COPY source is in the context
    for copy in dockerfile_values("COPY"):
        for source in copy.split()[:-1]:
            assert source == "." or source in names, source


def test_compose_serves_the_image_behind_one_proxy_with_postgres_redis_and_runners() -> None:
    services = compose()["services"]
    names = servers(services)
    assert len(names) >= 3
    assert {"postgres", "redis", "migrate", "proxy", "runner"} <= set(services)
    variables = {"DJANGO_SECRET_KEY": "k" * 50, "POSTGRES_PASSWORD": "pw"}
    for name in names:
        server = services[name]
        assert server["build"] == "."
        assert "command" not in server, "a server runs the image's CMD"
        env = service_environment(server, variables)
        assert env["DATABASE_URL"] == "postgres://zeroshot:pw@postgres:5432/zeroshot"
        assert env["REDIS_URL"].startswith("redis://redis:6379/")
        assert server["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert services["runner"]["image"] == services[names[0]]["image"]
    # the proxy: nginx's upstreams are the servers, on the port the image exposes
    listen, upstreams = nginx_upstreams()
    assert sorted(host for host, _ in upstreams) == names
    assert {port for _, port in upstreams} == {int(dockerfile_values("EXPOSE")[0])}
    assert any("deploy/nginx.conf" in volume for volume in services["proxy"]["volumes"])
    assert f"http://proxy:{listen}" in services["runner"]["command"]
    # a required variable left unset stops compose with its message
    with pytest.raises(KeyError, match="DJANGO_SECRET_KEY"):
        service_environment(services[names[0]], {"POSTGRES_PASSWORD": "pw"})


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for process in started:
            stop(process)


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_three_servers_and_two_runners_finish_a_cluster_while_a_server_is_killed(
    on_postgres: bool, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    if not on_postgres or not os.environ.get("REDIS_URL"):
        pytest.skip("PostgreSQL + Redis run only, as compose.yaml deploys it")
    services = compose()["services"]
    names = servers(services)
    # the environment of a container: nothing of this shell's own settings, the image's ENV
    # (its paths moved under tmp_path), compose's variables; this run's database and Redis
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "ZEROSHOT_", "API_", "LEDGER_", "PROMETHEUS_"))
        and k not in {"DATABASE_URL", "REDIS_URL"}
    }
    # the image's python (and uvicorn) first on the PATH, as in the image
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    image = {
        k: v.replace("/app/staticfiles", str(tmp_path / "static")).replace(
            "/data", str(tmp_path / "data")
        )
        for k, v in dockerfile_env().items()
    }
    variables = {"DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "POSTGRES_PASSWORD": "x"}
    env = {**base, **image, **service_environment(services[names[0]], variables)}
    env["DATABASE_URL"] = subprocess_database_url()
    env["REDIS_URL"] = os.environ["REDIS_URL"]

    # the image's build step (collectstatic) and compose's migrate job
    (collect,) = [
        part.strip()
        for run in dockerfile_values("RUN")
        for part in run.split("&&")
        if "collectstatic" in part
    ]
    subprocess.run(["sh", "-c", collect], env=env, cwd=REPO, check=True, timeout=120)
    assert (tmp_path / "static" / "staticfiles.json").exists() or any(
        (tmp_path / "static").iterdir()
    )
    migrate = services["migrate"]["command"]
    subprocess.run(
        [executable(migrate[0]), *migrate[1:]], env=env, cwd=REPO, check=True, timeout=120
    )

    # three servers with the image's CMD, and the proxy over nginx's upstreams
    ports = {name: free_port() for name in names}
    server_processes = {}
    for name in names:
        log = tmp_path / f"{name}.log"
        server_processes[name] = start(server_argv(ports[name]), env, log)
        processes.append(server_processes[name])
    for name in names:
        wait_listening(ports[name], server_processes[name], tmp_path / f"{name}.log")
    listen, upstreams = nginx_upstreams()
    proxy = Proxy([ports[host] for host, _ in upstreams])
    assert httpx.get(f"{proxy.url}/readyz", timeout=10).status_code == 200

    # compose's runner command, as many as its replicas, through the proxy
    _, key = api_key_create(name="runners")
    runner = services["runner"]
    replicas = runner["deploy"]["replicas"]
    assert replicas == 2
    runner_env = {**base, **image, **service_environment(runner, {"ZEROSHOT_RUNNER_KEY": key})}
    command = [a.replace(f"http://proxy:{listen}", proxy.url) for a in runner["command"]]
    for i in range(replicas):
        processes.append(
            start([executable(command[0]), *command[1:]], runner_env, tmp_path / f"runner{i}.log")
        )

    # a cluster of the demo's pool, started through the proxy
    templates_load_builtin()
    cluster_id = cluster_create_from_template(
        template_name="planner-worker-validators", params={}, labels={"pool": "demo"}
    ).id
    started = httpx.post(
        f"{proxy.url}/api/v1/clusters/{cluster_id}/start",
        json={"issue": {"title": "Deploy", "text": "Ship it with three servers"}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert started.status_code == 200, started.text

    # when an agent is at work, the first server is killed (no goodbye)
    deadline = time.monotonic() + 60
    while not Task.objects.filter(cluster_id=cluster_id, state="completed").exists():
        assert time.monotonic() < deadline, "no task completed"
        time.sleep(0.2)
    while not Task.objects.filter(cluster_id=cluster_id, state="claimed").exists():
        assert time.monotonic() < deadline, "no second task claimed"
        time.sleep(0.1)
    time.sleep(1.0)  # the scripted agent takes 3-4 s
    killed = names[0]
    served_before = dict(proxy.served)
    server_processes[killed].send_signal(signal.SIGKILL)
    server_processes[killed].wait()

    # then the cluster still runs to its end on the other servers
    while cluster_get(cluster_id=cluster_id).state not in {"completed", "failed", "stopped"}:
        assert time.monotonic() < deadline + 30, _logs(tmp_path)
        time.sleep(0.3)
    assert cluster_get(cluster_id=cluster_id).state == "completed", _logs(tmp_path)
    assert all(p.poll() is None for p in processes if p is not server_processes[killed])

    # every server took connections before the kill; after it, the others took them all
    assert all(served_before.get(ports[n], 0) > 0 for n in names), served_before
    assert proxy.served[ports[killed]] == served_before[ports[killed]]
    # runners keep their connections open, so whether one of theirs fell on the dead server's
    # turn is chance: as many fresh connections as there are servers reach it once for sure,
    # and each is answered by the next one (nginx's proxy_next_upstream)
    for _ in names:
        assert httpx.get(f"{proxy.url}/healthz", timeout=10).status_code == 200
    assert proxy.refused[ports[killed]] > 0
    assert sum(proxy.served.values()) > sum(served_before.values())

    # and no task was lost or run twice: one task per triggering message and agent, each
    # completed once, started once
    tasks = list(Task.objects.filter(cluster_id=cluster_id))
    assert len(tasks) >= 6  # planner, worker, validators, worker again, validators again
    assert {t.state for t in tasks} == {"completed"}
    per_trigger = Counter((t.agent_id, t.trigger_message_id) for t in tasks)
    assert set(per_trigger.values()) == {1}
    events = Counter(
        (m.content["data"]["event"], m.content["data"]["taskId"])
        for m in message_query(cluster_id=cluster_id, limit=None)
        if m.topic == "AGENT_LIFECYCLE" and m.content["data"].get("event", "").startswith("TASK_")
    )
    for task in tasks:
        assert events[("TASK_COMPLETED", task.id)] == 1, task.id
        assert events[("TASK_STARTED", task.id)] == 1, task.id
        assert task.attempts == 1, task.id
    proxy.close()


def _logs(tmp_path: Path) -> str:
    return "\n".join(
        f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}"
        for log in sorted(tmp_path.glob("*.log"))
    )
