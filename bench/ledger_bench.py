"""Ledger benchmarks on SQLite: publish throughput and the latency of an index-backed query.

Usage: ``.venv/bin/python bench/ledger_bench.py [--quick] [--keep]`` (see bench/README.md).

The run uses its own SQLite file in a fresh temporary directory, never ``data/``; it prints a
table and writes ``bench/results/ledger.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_PATH = ROOT / "bench" / "results" / "ledger.json"

# Roughly the mix of a long zeroshot run (as in make_zeroshot_ledger.py): raw output dominates.
TOPIC_WEIGHTS = (
    ("AGENT_OUTPUT", 80),
    ("AGENT_LIFECYCLE", 8),
    ("TOKEN_USAGE", 4),
    ("STATE_SNAPSHOT", 2),
    ("IMPLEMENTATION_READY", 2),
    ("VALIDATION_RESULT", 2),
    ("PLAN_READY", 1),
    ("CONTEXT_METRICS", 1),
)
SENDERS = ("planner", "worker", "validator-requirements", "validator-code", "git-pusher")
PROSE = (
    "the plan adds a login button to the header and wires it to the session endpoint "
    "tests cover the happy path and an expired token the validator asks for evidence"
)
QUERY_TOPIC = "VALIDATION_RESULT"
MESSAGE_COLUMNS = (
    "cluster_id",
    "message_id",
    "sequence",
    "timestamp",
    "topic",
    "sender",
    "receiver",
    "content",
    "metadata",
    "replayable",
    "idempotency_key",
    "body_hash",
)
INSERT_SQL = (
    f"INSERT INTO ledger_message ({', '.join(MESSAGE_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in MESSAGE_COLUMNS)})"
)


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much each measurement does; ``--quick`` shrinks them for a smoke run."""

    single: int
    batch: int
    batch_size: int
    big: int
    small: int
    query_reps: int


FULL = Sizes(
    single=3_000, batch=30_000, batch_size=100, big=1_000_000, small=10_000, query_reps=1_000
)
QUICK = Sizes(single=1_000, batch=10_000, batch_size=100, big=100_000, small=10_000, query_reps=300)


# --- setup ----------------------------------------------------------------------------------


def django_setup(data_dir: Path) -> None:
    """Point the settings at a fresh SQLite file in ``data_dir`` and migrate it."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "zeroshot_web.settings"
    os.environ["ZEROSHOT_DATA_DIR"] = str(data_dir)
    os.environ["DJANGO_DEBUG"] = "0"  # DEBUG would keep every query in memory
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-key-of-a-throwaway-database")
    # A DATABASE_URL would win over ZEROSHOT_DATA_DIR; this benchmark is about SQLite.
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    sys.path.insert(0, str(ROOT))

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    # Load the whole ledger now: no import may land inside a timed region, and the code
    # measured is the code as it was when the run started.
    import ledger.interfaces  # noqa: F401
    from snapshots.snapshotter import snapshotter

    # The state snapshotter answers trigger topics with STATE_SNAPSHOT messages of its own; this
    # benchmark measures the publish path itself, row for row against plain sqlite3.
    snapshotter.disconnect()


def db_path() -> Path:
    from django.db import connection

    return Path(connection.settings_dict["NAME"])


def raw_connect(path: Path) -> sqlite3.Connection:
    """A plain connection configured like Django's (WAL, synchronous=NORMAL, foreign keys)."""
    conn = sqlite3.connect(path, isolation_level=None)  # we issue BEGIN/COMMIT ourselves
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


# --- data -----------------------------------------------------------------------------------


def topic_pool() -> list[str]:
    return [topic for topic, weight in TOPIC_WEIGHTS for _ in range(weight)]


def text_pool(rng: random.Random, size: int = 2048) -> list[str]:
    words = PROSE.split()
    return [" ".join(rng.choices(words, k=rng.randint(4, 40))) for _ in range(size)]


def content_for(topic: str, text: str, rng: random.Random) -> tuple[dict[str, Any], Any]:
    """Small realistic content and metadata for one message of ``topic``."""
    if topic == "VALIDATION_RESULT":
        return {"text": text, "data": {"approved": rng.random() < 0.7, "errors": []}}, None
    if topic == "TOKEN_USAGE":
        data = {"inputTokens": rng.randint(100, 90_000), "outputTokens": rng.randint(10, 8_000)}
        return {"text": text, "data": data}, None
    if topic == "AGENT_LIFECYCLE":
        return {"text": text}, {"replayPolicy": "context"}
    return {"text": text}, None


