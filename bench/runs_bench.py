"""Orchestration benchmarks: trigger to claimable task, claim latency, tasks per second.

Usage: ``.venv/bin/python bench/runs_bench.py [--quick] [--postgres URL]`` (see bench/README.md).

1. **trigger → claimable**: a trigger published to a running cluster until its task can be
   claimed, with the pipeline in its worker thread as a server runs it (p50, p95).
2. **claim → prompt**: ``task_claim`` (the claim, the recorded build and ``TASK_STARTED``) on a
   cluster of 10,000 and of 1,000,000 messages, side by side (p50, p95).
3. **tasks per second**: 8 worker threads claiming and completing at once (no work) over HTTP
   against daphne, on SQLite, and on PostgreSQL when ``--postgres`` names a server (a database
   of its own is created there and dropped after).

Writes ``bench/results/runs.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ledger_bench as lb  # a sibling script: its fast filler and setup

RESULTS_PATH = lb.ROOT / "bench" / "results" / "runs.json"
WORKER = {
    "id": "worker",
    "role": "implementation",
    "prompt": "Do the work.",
    "triggers": [{"topic": "GO"}],
    # Every measured trigger is an iteration: more than the default limit of 100 (SPEC §7.3).
    "maxIterations": 100_000,
    "contextStrategy": {
        "sources": [
            {"topic": "ISSUE_OPENED", "priority": "required"},
            {"topic": "VALIDATION_RESULT", "since": "last_task_end", "amount": 3},
            {"topic": "IMPLEMENTATION_READY", "amount": 1},
        ]
    },
}


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": ordered[len(ordered) // 2] * 1000,
        "p95_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000,
        "samples": len(ordered),
    }


def trigger_to_claimable(reps: int) -> dict[str, float]:
    from django.test import override_settings

    from ledger.interfaces import MessageDraft, cluster_create, message_publish
    from ledger.pipeline import pipeline
    from runs.models import Task
    from runs.services.tasks import claimable

    cluster_create(cluster_id="latency", config={"agents": [WORKER]}, state="running")
    samples = []
    with override_settings(PIPELINE_MODE="thread"):
        pipeline.start()
        try:
            for _ in range(reps + 10):
                started = time.perf_counter()
                message = message_publish(
                    cluster_id="latency", draft=MessageDraft(topic="GO", sender="bench")
                )
                task = claimable(now=int(time.time() * 1000) + 60_000).filter(
                    trigger_message_id=message.id
                )
                while not task.exists():
                    time.sleep(0.0002)
                samples.append(time.perf_counter() - started)
                Task.objects.filter(trigger_message_id=message.id).update(state="cancelled")
        finally:
            pipeline.stop()
    return percentiles(samples[10:])


def claim_latency(big: int, reps: int) -> dict[str, Any]:
    from ledger.interfaces import ImportedMessage, message_import_batch
    from ledger.models import Cluster, Message
    from runs.models import Task
    from runs.services import task_claim

    sizes = {"small": 10_000, "big": big}
    for name, count in sizes.items():
        lb.fill_cluster(name, count, seed=3)
        Cluster.objects.filter(pk=name).update(config={"agents": [WORKER]}, state="running")
        base = 1_770_000_000_000 + count
        message_import_batch(
            cluster_id=name,
            messages=[
                ImportedMessage(f"{name}-go-{i}", base + i, "GO", "bench", "broadcast", {}, None)
                for i in range(reps + 10)
            ]
            + [
                ImportedMessage(
                    f"{name}-issue",
                    base + reps + 20,
                    "ISSUE_OPENED",
                    "system",
                    "broadcast",
                    {"text": "Add a login button"},
                    None,
                )
            ],
        )
    lb.analyze()
    samples: dict[str, list[float]] = {name: [] for name in sizes}
    now = int(time.time() * 1000)
    for i in range(reps + 10):
        for name in sizes:
            message = Message.objects.get(cluster_id=name, message_id=f"{name}-go-{i}")
            Task.objects.create(
                id=f"task_{secrets.token_hex(16)}",
                cluster_id=name,
                agent_id="worker",
                role="implementation",
                iteration=i + 1,
                trigger_message_id=message.message_id,
                trigger_topic="GO",
                trigger_sequence=message.sequence,
                created_at=now + i,
                available_at=now,
            )
            started = time.perf_counter()
            claimed = task_claim(cluster_id=name, worker="bench")
            elapsed = time.perf_counter() - started
            assert claimed is not None
            assert "Add a login button" in claimed.prompt
            Task.objects.filter(pk=claimed.task.id).update(state="completed")
            if i >= 10:
                samples[name].append(elapsed)
    report: dict[str, Any] = {name: percentiles(values) for name, values in samples.items()}
    report["messages"] = sizes
    report["ratio_p50_big_over_small"] = report["big"]["p50_ms"] / report["small"]["p50_ms"]
    return report


@contextmanager
def served_cluster(
    database_url: str, data_dir: Path, tasks: int, *, agents: int = 16
) -> Iterator[tuple[str, str, Callable[[], int]]]:
    """daphne over ``database_url`` serving a running cluster ``tps`` with ``tasks`` queued
    tasks (one per trigger message); yields the API's URL, a key, and a count of the completed
    tasks."""
    import httpx

    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ZEROSHOT_DATA_DIR": str(data_dir),
        "DJANGO_SETTINGS_MODULE": "zeroshot_web.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "bench-only",
        "API_RATE_LIMIT": "",
    }
    env.pop("REDIS_URL", None)
    manage = [sys.executable, str(lb.ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, cwd=lb.ROOT)
    setup = f"""
