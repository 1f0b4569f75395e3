"""Stalled and failed clusters: ``runs.selectors.cluster_conditions`` over a large store.

Usage: ``.venv/bin/python bench/condition_bench.py [--clusters N] [--tasks-per-cluster M]``.

Fills a fresh SQLite store with N running clusters (one agent each, quiet for an hour), M
finished tasks each, a tenth of them with one task still open, and N/10 failed clusters with
their ``CLUSTER_FAILED``; then times the conditions of the whole list (what the cluster list
page reads, here every cluster rather than its newest 200) and of one cluster (what the
cluster page and the API read). Writes ``bench/results/condition.json``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ledger_bench as lb  # a sibling script: its setup

RESULTS_PATH = lb.ROOT / "bench" / "results" / "condition.json"
AGENT = {"id": "worker", "role": "implementation", "prompt": "Work.", "triggers": [{"topic": "GO"}]}


def fill(clusters: int, per_cluster: int) -> list[str]:
    from ledger.interfaces import (
        ImportedMessage,
        cluster_create,
        cluster_state_set,
        message_import_batch,
        now_ms,
    )
    from runs.models import Task

    hour_ago = now_ms() - 3_600_000
    ids: list[str] = []
    failed = clusters // 10
    for n in range(clusters + failed):
        cluster_id = f"c{n:05d}"
        ids.append(cluster_id)
        cluster_create(cluster_id=cluster_id, config={"agents": [AGENT]}, state="running")
        topics = ["GO"] + (["CLUSTER_FAILED"] if n >= clusters else [])
        message_import_batch(
            cluster_id=cluster_id,
            messages=[
                ImportedMessage(
                    id=f"msg_{secrets.token_hex(8)}",
                    timestamp=hour_ago + i,
                    topic=topic,
                    sender="system",
                    receiver="broadcast",
                    content={"text": "x", "data": {"reason": "critical_agent_failed"}},
                    metadata=None,
                )
                for i, topic in enumerate(topics)
            ],
        )
        rows = [
            Task(
                id=f"task_{secrets.token_hex(16)}",
                cluster_id=cluster_id,
                agent_id="worker",
                iteration=i + 1,
                state="queued" if (n % 10 == 0 and i == per_cluster - 1) else "completed",
                trigger_message_id=f"m{i}",
                trigger_topic="GO",
                trigger_sequence=1,
                created_at=hour_ago,
                available_at=hour_ago,
            )
            for i in range(per_cluster)
        ]
        Task.objects.bulk_create(rows, batch_size=2000)
        if n >= clusters:
            cluster_state_set(cluster_id=cluster_id, state="failed")
    return ids


def timed(fn: Any, reps: int) -> dict[str, Any]:
    values = []
    for _ in range(reps):
        started = time.perf_counter_ns()
        fn()
        values.append(time.perf_counter_ns() - started)
    values.sort()
    return {
        "p50_ms": round(values[len(values) // 2] / 1e6, 2),
        "p95_ms": round(values[int(len(values) * 0.95)] / 1e6, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--tasks-per-cluster", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zeroshot-condition-bench-") as tmp:
        lb.django_setup(Path(tmp))
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from ledger.interfaces import cluster_get, cluster_list
        from runs.selectors import cluster_conditions

        ids = fill(args.clusters, args.tasks_per_cluster)
        lb.analyze()
        clusters = cluster_list(limit=len(ids))
        with CaptureQueriesContext(connection) as queries:
            states = cluster_conditions(clusters)
        counted: dict[str, int] = {}
        for condition in states.values():
            counted[condition.state] = counted.get(condition.state, 0) + 1
        one = cluster_get(cluster_id=ids[1])
        report = {
            "clusters": len(clusters),
            "tasks": args.tasks_per_cluster * len(ids),
            "states": counted,
            "queries_for_the_list": len(queries),
            "list": timed(lambda: cluster_conditions(clusters), 20),
            "one_cluster": timed(lambda: cluster_conditions([one]), 200),
        }
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_PATH.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
