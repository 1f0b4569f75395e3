"""Search benchmark on SQLite: full-text search (SPEC §1.3 ``q``) over a million messages.

Usage: ``.venv/bin/python bench/search_bench.py [--quick] [--keep]`` (see bench/README.md).

Fills a cluster of 1,000,000 messages (quick: 100,000) and one of 10,000 with raw executemany
into the Django table, so that the search index is built by its triggers exactly as a publish
or an import builds it; the texts come from a Zipf-distributed vocabulary with four words
planted at known frequencies. Then times, per word, the cluster page's search
(``GET /clusters/<id>/?q=…``, the server's whole work through Django's test client), the API
(``GET /api/v1/clusters/<id>/messages?q=…``) and the selector alone. Writes
``bench/results/search.json`` and prints a table; never touches ``data/``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The repository (for the apps) and this folder (for the sibling script) on the path.
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
import ledger_bench as lb  # noqa: E402  (a sibling script: setup, raw connection, percentile)

RESULTS_PATH = lb.ROOT / "bench" / "results" / "search.json"
BIG, SMALL = "search-big", "search-small"
# Planted words and the share of messages that hold each; the vocabulary never makes them.
PLANTED = (("kestrel", 0.0001), ("idempotency", 0.001), ("timeout", 0.01), ("migration", 0.1))
SEARCHES = (
    ("kestrel", {}),
    ("idempotency", {}),
    ("timeout", {}),
    ("migration", {}),
    ("timeouts migrations", {}),  # two words, by stem
    ("timeout", {"topic": "VALIDATION_RESULT"}),  # a word and a rare topic
)
TOPICS = [topic for topic, weight in lb.TOPIC_WEIGHTS for _ in range(weight)]


@dataclass(frozen=True, slots=True)
class Sizes:
    big: int
    small: int
    reps: int
    warmup: int


FULL = Sizes(big=1_000_000, small=10_000, reps=200, warmup=20)
QUICK = Sizes(big=100_000, small=10_000, reps=60, warmup=10)


def vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    """Pronounceable made-up words (consonant-vowel syllables): none is a planted word."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.randint(2, 4)
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables)))
    return sorted(words)


