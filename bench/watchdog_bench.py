"""The conductor watchdog's look at a long history of finished tasks: each tree's CPU a look,
side by side.

Usage::

    .venv/bin/python bench/watchdog_bench.py                                # SQLite, this tree
    .venv/bin/python bench/watchdog_bench.py --trees before=/tmp/old,after=. \
        --database-url postgres://postgres@127.0.0.1:5432/bench_watchdog    # PostgreSQL too

A claim makes the look at most once a second per process (``runs.watchdog``). For each tree,
in a fresh process on a fresh database (SQLite in a temporary directory; the PostgreSQL
database of ``--database-url``, dropped and made again, then dropped): ``--running`` running
clusters whose conductors completed long ago and published ``CLUSTER_OPERATIONS`` (the usual
case: nothing to fail), 20 finished clusters, and ``--tasks`` completed tasks spread over them,
one in a hundred a conductor's; ``ANALYZE``; one untimed look, then ``--looks`` timed ones.
Printed: the process's CPU (``time.process_time``) and the wall time a look, per tree and
database, as a markdown table. On PostgreSQL the wall time holds the server's own work too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from cpu_profile import drop_database
from cycle_inproc import django_in

ROOT = Path(__file__).resolve().parents[1]
FINISHED_CLUSTERS = 20


def child(args: argparse.Namespace) -> None:
    """One tree's run on one database, in this process: prints its figures as JSON."""
    django_in(
        args.child,
        pipeline="off",
        data_prefix="watchdog-bench-",
        database_url=args.database_url,
    )
    from django.db import connection, connections

    from ledger.interfaces import ImportedMessage, cluster_create, message_import_batch
    from runs.models import Task
    from runs.watchdog import conductor_watchdogs_fire

    for n in range(args.running):
        cluster_id = f"run-{n}"
        cluster_create(cluster_id=cluster_id, config={"agents": []}, state="running")
        operations = ImportedMessage(
            id=f"{cluster_id}-ops",
            timestamp=1,
            topic="CLUSTER_OPERATIONS",
            sender="conductor",
            receiver="broadcast",
            content={"data": {"operations": []}},
            metadata=None,
        )
        message_import_batch(cluster_id=cluster_id, messages=[operations])
    for n in range(FINISHED_CLUSTERS):
        cluster_create(cluster_id=f"old-{n}", config={"agents": []}, state="completed")
    rows: list[Task] = []
    for i in range(args.tasks):
        running = i % 4 == 0
        cluster_id = f"run-{i % args.running}" if running else f"old-{i % FINISHED_CLUSTERS}"
        rows.append(
            Task(
                id=f"t{i:09d}",
                cluster_id=cluster_id,
                agent_id="conductor" if i % 100 == 0 else "worker",
                role="conductor" if i % 100 == 0 else "implementation",
                iteration=i + 1,
                state="completed",
                trigger_message_id=f"m{i}",
                trigger_topic="GO",
                trigger_sequence=i,
                created_at=i,
                available_at=i,
                finished_at=i,
            )
        )
        if len(rows) == 5000:
            Task.objects.bulk_create(rows)
            rows = []
    Task.objects.bulk_create(rows)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    now = 10**13  # every conductor completed long before
    if conductor_watchdogs_fire(now=now, force=True):
        raise RuntimeError("a look failed a cluster whose conductor did its job")
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(args.looks):
        conductor_watchdogs_fire(now=now, force=True)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    connections.close_all()
    if args.database_url:
        drop_database(args.database_url)
    print(json.dumps({"cpu_ms": 1000 * cpu / args.looks, "wall_ms": 1000 * wall / args.looks}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default=f"this={ROOT}", help="label=DIR,...")
    parser.add_argument("--database-url", default="", help="postgres://…/bench_…: PostgreSQL too")
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--running", type=int, default=50)
    parser.add_argument("--looks", type=int, default=20)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.database_url and not urlsplit(args.database_url).path.lstrip("/").startswith("bench_"):
        raise SystemExit("the PostgreSQL database's name must start with bench_")
    trees = [tuple(part.split("=", 1)) for part in args.trees.split(",")]
    databases = ["", args.database_url] if args.database_url else [""]
    print(
        f"{args.tasks:,} finished tasks, {args.running} running clusters, "
        f"{args.looks} looks after one\n"
    )
    print("| tree | database | CPU a look, ms | wall a look, ms |")
    print("| --- | --- | --- | --- |")
    for label, directory in trees:
        for database in databases:
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                directory,
                *("--database-url", database),
                *("--tasks", str(args.tasks), "--running", str(args.running)),
                *("--looks", str(args.looks)),
            ]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{label}'s run failed:\n{done.stderr[-3000:]}")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            name = "PostgreSQL" if database else "SQLite"
            print(
                f"| {label} | {name} | {figures['cpu_ms']:.2f} | {figures['wall_ms']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