def make_drafts(count: int, seed: int) -> list[Any]:
    """Drafts as an agent would publish them: no ids, no timestamps, no idempotency keys."""
    from ledger.services import MessageDraft

    rng = random.Random(seed)
    topics, texts = topic_pool(), text_pool(rng)
    drafts = []
    for _ in range(count):
        topic = rng.choice(topics)
        content, metadata = content_for(topic, rng.choice(texts), rng)
        sender = rng.choice(SENDERS)
        drafts.append(MessageDraft(topic=topic, sender=sender, content=content, metadata=metadata))
    return drafts


def bulk_rows(
    cluster_id: str, count: int, *, start_ms: int, seed: int, last_query_topic: list[int]
) -> Iterator[tuple[Any, ...]]:
    """Valid ``ledger_message`` rows for a raw fill; records the query topic's sequences."""
    from ledger.interfaces import replay_allowed

    rng = random.Random(seed)
    topics = topic_pool()
    # JSON text as Django's JSONField stores it (json.dumps defaults), drawn from a pool:
    # generating a million rows must cost less than writing them.
    contents = {}
    for topic in set(topics):
        pool = []
        for text in text_pool(rng, 256):
            content, metadata = content_for(topic, text, rng)
            pool.append(
                (
                    json.dumps(content),
                    None if metadata is None else json.dumps(metadata),
                    replay_allowed(topic=topic, content=content, metadata=metadata),
                )
            )
        contents[topic] = pool
    for sequence in range(1, count + 1):
        topic = topics[rng.getrandbits(16) % len(topics)]
        content, metadata, replayable = contents[topic][rng.getrandbits(8)]
        if topic == QUERY_TOPIC:
            last_query_topic.append(sequence)
            del last_query_topic[:-5]
        yield (
            cluster_id,
            f"msg_{cluster_id}_{sequence:09d}",
            sequence,
            start_ms + sequence - 1,
            topic,
            SENDERS[rng.getrandbits(8) % len(SENDERS)],
            "broadcast",
            content,
            metadata,
            replayable,
            None,
            "",
        )


# --- measurements ---------------------------------------------------------------------------


def clock(fn: Callable[[], object]) -> int:
    started = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - started


def rate(count: int, nanos: int) -> float:
    return count / (nanos / 1e9)


def percentile(sorted_values: Sequence[int], q: float) -> int:
    """Nearest-rank percentile."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def publish_single(cluster_id: str, drafts: Sequence[Any]) -> None:
    from ledger.services import message_publish

    for draft in drafts:
        message_publish(cluster_id=cluster_id, draft=draft)


def publish_batches(cluster_id: str, drafts: Sequence[Any], size: int) -> None:
    from ledger.services import message_publish_batch

    for start in range(0, len(drafts), size):
        message_publish_batch(cluster_id=cluster_id, drafts=drafts[start : start + size])


def stored_rows(cluster_id: str) -> list[tuple[Any, ...]]:
    """The rows Django stored for a cluster, exactly as they are in the table."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM ledger_message "
            "WHERE cluster_id = %s ORDER BY sequence",
            [cluster_id],
        )
        return list(cursor.fetchall())


def raw_schema(source: sqlite3.Connection) -> list[str]:
    """The CREATE statements of Django's cluster and message tables, all their indexes, and the
    full-text search table with the view and triggers that keep it (ledger/search.py)."""
    rows = source.execute(
        "SELECT sql FROM sqlite_master WHERE tbl_name IN "
        "('ledger_cluster', 'ledger_message', 'ledger_message_search', 'ledger_message_text') "
        "AND sql IS NOT NULL "
        # FTS5 creates its own shadow tables (ledger_message_search_data, …).
        "AND NOT (type = 'table' AND name LIKE 'ledger\\_message\\_search\\_%' ESCAPE '\\') "
        "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'view' THEN 1 WHEN 'index' THEN 2 ELSE 3 END, "
        "name"
    ).fetchall()
    return [sql for (sql,) in rows]


def raw_insert(
    workdir: Path,
    name: str,
    schema: Sequence[str],
    clusters: Sequence[tuple[Any, ...]],
    rows: Sequence[tuple[Any, ...]],
    per_transaction: int,
) -> int:
    """Insert ``rows`` into a fresh copy of the schema; returns the nanoseconds it took."""
    path = workdir / f"raw-{name}.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = raw_connect(path)
    try:
        for sql in schema:
            conn.execute(sql)
        conn.executemany(
            f"INSERT INTO ledger_cluster VALUES ({', '.join('?' for _ in clusters[0])})", clusters
        )
        started = time.perf_counter_ns()
        for start in range(0, len(rows), per_transaction):
            conn.execute("BEGIN IMMEDIATE")  # as Django's transaction_mode="IMMEDIATE"
            conn.executemany(INSERT_SQL, rows[start : start + per_transaction])
            conn.execute("COMMIT")
        return time.perf_counter_ns() - started
    finally:
        conn.close()


