"""zeroshot import benchmark: import speed against plain sqlite3 reading, and follow latency.

Usage: ``.venv/bin/python bench/import_bench.py [--quick] [--keep]`` (see bench/README.md).

Generates a zeroshot ledger of 1,000,000 messages (quick: 100,000) with
``bench/make_zeroshot_ledger.py`` in a fresh temporary directory, imports it into a fresh SQLite
database of ours, then follows it while writing rows one at a time and measures how long each
takes to reach a websocket client. Prints a table and writes ``bench/results/import.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ledger_bench as lb  # a sibling script: its Django setup and environment record

ROOT = lb.ROOT
RESULTS_PATH = ROOT / "bench" / "results" / "import.json"
CLUSTER = "steady-falcon-7"
SELECT = (
    "SELECT rowid, id, timestamp, topic, sender, receiver, content_text, content_data, metadata,"
    " cluster_id FROM messages ORDER BY timestamp, rowid"
)
INSERT = "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"


def make_ledger(path: Path, count: int) -> float:
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "make_zeroshot_ledger.py"),
            str(path),
            "--count",
            str(count),
            "--clusters-json",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def raw_read(path: Path) -> tuple[int, float]:
    """Every row in replay order with plain sqlite3: the reading floor."""
    started = time.perf_counter()
    conn = sqlite3.connect(path)
    count = 0
    try:
        cursor = conn.execute(SELECT)
        while rows := cursor.fetchmany(5000):
            count += len(rows)
    finally:
        conn.close()
    return count, time.perf_counter() - started


def reader_read(path: Path) -> tuple[int, float]:
    """The same rows through ``ledger.zeroshot`` (private copy, JSON columns parsed)."""
    from ledger.zeroshot import open_snapshot, read_messages

    started = time.perf_counter()
    with open_snapshot(path) as conn:
        count = sum(len(batch) for batch in read_messages(conn))
    return count, time.perf_counter() - started


def timed_import(path: Path) -> tuple[Any, float]:
    from ledger.importing import zeroshot_import

    started = time.perf_counter()
    report = zeroshot_import(path=path)
    return report.ledgers[0], time.perf_counter() - started


def follow_latency(path: Path, rows: int, poll: float) -> dict[str, Any]:
    """Write ``rows`` rows one at a time; time each from its commit to its websocket push."""
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator

    from ledger.importing import zeroshot_follow
    from ledger.keys import api_key_create
    from zeroshot_web.asgi import application

    _, key = api_key_create(name="bench")
    writer = sqlite3.connect(path, check_same_thread=False)
    last_ts = writer.execute("SELECT MAX(timestamp) FROM messages").fetchone()[0]
    stop = threading.Event()
    follow = database_sync_to_async(zeroshot_follow, thread_sensitive=False)
    rng = random.Random(7)
    latencies: list[float] = []
    ready = time.perf_counter()

    async def scenario() -> float:
        client = WebsocketCommunicator(application, f"/ws/clusters/{CLUSTER}/?key={key}")
        connected, _ = await client.connect()
        assert connected
        task = asyncio.ensure_future(follow(path=path, poll_interval=poll, stop=stop))
        # The follower first re-imports the ledger (all skipped); wait until it tails.
        probe = (
            "msg_probe",
            last_ts + 1,
            "AGENT_LIFECYCLE",
            "bench",
            "system",
            "p",
            None,
            None,
            CLUSTER,
        )
        with writer:
            writer.execute(INSERT, probe)
        await client.receive_json_from(timeout=600)
        startup = time.perf_counter() - ready
        try:
            for i in range(rows):
                # Spread the writes over the poll cycle, as a real writer would be.
                await asyncio.sleep(rng.uniform(0.05, poll + 0.05))
                message = (
                    f"msg_follow_{i:05d}",
                    last_ts + 2 + i,
                    "AGENT_OUTPUT",
                    "worker",
                    "broadcast",
                    f"line {i}",
                    '{"line":1}',
                    None,
                    CLUSTER,
                )
                started = time.perf_counter()
                with writer:
                    writer.execute(INSERT, message)
                event = await client.receive_json_from(timeout=30)
                latencies.append(time.perf_counter() - started)
                assert event["data"]["id"] == message[0], event
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=60)
            await client.disconnect()
        return startup

    try:
        startup = asyncio.run(scenario())
    finally:
        writer.close()
    ordered = sorted(latencies)
    return {
        "rows": rows,
        "poll_interval_s": poll,
        "p50_ms": round(1000 * ordered[len(ordered) // 2], 1),
        "p95_ms": round(1000 * ordered[max(0, -(-95 * len(ordered) // 100) - 1)], 1),
        "max_ms": round(1000 * ordered[-1], 1),
        "startup_s": round(startup, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 messages instead of 1M")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--follow-rows", type=int, default=50)
    parser.add_argument("--poll", type=float, default=0.5, help="follow poll interval (s)")
    args = parser.parse_args()
    count = 100_000 if args.quick else 1_000_000

    workdir = Path(tempfile.mkdtemp(prefix="zeroshot-import-bench-"))
    try:
        source_dir = workdir / "zeroshot"
        ledger = source_dir / f"{CLUSTER}.db"
        generate_s = make_ledger(ledger, count)
        lb.django_setup(workdir / "data")
        importlib.import_module("ledger.importing")  # no import inside a timed region

        raw_rows, raw_s = raw_read(ledger)
        reader_rows, reader_s = reader_read(ledger)
        first, import_s = timed_import(ledger)
        again, reimport_s = timed_import(ledger)
        assert (first.imported, again.skipped) == (count, count), (first, again)
        follow = follow_latency(ledger, args.follow_rows, args.poll)
        raw_rate = raw_rows / raw_s
        results = {
            "mode": "quick" if args.quick else "full",
            "messages": count,
            "source_mb": round(ledger.stat().st_size / 1e6, 1),
            "generate_s": round(generate_s, 1),
            "raw_sqlite3_read": {"seconds": round(raw_s, 2), "msg_per_s": round(raw_rate)},
            "zeroshot_reader": {
                "seconds": round(reader_s, 2),
                "msg_per_s": round(reader_rows / reader_s),
                "ratio_to_raw": round(reader_rows / reader_s / raw_rate, 3),
            },
            "import": {
                "seconds": round(import_s, 1),
                "msg_per_s": round(count / import_s),
                "ratio_to_raw": round(count / import_s / raw_rate, 3),
            },
            "reimport_nothing_new": {
                "seconds": round(reimport_s, 1),
                "msg_per_s": round(count / reimport_s),
                "ratio_to_raw": round(count / reimport_s / raw_rate, 3),
            },
            "follow": follow,
            "environment": lb.environment(),
        }
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_PATH.write_text(json.dumps(results, indent=2) + "\n")
    print(
        f"\nImport benchmark ({results['mode']}): {count:,} messages, "
        f"{results['source_mb']} MB ledger, SQLite {results['environment']['sqlite']}"
    )
    print(f"\n{'':<34}{'seconds':>9}{'msg/s':>11}{'÷ raw read':>12}")
    print(f"{'plain sqlite3 read':<34}{raw_s:>9.2f}{raw_rate:>11,.0f}{1.0:>12.3f}")
    for label, key in (
        ("ledger.zeroshot reader (copy+JSON)", "zeroshot_reader"),
        ("zeroshot_import (new cluster)", "import"),
        ("zeroshot_import again (all skip)", "reimport_nothing_new"),
    ):
        row = results[key]
        print(f"{label:<34}{row['seconds']:>9}{row['msg_per_s']:>11,}{row['ratio_to_raw']:>12.3f}")
    print(
        f"\nFollow latency (row committed in the source → websocket message), "
        f"{follow['rows']} rows, poll {follow['poll_interval_s']} s: p50 {follow['p50_ms']} ms, "
        f"p95 {follow['p95_ms']} ms, max {follow['max_ms']} ms "
        f"(follower start-up on this ledger {follow['startup_s']} s)"
    )
    print(f"\nwrote {RESULTS_PATH.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
