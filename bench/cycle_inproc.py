"""The task cycle in one process, without HTTP: each tree's CPU per claim and completion, and
the database's, side by side.

Usage::

    .venv/bin/python bench/cycle_inproc.py                                  # SQLite, this tree
    .venv/bin/python bench/cycle_inproc.py \
        --database-url postgres://postgres@127.0.0.1:5432/bench_cycle \
        --trees before=/tmp/old,after=. --runs 4                           # PostgreSQL, two trees

Each run is a fresh process per tree, the trees' order alternating from run to run, on a fresh
database (SQLite in a temporary directory, or the PostgreSQL database of ``--database-url``,
dropped and made again): a running cluster of 64 agents whose tasks were queued by trigger
messages, then one worker claiming a task and completing it at once, through the services
(``task_claim``, ``task_complete``), as the API routes call them. The post-commit pipeline runs
on its own threads and the live push is on, as in a server (with ``--redis-url`` on
PostgreSQL, its channel layer). After ``--warm`` untimed cycles, ``--cycles`` timed ones.

Per cycle: the process's CPU (``time.process_time``, every thread, the pipeline's included,
until it settles), PostgreSQL's own CPU (every ``postgres`` process of the machine, from
``/proc``: run it on an otherwise idle machine) and cycles a second. With one worker, nothing
waits on a lock: the figures are the work itself, steadier than a served load's
(``cpu_profile.py --only tasks-loop``), where the HTTP layer and eight workers come on top.

``--instructions``: each run under valgrind's callgrind instead, the pipeline inline (in the
committing thread, as the tests run it, so that no turn depends on timing), the counters zeroed
after the warm cycles and read after the timed ones: the instructions a cycle took, which do
not change with the machine's speed or load (the same tree reads within about 1 % from run to
run) where CPU time does by tens of percent. Slow: about 0.1 s a cycle; use ``--cycles 50``.
What runs at most once a second (the look at the leases, the conductor watchdog's) then comes
every few cycles instead of every few hundred: a constant share, the same in every tree that
does not change it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from cpu_profile import postgres_cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
AGENTS = 64


def fresh_postgres(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    with psycopg.connect(parts._replace(path="/postgres").geturl(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def django_in(
    tree: str, *, pipeline: str, data_prefix: str, database_url: str = "", redis_url: str = ""
) -> None:
    """Set Django up in this process on ``tree``'s code, as a throwaway production-like server
    would (``DJANGO_DEBUG=0``, the post-commit pipeline as ``pipeline`` says), on a fresh
    database migrated: SQLite in a temporary directory, or ``database_url`` dropped and made
    again (with ``redis_url`` its channel layer)."""
    root = Path(tree).resolve()
    sys.path.insert(0, str(root))
    os.chdir(root)
    os.environ.update(
        DJANGO_SETTINGS_MODULE="zeroshot_web.settings",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY="bench-only-key-of-a-throwaway-database",
        ZEROSHOT_PIPELINE=pipeline,
        ZEROSHOT_DATA_DIR=tempfile.mkdtemp(prefix=data_prefix),
    )
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    if database_url:
        fresh_postgres(database_url)
        os.environ["DATABASE_URL"] = database_url
        if redis_url:
            os.environ["REDIS_URL"] = redis_url
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def child(args: argparse.Namespace) -> None:
    """One tree's run, in this process: prints its figures as JSON."""
    django_in(
        args.child,
        pipeline="inline" if args.instructions else "thread",
        data_prefix="cycle-inproc-",
        database_url=args.database_url,
        redis_url=args.redis_url,
    )
    from django.db import connections

    from ledger.bus import bus
    from ledger.interfaces import MessageDraft, cluster_create, message_publish_batch
    from runs.services.tasks import task_claim, task_complete

    bus.push_enabled = True
    agents = [
        {"id": f"a{n}", "role": "implementation", "prompt": "x", "triggers": [{"topic": f"T{n}"}]}
        for n in range(AGENTS)
    ]
    cluster_create(cluster_id="tps", config={"agents": agents}, state="running")
    total = args.cycles + args.warm
    for start in range(0, total, 100):
        drafts = [
            MessageDraft(topic=f"T{n % AGENTS}", sender="bench")
            for n in range(start, min(start + 100, total))
        ]
        message_publish_batch(cluster_id="tps", drafts=drafts)
    time.sleep(2.0)  # the pipeline queues the tasks

    def cycle() -> None:
        claim = task_claim(cluster_id="tps", worker="w0")
        if claim is None:
            raise RuntimeError("no task to claim")
        task_complete(task_id=claim.task.id, lease_id=claim.task.lease_id, result={}, output="{}")

    for _ in range(args.warm):
        cycle()
    time.sleep(0.6)
    if args.instructions:  # callgrind counts from here to its dump (``callgrind_control``)
        subprocess.run(["callgrind_control", "--zero", str(os.getpid())], check=True)
    database, process, began = postgres_cpu_seconds(), time.process_time(), time.perf_counter()
    for _ in range(args.cycles):
        cycle()
    wall = time.perf_counter() - began
    if args.instructions:
        subprocess.run(["callgrind_control", "--dump=cycles", str(os.getpid())], check=True)
    time.sleep(0.6)  # the pipeline's last turns
    process = time.process_time() - process
    database = postgres_cpu_seconds() - database if args.database_url else 0.0
    connections.close_all()
    print(
        json.dumps(
            {
                "process_ms": 1000 * process / args.cycles,
                "database_ms": 1000 * database / args.cycles,
                "cycles_s": args.cycles / wall,
                "pid": os.getpid(),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default=f"this={ROOT}", help="label=DIR,...")
    parser.add_argument("--database-url", default="", help="postgres://…/bench_…; SQLite if none")
    parser.add_argument("--redis-url", default="", help="the channel layer on PostgreSQL")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--warm", type=int, default=40)
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions under callgrind"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    trees = [tuple(part.split("=", 1)) for part in args.trees.split(",")]
    database = "PostgreSQL" if args.database_url else "SQLite"
    if args.instructions:
        print("| run | tree | instructions a cycle (millions) |")
        print("| --- | --- | --- |")
    else:
        print(f"| run | tree | process CPU, ms a cycle | {database}'s own CPU | cycles/s |")
        print("| --- | --- | --- | --- | --- |")
    counts = Path(tempfile.mkdtemp(prefix="cycle-callgrind-"))
    for run in range(1, args.runs + 1):
        order = trees if run % 2 else list(reversed(trees))
        for label, directory in order:
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                directory,
                *("--database-url", args.database_url),
                *("--redis-url", args.redis_url),
                *("--cycles", str(args.cycles), "--warm", str(args.warm)),
                *(["--instructions"] if args.instructions else []),
            ]
            if args.instructions:
                out = counts / f"{run}-{label}.%p"
                command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{label}'s run failed:\n{done.stderr[-3000:]}")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            if args.instructions:
                dumped = counts / f"{run}-{label}.{figures['pid']}.1"
                total = _callgrind_summary(dumped)
                print(f"| {run} | {label} | {total / args.cycles / 1e6:.2f} |", flush=True)
                continue
            own = f"{figures['database_ms']:.2f}" if args.database_url else "(in the process)"
            print(
                f"| {run} | {label} | {figures['process_ms']:.2f} | {own} | "
                f"{figures['cycles_s']:.0f} |",
                flush=True,
            )


def _callgrind_summary(dump: Path) -> int:
    """The instructions a callgrind dump counted (its ``summary:`` line)."""
    for line in dump.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"no summary in {dump}")


if __name__ == "__main__":
    main()