def raw_rate(
    workdir: Path,
    name: str,
    schema: Sequence[str],
    clusters: Sequence[tuple[Any, ...]],
    rows: Sequence[tuple[Any, ...]],
    per_transaction: int,
) -> dict[str, Any]:
    """Median of three timed runs, after one untimed run to warm the page cache and code."""
    raw_insert(workdir, name, schema, clusters, rows, per_transaction)
    runs = sorted(
        raw_insert(workdir, name, schema, clusters, rows, per_transaction) for _ in range(3)
    )
    return {
        "messages": len(rows),
        "per_transaction": per_transaction,
        "seconds": runs[1] / 1e9,
        "messages_per_second": rate(len(rows), runs[1]),
    }


def measure_publish(sizes: Sizes, workdir: Path) -> dict[str, Any]:
    from django.db import connection

    from ledger.bus import bus
    from ledger.services import cluster_create

    for cluster_id in (
        "bench-warmup",
        "bench-single",
        "bench-batch",
        "bench-single-nopush",
        "bench-batch-nopush",
    ):
        cluster_create(cluster_id=cluster_id, created_at=1_770_000_000_000)
    # Warm up imports, the connection and the statement cache on a cluster we do not measure.
    warmup = make_drafts(2 * sizes.batch_size, seed=1)
    publish_single("bench-warmup", warmup[:50])
    publish_batches("bench-warmup", warmup, sizes.batch_size)

    single_drafts = make_drafts(sizes.single, seed=2)
    batch_drafts = make_drafts(sizes.batch, seed=3)
    single_ns = clock(lambda: publish_single("bench-single", single_drafts))
    batch_ns = clock(lambda: publish_batches("bench-batch", batch_drafts, sizes.batch_size))

    # Diagnostic: the same work without the live push to the channel layer after each commit.
    bus.push_enabled = False
    try:
        single_nopush_ns = clock(lambda: publish_single("bench-single-nopush", single_drafts))
        batch_nopush_ns = clock(
            lambda: publish_batches("bench-batch-nopush", batch_drafts, sizes.batch_size)
        )
    finally:
        bus.push_enabled = True

    single_rows, batch_rows = stored_rows("bench-single"), stored_rows("bench-batch")
    assert len(single_rows) == sizes.single
    assert len(batch_rows) == sizes.batch
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM ledger_cluster WHERE id IN ('bench-single', 'bench-batch')")
        clusters = list(cursor.fetchall())
    source = sqlite3.connect(db_path())
    try:
        schema = raw_schema(source)
    finally:
        source.close()

    raw_single = raw_rate(workdir, "single", schema, clusters, single_rows, 1)
    raw_batch = raw_rate(workdir, "batch", schema, clusters, batch_rows, sizes.batch_size)
    raw_ceiling = raw_rate(workdir, "ceiling", schema, clusters, batch_rows, len(batch_rows))

    def django_figures(count: int, nanos: int, raw: dict[str, Any]) -> dict[str, Any]:
        per_second = rate(count, nanos)
        return {
            "messages": count,
            "seconds": nanos / 1e9,
            "messages_per_second": per_second,
            "ratio_to_raw": per_second / raw["messages_per_second"],
            "ratio_to_raw_ceiling": per_second / raw_ceiling["messages_per_second"],
        }

    return {
        "single": django_figures(sizes.single, single_ns, raw_single),
        "batch": {
            "batch_size": sizes.batch_size,
            **django_figures(sizes.batch, batch_ns, raw_batch),
        },
        "raw_single": raw_single,
        "raw_batch": raw_batch,
        "raw_ceiling": raw_ceiling,
        "diagnostic_without_live_push": {
            "single": django_figures(sizes.single, single_nopush_ns, raw_single),
            "batch": django_figures(sizes.batch, batch_nopush_ns, raw_batch),
        },
    }