def texts(rng: random.Random, pool: int = 8192) -> list[str]:
    """Message texts of 8-48 words, word frequencies following Zipf's law."""
    words = vocabulary(rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    return [" ".join(rng.choices(words, weights, k=rng.randint(8, 48))) for _ in range(pool)]


def rows(cluster_id: str, count: int, *, seed: int, start_ms: int) -> Iterator[tuple[Any, ...]]:
    rng = random.Random(seed)
    pool = texts(rng)
    for sequence in range(1, count + 1):
        text = pool[rng.getrandbits(13)]
        planted = [word for word, share in PLANTED if rng.random() < share]
        if planted:
            text = f"{text} {' '.join(planted)}"
        topic = TOPICS[rng.getrandbits(16) % len(TOPICS)]
        yield (
            cluster_id,
            f"msg_{cluster_id}_{sequence:09d}",
            sequence,
            start_ms + sequence - 1,
            topic,
            lb.SENDERS[rng.getrandbits(8) % len(lb.SENDERS)],
            "broadcast",
            json.dumps({"text": text}),
            None,
            topic != "AGENT_OUTPUT",
            None,
            "",
        )


def fill(cluster_id: str, count: int, *, seed: int) -> dict[str, Any]:
    """Create the cluster, then insert its rows raw; the search triggers index each row."""
    from django.db import connection

    from ledger.services import cluster_create

    start_ms = 1_770_000_000_000
    cluster_create(cluster_id=cluster_id, created_at=start_ms)
    connection.close()
    conn = lb.raw_connect(lb.db_path())
    try:
        conn.execute("PRAGMA cache_size=-524288")
        source = rows(cluster_id, count, seed=seed, start_ms=start_ms)
        started = time.perf_counter_ns()
        chunk = 50_000
        for _ in range(0, count, chunk):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(lb.INSERT_SQL, (r for _, r in zip(range(chunk), source, strict=False)))
            conn.execute("COMMIT")
        elapsed = time.perf_counter_ns() - started
        conn.execute(
            "UPDATE ledger_cluster SET last_sequence = ?, last_timestamp = ? WHERE id = ?",
            (count, start_ms + count - 1, cluster_id),
        )
        counts = {
            word: conn.execute(
                "SELECT count(*) FROM ledger_message_search WHERE ledger_message_search MATCH ?",
                (f'"{word}"*',),
            ).fetchone()[0]
            for word, _ in PLANTED
        }
    finally:
        conn.close()
    return {
        "messages": count,
        "fill_seconds": elapsed / 1e9,
        "rows_per_second_with_index": count / (elapsed / 1e9),
        "matches_per_word_all_clusters": counts,
    }


def timed(fn: Callable[[], Any], reps: int, warmup: int) -> dict[str, Any]:
    for _ in range(warmup):
        fn()
    values = []
    for _ in range(reps):
        started = time.perf_counter_ns()
        fn()
        values.append(time.perf_counter_ns() - started)
    values.sort()
    return {
        "p50_ms": lb.percentile(values, 0.5) / 1e6,
        "p95_ms": lb.percentile(values, 0.95) / 1e6,
        "min_ms": values[0] / 1e6,
        "reps": reps,
    }


def measure(sizes: Sizes) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from ledger.keys import api_key_create

    user = get_user_model().objects.create_user("bench-operator", is_staff=True)
    page = Client(HTTP_HOST="localhost")
    page.force_login(user)
    _, key = api_key_create(name="bench")
    api = Client(HTTP_HOST="localhost", headers={"Authorization": f"Bearer {key}"})

    results = [
        search_once(page, api, q, extra, size, cluster_id, sizes)
        for q, extra in SEARCHES
        for size, cluster_id in (("big", BIG), ("small", SMALL))
    ]
    return {"searches": results, "plan": query_plan()}


def search_once(
    page: Any, api: Any, q: str, extra: dict[str, str], size: str, cluster_id: str, sizes: Sizes
) -> dict[str, Any]:
    """One search on one cluster: checked once, its queries counted, then timed three ways."""
    from django.db import connection

    from ledger.filters import MessageFilter
    from ledger.selectors import message_search

    params = {"q": q, **extra}
    page_url = f"/clusters/{cluster_id}/"
    api_url = f"/api/v1/clusters/{cluster_id}/messages"
    api_params = {**params, "order": "desc", "limit": 100}
    first = page.get(page_url, params)
    assert first.status_code == 200, first.status_code
    html = first.content.decode()
    captured: list[str] = []

    def record(execute: Any, sql: str, sql_params: Any, many: bool, context: Any) -> Any:
        captured.append(sql)
        return execute(sql, sql_params, many, context)

    with connection.execute_wrapper(record):
        page.get(page_url, params)
    api_first = api.get(api_url, api_params)
    assert api_first.status_code == 200, api_first.content
    where = MessageFilter(q=q, topic=extra.get("topic"))
    hits, _ = message_search(cluster_id=cluster_id, where=where)
    return {
        "q": q,
        "filters": extra,
        "cluster": size,
        "rows_shown": html.count('<li class="msg" id="msg-'),
        "words_marked": html.count("<mark>"),
        "api_items": len(api_first.json()["items"]),
        "hits_first_page": len(hits),
        "page_queries": len(captured),
        "page": timed(lambda: page.get(page_url, params), sizes.reps, sizes.warmup),
        "api": timed(lambda: api.get(api_url, api_params), sizes.reps, sizes.warmup),
        "selector": timed(
            lambda: message_search(cluster_id=cluster_id, where=where), sizes.reps, sizes.warmup
        ),
    }


def query_plan() -> list[str]:
    """SQLite's plan for the page's search of one word in the big cluster."""
    from django.db import connection

    from ledger.filters import MessageFilter
    from ledger.models import Message
    from ledger.search import search_narrow

    found = search_narrow(
        Message.objects.filter(cluster_id=BIG),
        terms=MessageFilter(q="timeout").search_terms,
        cluster_id=BIG,
        newest_first=True,
        snippets=True,
    )[:101]
    sql, params = found.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return [row[3] for row in cursor.fetchall()]


def print_report(results: dict[str, Any]) -> None:
    print(
        f"\nSearch on SQLite {results['environment']['sqlite']}, big cluster: "
        f"{results['fill']['big']['messages']:,} messages "
        f"(filled with the index in {results['fill']['big']['fill_seconds']:.0f} s)"
    )
    shares = dict(PLANTED)
    header = f"{'q':<22}{'filter':<30}{'cluster':<8}{'share':>8}{'rows':>6}{'queries':>8}"
    header += f"{'page p50':>10}{'p95':>8}{'api p50':>9}{'sel p50':>9}"
    print(header)
    for r in results["searches"]:
        share = shares.get(r["q"])
        print(
            f"{r['q']:<22}{json.dumps(r['filters']) if r['filters'] else '':<30}{r['cluster']:<8}"
            f"{(f'{share:.2%}' if share else '—'):>8}{r['rows_shown']:>6}{r['page_queries']:>8}"
            f"{r['page']['p50_ms']:>9.1f}ms{r['page']['p95_ms']:>6.1f}ms"
            f"{r['api']['p50_ms']:>7.1f}ms{r['selector']['p50_ms']:>7.1f}ms"
        )
    print("\nEXPLAIN QUERY PLAN of the page's search:")
    for line in results["plan"]:
        print(f"  {line}")
    print(f"\nwritten to {RESULTS_PATH.relative_to(lb.ROOT)} in {results['total_seconds']:.0f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 messages in the big cluster")
    parser.add_argument("--keep", action="store_true", help="keep the temporary database")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    started = time.perf_counter_ns()
    workdir = Path(tempfile.mkdtemp(prefix="zeroshot-search-bench-"))
    try:
        lb.django_setup(workdir)
        filled = {
            "big": fill(BIG, sizes.big, seed=1),
            "small": fill(SMALL, sizes.small, seed=2),
        }
        lb.analyze()
        measured = measure(sizes)
        results = {
            "benchmark": "search",
            "mode": "quick" if args.quick else "full",
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "environment": lb.environment(),
            "planted": dict(PLANTED),
            "fill": filled,
            **measured,
            "total_seconds": (time.perf_counter_ns() - started) / 1e9,
        }
        RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_PATH.write_text(json.dumps(results, indent=2) + "\n")
        print_report(results)
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
