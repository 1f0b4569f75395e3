"""zeroshot import benchmark: import speed against a raw insert and a raw read, and follow latency.

Usage: ``.venv/bin/python bench/import_bench.py [--quick] [--keep] [--rounds N]`` (see
bench/README.md).

Generates a zeroshot ledger of 1,000,000 messages (quick: 100,000) with
``bench/make_zeroshot_ledger.py`` in a fresh temporary directory. Each round imports it into a
fresh SQLite database of ours and, side by side, inserts the very rows that import stored with
plain ``sqlite3`` ``executemany`` into another fresh copy of the same schema (tables, indexes,
full-text triggers), in one transaction: the ratio of the two is the import's price over the
database's own work. Rounds alternate which of the two goes first. Then it follows the ledger
while writing rows one at a time and measures how long each takes to reach a websocket client.
Prints a table and writes ``bench/results/import.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import random
import shutil
import sqlite3
import statistics
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


def use_database(path: Path) -> None:
    """Point Django's connection at another SQLite file (a fresh copy of the schema)."""
    from django.db import connections

    connection = connections["default"]
    connection.close()
    connection.settings_dict["NAME"] = str(path)


def remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def fresh_copy(template: Path, path: Path) -> Path:
    remove_database(path)
    shutil.copyfile(template, path)
    return path


def schema_template(path: Path) -> Path:
    """A copy of the migrated, empty database: every table, index, view and trigger of ours."""
    source = sqlite3.connect(lb.db_path())
    try:
        source.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        target = sqlite3.connect(path)
        try:
            source.backup(target)
        finally:
            target.close()
    finally:
        source.close()
    return path