from ledger.interfaces import cluster_create, message_publish_batch, MessageDraft
from ledger.keys import api_key_create
agents = [{{"id": f"a{{n}}", "role": "implementation", "prompt": "x",
           "triggers": [{{"topic": f"T{{n}}"}}]}} for n in range({agents})]
cluster_create(cluster_id="tps", config={{"agents": agents}}, state="running")
for start in range(0, {tasks}, 100):
    ns = range(start, min(start + 100, {tasks}))
    drafts = [MessageDraft(topic=f"T{{n % {agents}}}", sender="bench") for n in ns]
    message_publish_batch(cluster_id="tps", drafts=drafts)
print(api_key_create(name="bench")[1])
"""
    key = (
        subprocess.run(
            [*manage, "shell", "-c", setup],
            env={**env, "ZEROSHOT_PIPELINE": "inline"},
            check=True,
            capture_output=True,
            text=True,
            cwd=lb.ROOT,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    port = 18500 + os.getpid() % 1000
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-p", str(port), "zeroshot_web.asgi:application"],
        env=env,
        cwd=lb.ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/api/v1"

    def completed() -> int:
        count = (
            "from runs.models import Task; print(Task.objects.filter(state='completed').count())"
        )
        out = subprocess.run(
            [*manage, "shell", "-c", count], env=env, check=True, capture_output=True, text=True
        )
        return int(out.stdout.strip().splitlines()[-1])

    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{url}/openapi.json", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url.removesuffix("/api/v1"), key, completed
    finally:
        server.terminate()
        server.wait(10)


def tasks_per_second(database_url: str, data_dir: Path, tasks: int) -> dict[str, Any]:
    """8 threads claiming and completing over HTTP against daphne on ``database_url``."""
    import httpx

    done = [0]
    lock = threading.Lock()
    with served_cluster(database_url, data_dir, tasks) as (base, key, _):
        url = f"{base}/api/v1"

        def worker() -> None:
            with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
                idle = 0
                while idle < 2:
                    answer = client.post(f"{url}/tasks/claim", json={"wait": 0.5, "worker": "b"})
                    if answer.status_code == 204:
                        idle += 1
                        continue
                    idle = 0
                    task = answer.json()["task"]
                    client.post(
                        f"{url}/tasks/{task['id']}/complete",
                        json={"lease_id": task["lease_id"], "result": {}, "output": "{}"},
                    ).raise_for_status()
                    with lock:
                        done[0] += 1

        started = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started - 1.0  # the last empty long polls
    assert done[0] == tasks, done
    return {"tasks": tasks, "seconds": elapsed, "tasks_per_second": tasks / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--postgres", help="a PostgreSQL server URL, e.g. postgres://postgres@127.0.0.1:5432/test"
    )
    args = parser.parse_args()
    reps = 50 if args.quick else 200
    big = 100_000 if args.quick else 1_000_000
    tasks = 160 if args.quick else 800
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="zeroshot-runs-bench-") as tmp:
        lb.django_setup(Path(tmp) / "inproc")
        from ledger.bus import bus
        from snapshots.snapshotter import snapshotter

        snapshotter.connect()  # the pipeline as a server runs it
        bus.push_enabled = False
        report["trigger_to_claimable"] = trigger_to_claimable(reps)
        report["claim_to_prompt"] = claim_latency(big, reps)
        sqlite_dir = Path(tmp) / "http-sqlite"
        sqlite_dir.mkdir()
        report["tasks_per_second_sqlite"] = tasks_per_second(
            f"sqlite:///{sqlite_dir / 'bench.sqlite3'}", sqlite_dir, tasks
        )
        if args.postgres:
            import psycopg

            admin = args.postgres.rsplit("/", 1)[0] + "/postgres"
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("DROP DATABASE IF EXISTS bench_runs")
                conn.execute("CREATE DATABASE bench_runs")
            try:
                pg_dir = Path(tmp) / "http-pg"
                pg_dir.mkdir()
                report["tasks_per_second_postgres"] = tasks_per_second(
                    args.postgres.rsplit("/", 1)[0] + "/bench_runs", pg_dir, tasks
                )
            finally:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute("DROP DATABASE IF EXISTS bench_runs WITH (FORCE)")
        else:
            report["tasks_per_second_postgres"] = "skipped: no --postgres URL"
    print(json.dumps(report, indent=2))
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_PATH.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
