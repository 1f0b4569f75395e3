"""Fleet page benchmark: server time of ``GET /fleet/`` over 1,000 clusters and 100,000 tasks.

Usage: ``.venv/bin/python bench/fleet_bench.py [--quick] [--postgres URL] [--running N]``
(see bench/README.md). Not part of the test suite.

The fleet is written straight into a fresh database (SQLite in a temporary directory, or the
PostgreSQL database ``--postgres`` names, whose tables are created by ``migrate`` and emptied
first): 1,000 clusters of 4 agents in 4 pools, ``--running`` of them running (default 200) with
a task claimed and 0-2 queued per agent, the others completed; 100,000 tasks spread over the last
30 days, completed with reported usage (3 models) but for 1 in 20 failed; 5 messages per
cluster; 60 runners. Then the page is rendered in-process through Django's test ``Client``
(the same middleware, session and template as a browser request), 5 times untimed and 50 timed,
and each of its queries is timed on its own (``connection.execute_wrapper``): the profile that
says whether an index is missing (on SQLite a query's time there runs to its first row; the
rest is read while Python iterates). Prints a table and writes ``bench/results/fleet.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_PATH = ROOT / "bench" / "results" / "fleet.json"
DAY_MS = 86_400_000
AGENTS = ("planner", "worker", "validator", "reviewer")
MODELS = ("claude-sonnet-4", "claude-haiku-4", "gpt-5-mini")
POOLS = ("demo", "gpu", "cpu", "eu")


def django_setup(data_dir: Path, postgres: str | None) -> None:
    """Settings over a fresh SQLite file in ``data_dir``, or over ``postgres``; migrated."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "zeroshot_web.settings"
    os.environ["ZEROSHOT_DATA_DIR"] = str(data_dir)
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-key-of-a-throwaway-database")
    os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "testserver,127.0.0.1,localhost")
    os.environ.pop("REDIS_URL", None)
    if postgres:
        os.environ["DATABASE_URL"] = postgres
    else:
        os.environ.pop("DATABASE_URL", None)
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def fill(*, clusters: int, tasks: int, running: int, seed: int = 20) -> dict[str, int]:
    """Write the fleet with bulk inserts (not through the services: this measures reads)."""
    from django.db import transaction

    from ledger.models import Cluster, Message
    from runs.models import Runner, Task, TaskState, UsageDay

    rng = random.Random(seed)
    now = int(time.time() * 1000)
    with transaction.atomic():
        UsageDay.objects.all().delete()
        Task.objects.all().delete()
        Message.objects.all().delete()
        Cluster.objects.all().delete()
        Runner.objects.all().delete()
    config = {"agents": [{"id": a, "role": "implementation", "prompt": "Go."} for a in AGENTS]}
    cluster_rows = []
    for i in range(clusters):
        created = now - 30 * DAY_MS + i * (30 * DAY_MS // clusters)
        cluster_rows.append(
            Cluster(
                id=f"fleet-{i:04d}",
                created_at=created,
                state="running" if i >= clusters - running else "completed",
                config=config,
                labels={"pool": POOLS[i % len(POOLS)]},
                last_sequence=5,
                last_timestamp=created + 5,
            )
        )
    messages = [
        Message(
            cluster_id=c.id,
            message_id=f"{c.id}-m{s}",
            sequence=s,
            timestamp=c.created_at + s,
            topic=(
                "ISSUE_OPENED",
                "PLAN_READY",
                "AGENT_LIFECYCLE",
                "TOKEN_USAGE",
                "WORKER_PROGRESS",
            )[s - 1],
            sender="worker",
            content={"text": f"message {s}"},
        )
        for c in cluster_rows
        for s in range(1, 6)
    ]
    per_cluster = tasks // clusters
    task_rows = []
    runners = [f"runner-{n:02d}:{4000 + n}" for n in range(60)]
    for c in cluster_rows:
        live = c.state == "running"
        for n in range(per_cluster):
            agent = AGENTS[n % len(AGENTS)]
            iteration = n // len(AGENTS) + 1
            created = now - rng.randrange(30 * DAY_MS) if not live else now - rng.randrange(DAY_MS)
            open_slot = live and n >= per_cluster - 3 * len(AGENTS)
            if open_slot:
                # the newest three tasks of each agent: one claimed, the others queued
                rank = (per_cluster - 1 - n) // len(AGENTS)
                state = TaskState.CLAIMED if rank == 2 else TaskState.QUEUED
                if rng.random() < 0.3 and state == TaskState.QUEUED:
                    state = TaskState.COMPLETED
            else:
                state = TaskState.FAILED if rng.random() < 0.05 else TaskState.COMPLETED
            finished = created + rng.randrange(5_000, 600_000)
            done = state in (TaskState.COMPLETED, TaskState.FAILED)
            worker = rng.choice(runners) if state != TaskState.QUEUED else ""
            task_rows.append(
                Task(
                    id=f"task_{rng.getrandbits(128):032x}",
                    cluster_id=c.id,
                    agent_id=agent,
                    role="implementation",
                    iteration=iteration,
                    state=state,
                    trigger_message_id=f"{c.id}-t{n}",
                    trigger_topic="ISSUE_OPENED",
                    trigger_sequence=1,
                    attempts=1 if state != TaskState.QUEUED else 0,
                    worker=worker,
                    lease_expires_at=now + 120_000 if state == TaskState.CLAIMED else None,
                    created_at=created,
                    available_at=created,
                    claimed_at=created + 1_000 if state != TaskState.QUEUED else None,
                    finished_at=finished if done else None,
                    usage={
                        "inputTokens": rng.randrange(500, 60_000),
                        "outputTokens": rng.randrange(50, 4_000),
                        "model": rng.choice(MODELS),
                        "costUsd": round(rng.random() / 5, 4),
                    }
                    if state == TaskState.COMPLETED
                    else None,
                )
            )
    runner_rows = [
        Runner(
            name=name,
            first_seen_at=now - 30 * DAY_MS,
            last_seen_at=now - rng.randrange(600_000),
            labels={"pool": POOLS[n % len(POOLS)]},
            providers=["claude"] if n % 2 else [],
            claimed=rng.randrange(10_000),
            completed=rng.randrange(10_000),
            failed=rng.randrange(300),
        )
        for n, name in enumerate(runners)
    ]
    # The per-day sums each completion adds to (runs.services.usage), summed the same way.
    sums: dict[tuple[int, str, str], list[Any]] = {}
    for t in task_rows:
        if t.usage is not None and t.finished_at is not None:
            row = sums.setdefault(
                (t.finished_at // DAY_MS, t.agent_id, t.usage["model"]),
                [0, 0, 0, 0.0],
            )
            row[0] += 1
            row[1] += t.usage["inputTokens"]
            row[2] += t.usage["outputTokens"]
            row[3] += t.usage["costUsd"]
    usage_rows = [
        UsageDay(
            day=d,
            agent_id=a,
            model=m,
            tasks=n,
            input_tokens=i,
            output_tokens=o,
            cost_usd=cost,
        )
        for (d, a, m), (n, i, o, cost) in sums.items()
    ]
    with transaction.atomic():
        Cluster.objects.bulk_create(cluster_rows, batch_size=500)
        UsageDay.objects.bulk_create(usage_rows, batch_size=2_000)
        Message.objects.bulk_create(messages, batch_size=2_000)
        Task.objects.bulk_create(task_rows, batch_size=2_000)
        Runner.objects.bulk_create(runner_rows)
    from django.db import connection

    if connection.vendor == "postgresql":
        # What autovacuum does on a server; SQLite is left as the app leaves it (no ANALYZE).
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    return {
        "clusters": clusters,
        "running": running,
        "tasks": len(task_rows),
        "open_tasks": sum(t.state in ("queued", "claimed") for t in task_rows),
        "messages": len(messages),
        "runners": len(runner_rows),
        "usage_day_rows": len(usage_rows),
    }


def timed(fn: Callable[[], object], *, warmup: int, reps: int) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return sorted(samples)


def profile(get: Callable[[], Any], reps: int) -> list[dict[str, Any]]:
    """Each query of the page with its median time over ``reps`` renders."""
    from django.db import connection

    by_sql: dict[int, list[float]] = {}
    names: dict[int, str] = {}

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            position = len(current)
            current.append(sql)
            by_sql.setdefault(position, []).append((time.perf_counter() - start) * 1000)
            names[position] = sql

    for _ in range(reps):
        current: list[str] = []
        with connection.execute_wrapper(wrapper):
            get()
    rows = []
    for position, samples in sorted(by_sql.items()):
        samples.sort()
        rows.append(
            {
                "query": position + 1,
                "median_ms": round(samples[len(samples) // 2], 3),
                "sql": " ".join(names[position].split())[:160],
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 clusters, 10,000 tasks")
    parser.add_argument("--postgres", help="a PostgreSQL database URL whose tables it may empty")
    parser.add_argument("--running", type=int, default=None, help="running clusters (200)")
    args = parser.parse_args()
    clusters, tasks = (100, 10_000) if args.quick else (1_000, 100_000)
    running = args.running if args.running is not None else clusters // 5
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        django_setup(Path(tmp), args.postgres)
        from django.contrib.auth import get_user_model
        from django.db import connection
        from django.test import Client

        get_user_model().objects.filter(username="bench").delete()
        get_user_model().objects.create_user("bench", password="bench-only-password-1")
        client = Client()
        assert client.login(username="bench", password="bench-only-password-1")

        def get() -> None:
            response = client.get("/fleet/")
            assert response.status_code == 200, response.status_code

        # The same page before the fleet exists: what middleware, session and layout cost.
        fill(clusters=1, tasks=1, running=0)
        empty = timed(get, warmup=5, reps=30)
        started = time.perf_counter()
        sizes = fill(clusters=clusters, tasks=tasks, running=running)
        fill_s = time.perf_counter() - started

        samples = timed(get, warmup=5, reps=50)
        region = timed(
            lambda: client.get("/fleet/", headers={"HX-Request": "true"}), warmup=2, reps=50
        )
        queries = profile(get, reps=20)
        report = {
            "database": connection.vendor,
            "sizes": sizes,
            "fill_seconds": round(fill_s, 1),
            "page_ms": {
                "p50": round(samples[len(samples) // 2], 2),
                "p95": round(samples[int(len(samples) * 0.95)], 2),
                "min": round(samples[0], 2),
            },
            "region_ms": {
                "p50": round(region[len(region) // 2], 2),
                "p95": round(region[int(len(region) * 0.95)], 2),
                "min": round(region[0], 2),
            },
            "empty_fleet_ms": {"p50": round(empty[len(empty) // 2], 2), "min": round(empty[0], 2)},
            "queries": queries,
            "load_average": os.getloadavg(),
        }
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_PATH.write_text(json.dumps(report, indent=2))
    print(f"{report['database']}: {sizes}")
    for name, key in (("GET /fleet/", "page_ms"), ("GET /fleet/ (region)", "region_ms")):
        figures = report[key]
        print(
            f"{name:<22} p50 {figures['p50']} ms  p95 {figures['p95']} ms  min {figures['min']} ms"
        )
    empty_ms = report["empty_fleet_ms"]
    print(f"{'the same, empty fleet':<22} p50 {empty_ms['p50']} ms  min {empty_ms['min']} ms")
    for q in queries:
        print(f"  q{q['query']:<2} {q['median_ms']:>8.3f} ms  {q['sql']}")
    print(f"load average {report['load_average']}; wrote {RESULTS_PATH.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