def fill_cluster(cluster_id: str, count: int, *, seed: int) -> dict[str, Any]:
    """Create a cluster through the service, then fill it with raw executemany (fast)."""
    from django.db import connection

    from ledger.services import cluster_create

    start_ms = 1_770_000_000_000
    cluster_create(cluster_id=cluster_id, created_at=start_ms)
    connection.close()  # the raw writer below must not wait behind Django's connection
    last_query_topic: list[int] = []
    conn = raw_connect(db_path())
    try:
        conn.execute("PRAGMA cache_size=-524288")  # 512 MiB: keep the index pages in memory
        rows = bulk_rows(
            cluster_id, count, start_ms=start_ms, seed=seed, last_query_topic=last_query_topic
        )
        started = time.perf_counter_ns()
        chunk = 100_000
        for _ in range(0, count, chunk):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(INSERT_SQL, (row for _, row in zip(range(chunk), rows, strict=False)))
            conn.execute("COMMIT")
        conn.execute(
            "UPDATE ledger_cluster SET last_sequence = ?, last_timestamp = ? WHERE id = ?",
            (count, start_ms + count - 1, cluster_id),
        )
        elapsed = time.perf_counter_ns() - started
        stored = conn.execute(
            "SELECT count(*) FROM ledger_message WHERE cluster_id = ?", (cluster_id,)
        ).fetchone()[0]
        assert stored == count, (stored, count)
    finally:
        conn.close()
    return {
        "messages": count,
        "fill_seconds": elapsed / 1e9,
        "fill_rows_per_second": rate(count, elapsed),
        "expected_latest": sorted(last_query_topic, reverse=True),
    }


def analyze() -> float:
    conn = raw_connect(db_path())
    try:
        started = time.perf_counter_ns()
        conn.execute("ANALYZE")
        # Fold the fill's WAL into the database so that reads do not search a large WAL.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return (time.perf_counter_ns() - started) / 1e9
    finally:
        conn.close()


def latest_five(cluster_id: str) -> list[Any]:
    from ledger.filters import MessageFilter
    from ledger.selectors import message_query

    return message_query(
        cluster_id=cluster_id, order="desc", limit=5, where=MessageFilter(topic=QUERY_TOPIC)
    )