def stored_rows(path: Path) -> tuple[list[str], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The message rows (all columns but the key) and cluster rows an import stored."""
    conn = sqlite3.connect(path)
    try:
        columns = [
            str(row[1])
            for row in conn.execute("PRAGMA table_info(ledger_message)")
            if row[1] != "id"
        ]
        rows = conn.execute(
            f"SELECT {', '.join(columns)} FROM ledger_message ORDER BY cluster_id, sequence"
        ).fetchall()
        clusters = conn.execute("SELECT * FROM ledger_cluster").fetchall()
    finally:
        conn.close()
    return columns, rows, clusters


def raw_insert(
    path: Path,
    columns: list[str],
    rows: list[tuple[Any, ...]],
    clusters: list[tuple[Any, ...]],
) -> float:
    """Insert the rows an import stored into ``path`` with plain sqlite3, in one transaction,
    configured like Django's connection (WAL, synchronous=NORMAL, foreign keys, IMMEDIATE)."""
    conn = lb.raw_connect(path)
    try:
        conn.executemany(
            f"INSERT INTO ledger_cluster VALUES ({', '.join('?' for _ in clusters[0])})", clusters
        )
        sql = (
            f"INSERT INTO ledger_message ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' for _ in columns)})"
        )
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(sql, rows)
        conn.execute("COMMIT")
        return time.perf_counter() - started
    finally:
        conn.close()


def import_rounds(
    ledger: Path, workdir: Path, template: Path, count: int, rounds: int
) -> tuple[dict[str, Any], Path]:
    """``rounds`` imports and as many raw inserts of the same rows, alternating which goes first.

    Returns the figures and the database of the last import, for the re-import and the follow.
    """
    imports: list[float] = []
    raws: list[float] = []
    # Processor time of this process too: the machine may be shared, and both sides run here.
    import_cpu: list[float] = []
    raw_cpu: list[float] = []
    rows: tuple[list[str], list[tuple[Any, ...]], list[tuple[Any, ...]]] | None = None
    last: Path | None = None

    def one_import(index: int) -> None:
        nonlocal rows, last
        previous = last
        last = fresh_copy(template, workdir / f"import-{index}.sqlite3")
        use_database(last)
        if previous is not None:
            remove_database(previous)
        cpu = time.process_time()
        first, seconds = timed_import(ledger)
        import_cpu.append(time.process_time() - cpu)
        assert first.imported == count, first
        imports.append(seconds)
        if rows is None:
            rows = stored_rows(last)

    def one_raw(index: int) -> None:
        assert rows is not None
        path = fresh_copy(template, workdir / f"raw-{index}.sqlite3")
        cpu = time.process_time()
        raws.append(raw_insert(path, *rows))
        raw_cpu.append(time.process_time() - cpu)
        remove_database(path)

    for index in range(rounds):
        # The raw insert needs the rows of a first import; after that, the order alternates.
        if index % 2 == 0:
            one_import(index)
            one_raw(index)
        else:
            one_raw(index)
            one_import(index)
        print(
            f"round {index + 1}: import {count / imports[-1]:,.0f} msg/s, "
            f"raw insert {count / raws[-1]:,.0f} msg/s, ratio {raws[-1] / imports[-1]:.3f} "
            f"(processor time: {raw_cpu[-1] / import_cpu[-1]:.3f})",
            flush=True,
        )
    assert last is not None
    assert rows is not None
    # Diagnostic, once: the same raw insert without the full-text index's trigger, to show how
    # much of the database's work the index is.
    bare = fresh_copy(template, workdir / "raw-bare.sqlite3")
    conn = sqlite3.connect(bare)
    conn.execute("DROP TRIGGER ledger_message_search_insert")
    conn.close()
    bare_s = raw_insert(bare, *rows)
    remove_database(bare)
    ratios = [raw / imported for imported, raw in zip(imports, raws, strict=True)]
    return {
        "rounds": rounds,
        "import_msg_per_s": spread([count / s for s in imports]),
        "raw_insert_msg_per_s": spread([count / s for s in raws]),
        "ratio_to_raw_insert": spread(ratios, digits=3),
        "raw_insert_without_search_msg_per_s": round(count / bare_s),
        "cpu_ratio_to_raw_insert": spread(
            [raw / imported for imported, raw in zip(import_cpu, raw_cpu, strict=True)], digits=3
        ),
    }, last


def spread(values: list[float], digits: int = 0) -> dict[str, float]:
    """Median and range of a few measurements."""
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


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
    parser.add_argument("--rounds", type=int, default=3, help="import / raw insert rounds")
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
        template = schema_template(workdir / "schema.sqlite3")

        raw_rows, raw_s = raw_read(ledger)
        reader_rows, reader_s = reader_read(ledger)
        rounds, _ = import_rounds(ledger, workdir, template, count, args.rounds)
        again, reimport_s = timed_import(ledger)
        assert again.skipped == count, again
        follow = follow_latency(ledger, args.follow_rows, args.poll)
        raw_rate = raw_rows / raw_s
        import_rate = rounds["import_msg_per_s"]["median"]
        results: dict[str, Any] = {
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
                **rounds,
                "ratio_to_raw_read": round(import_rate / raw_rate, 3),
            },
            "reimport_nothing_new": {
                "seconds": round(reimport_s, 1),
                "msg_per_s": round(count / reimport_s),
                "ratio_to_raw_read": round(count / reimport_s / raw_rate, 3),
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
    reader = results["zeroshot_reader"]
    print(
        f"{'ledger.zeroshot reader (copy+JSON)':<34}{reader['seconds']:>9}"
        f"{reader['msg_per_s']:>11,}{reader['ratio_to_raw']:>12.3f}"
    )
    again_row = results["reimport_nothing_new"]
    print(
        f"{'zeroshot_import again (all skip)':<34}{again_row['seconds']:>9}"
        f"{again_row['msg_per_s']:>11,}{again_row['ratio_to_raw_read']:>12.3f}"
    )
    imp, raw, ratio, cpu_ratio = (
        rounds["import_msg_per_s"],
        rounds["raw_insert_msg_per_s"],
        rounds["ratio_to_raw_insert"],
        rounds["cpu_ratio_to_raw_insert"],
    )
    print(
        f"\nImport into a new cluster against a raw executemany of the same rows into the same "
        f"schema, {rounds['rounds']} rounds, median [min..max]:"
    )
    print(
        f"{'zeroshot_import (new cluster)':<34}{imp['median']:>11,.0f} msg/s "
        f"[{imp['min']:,.0f}..{imp['max']:,.0f}]"
    )
    print(
        f"{'raw sqlite3 executemany, 1 txn':<34}{raw['median']:>11,.0f} msg/s "
        f"[{raw['min']:,.0f}..{raw['max']:,.0f}]"
    )
    print(
        f"{'import ÷ raw insert':<34}{ratio['median']:>11.3f}       "
        f"[{ratio['min']:.3f}..{ratio['max']:.3f}]"
    )
    print(
        f"{'  the same in processor time':<34}{cpu_ratio['median']:>11.3f}       "
        f"[{cpu_ratio['min']:.3f}..{cpu_ratio['max']:.3f}]"
    )
    print(
        f"{'(raw, without the full-text index)':<34}"
        f"{rounds['raw_insert_without_search_msg_per_s']:>11,} msg/s, once"
    )
    print(
        f"\nFollow latency (row committed in the source → websocket message), "
        f"{follow['rows']} rows, poll {follow['poll_interval_s']} s: p50 {follow['p50_ms']} ms, "
        f"p95 {follow['p95_ms']} ms, max {follow['max_ms']} ms "
        f"(follower start-up on this ledger {follow['startup_s']} s)"
    )
    print(f"\nwrote {RESULTS_PATH.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