def captured_sql(cluster_id: str) -> str:
    """The SQL that ``message_query`` runs, with its parameters quoted in by Django."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        latest_five(cluster_id)
    (query,) = captured.captured_queries
    return query["sql"]


def query_plan(sql: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        return [detail for *_, detail in cursor.fetchall()]


def latencies(clusters: dict[str, dict[str, Any]], reps: int) -> dict[str, dict[str, Any]]:
    """Time ``latest_five`` on each cluster, interleaved so that drift hits them alike."""
    for cluster_id, info in clusters.items():
        got = [record.sequence for record in latest_five(cluster_id)]
        assert got == info["expected_latest"], (cluster_id, got, info["expected_latest"])
        for _ in range(100):
            latest_five(cluster_id)
    timings: dict[str, list[int]] = {cluster_id: [] for cluster_id in clusters}
    for _ in range(reps):
        for cluster_id in clusters:
            started = time.perf_counter_ns()
            latest_five(cluster_id)
            timings[cluster_id].append(time.perf_counter_ns() - started)
    return {cluster_id: summarize(values) for cluster_id, values in timings.items()}


def raw_latencies(sqls: dict[str, str], reps: int) -> dict[str, dict[str, Any]]:
    """The same SQL through plain sqlite3: what the ORM adds on top of SQLite."""
    conn = raw_connect(db_path())
    try:
        timings: dict[str, list[int]] = {cluster_id: [] for cluster_id in sqls}
        for sql in sqls.values():
            for _ in range(100):
                conn.execute(sql).fetchall()
        for _ in range(reps):
            for cluster_id, sql in sqls.items():
                started = time.perf_counter_ns()
                conn.execute(sql).fetchall()
                timings[cluster_id].append(time.perf_counter_ns() - started)
    finally:
        conn.close()
    return {cluster_id: summarize(values) for cluster_id, values in timings.items()}


def summarize(values: list[int]) -> dict[str, Any]:
    values = sorted(values)
    return {
        "reps": len(values),
        "p50_us": percentile(values, 0.50) / 1000,
        "p95_us": percentile(values, 0.95) / 1000,
        "min_us": values[0] / 1000,
    }


def measure_query(sizes: Sizes) -> dict[str, Any]:
    big = fill_cluster("bench-big", sizes.big, seed=10)
    small = fill_cluster("bench-small", sizes.small, seed=11)
    analyze_seconds = analyze()
    clusters = {"bench-big": big, "bench-small": small}
    orm = latencies(clusters, sizes.query_reps)
    sqls = {cluster_id: captured_sql(cluster_id) for cluster_id in clusters}
    raw = raw_latencies(sqls, sizes.query_reps)
    plan = query_plan(sqls["bench-big"])
    assert query_plan(sqls["bench-small"]) == plan
    return {
        "query": f'message_query(cluster_id=..., topic="{QUERY_TOPIC}", order="desc", limit=5)',
        "sql": sqls["bench-big"],
        "query_plan": plan,
        "analyze_seconds": analyze_seconds,
        "big": {**big, "orm": orm["bench-big"], "raw_sql": raw["bench-big"]},
        "small": {**small, "orm": orm["bench-small"], "raw_sql": raw["bench-small"]},
        "ratio_big_to_small_p50": orm["bench-big"]["p50_us"] / orm["bench-small"]["p50_us"],
        "ratio_big_to_small_p95": orm["bench-big"]["p95_us"] / orm["bench-small"]["p95_us"],
        "raw_sql_ratio_big_to_small_p50": raw["bench-big"]["p50_us"] / raw["bench-small"]["p50_us"],
    }


# --- report ---------------------------------------------------------------------------------


def print_report(results: dict[str, Any]) -> None:
    publish, query = results["publish"], results["query"]
    print(
        f"\nLedger benchmark ({results['mode']}), SQLite {results['environment']['sqlite']}, "
        "WAL, synchronous=NORMAL"
    )
    batch_label = f"message_publish_batch ({publish['batch']['batch_size']}/txn)"
    nopush = publish["diagnostic_without_live_push"]
    rows = (
        ("message_publish (1/txn)", publish["single"], publish["raw_single"]),
        (batch_label, publish["batch"], publish["raw_batch"]),
        ("raw executemany, 1 txn for all", publish["raw_ceiling"], None),
        ("diagnostic, no live push: single", nopush["single"], publish["raw_single"]),
        ("diagnostic, no live push: batch", nopush["batch"], publish["raw_batch"]),
    )
    print(f"\n{'Publish throughput':<34}messages   seconds      msg/s   raw msg/s   django/raw")
    for label, row, raw in rows:
        line = f"{label:<34}{row['messages']:>8,}{row['seconds']:>10.2f}"
        line += f"{row['messages_per_second']:>11,.0f}"
        if raw is None:
            line += "   (the raw ceiling)"
        else:
            line += f"{raw['messages_per_second']:>12,.0f}{row['ratio_to_raw']:>13.3f}"
        print(line)

    print(f"\nQuery latency: {query['query']}")
    print("cluster          messages   p50 µs   p95 µs   raw SQL p50 µs   fill s")
    for key in ("big", "small"):
        row = query[key]
        print(
            f"{key:<12}{row['messages']:>13,}{row['orm']['p50_us']:>9.0f}"
            f"{row['orm']['p95_us']:>9.0f}{row['raw_sql']['p50_us']:>17.1f}"
            f"{row['fill_seconds']:>9.1f}"
        )
    print(
        f"big/small ratio: p50 {query['ratio_big_to_small_p50']:.2f}, "
        f"p95 {query['ratio_big_to_small_p95']:.2f}, "
        f"raw SQL p50 {query['raw_sql_ratio_big_to_small_p50']:.2f}"
    )
    print("EXPLAIN QUERY PLAN:")
    for line in query["query_plan"]:
        print(f"  {line}")
    print(f"\nwritten to {RESULTS_PATH.relative_to(ROOT)} in {results['total_seconds']:.0f}s")


def environment() -> dict[str, Any]:
    import django

    return {
        "python": platform.python_version(),
        "django": django.get_version(),
        "sqlite": sqlite3.sqlite_version,
        "machine": platform.machine(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run: {QUICK.big:,} messages in the big cluster",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary database")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL

    started = time.perf_counter_ns()
    workdir = Path(tempfile.mkdtemp(prefix="zeroshot-ledger-bench-"))
    try:
        django_setup(workdir)
        publish = measure_publish(sizes, workdir)
        query = measure_query(sizes)
        results = {
            "benchmark": "ledger",
            "mode": "quick" if args.quick else "full",
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "environment": environment(),
            "sizes": {
                "single": sizes.single,
                "batch": sizes.batch,
                "batch_size": sizes.batch_size,
                "big": sizes.big,
                "small": sizes.small,
                "query_reps": sizes.query_reps,
            },
            "publish": publish,
            "query": query,
            "total_seconds": (time.perf_counter_ns() - started) / 1e9,
        }
        RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_PATH.write_text(json.dumps(results, indent=2) + "\n")
        print_report(results)
    finally:
        if args.keep:
            print(f"database kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
