"""Context build latency on clusters of 10,000 and 1,000,000 messages, side by side.

Usage: ``.venv/bin/python bench/context_bench.py [--quick]`` (see bench/README.md).

A recorded build for the ``worker`` agent of our worker-validator template (four sources:
ISSUE_OPENED, STATE_SNAPSHOT, IMPLEMENTATION_READY latest 1, VALIDATION_RESULT latest 3 since the
worker's last TASK_COMPLETED) is timed on both clusters, alternating, and its time is split into
SQL execution, the pure core (packs, budget, guard, metrics) and the rest (ORM, Python glue).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ledger_bench as lb  # a sibling script: its fast filler and setup

RESULTS_PATH = lb.ROOT / "bench" / "results" / "context.json"


class Timers:
    """Accumulates nanoseconds spent in SQL and in the pure core during one build."""

    def __init__(self) -> None:
        self.sql = 0
        self.core = 0

    def sql_wrapper(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        started = time.perf_counter_ns()
        try:
            return execute(sql, params, many, context)
        finally:
            self.sql += time.perf_counter_ns() - started

    def wrap_core(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.core += time.perf_counter_ns() - started

        return timed


def make_cluster(cluster_id: str, count: int, agents: list[dict[str, Any]]) -> None:
    """A worker-validator cluster: a raw bulk fill, then the anchors a real run has."""
    from ledger.interfaces import ImportedMessage, message_import_batch
    from ledger.models import Cluster

    lb.fill_cluster(cluster_id, count, seed=7)
    Cluster.objects.filter(pk=cluster_id).update(
        config={"agents": agents}, template="worker-validator"
    )
    base = 1_770_000_000_000 + count
    anchors = [
        ("ISSUE_OPENED", "system", {"text": "# Add a login button\n\nIt goes in the header."}),
        (
            "STATE_SNAPSHOT",
            "state-snapshotter",
            {"text": "Task: Add a login button", "data": {"version": 1}},
        ),
        (
            "AGENT_LIFECYCLE",
            "worker",
            {"text": "worker: TASK_COMPLETED", "data": {"event": "TASK_COMPLETED"}},
        ),
        ("VALIDATION_RESULT", "validator", {"text": "Missing tests", "data": {"approved": False}}),
        ("IMPLEMENTATION_READY", "worker", {"text": "Button added"}),
    ]
    message_import_batch(
        cluster_id=cluster_id,
        messages=[
            ImportedMessage(f"anchor-{i}", base + i, topic, sender, "broadcast", content, None)
            for i, (topic, sender, content) in enumerate(anchors)
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 instead of 1,000,000")
    parser.add_argument("--builds", type=int, default=300)
    args = parser.parse_args()
    big = 100_000 if args.quick else 1_000_000
    small = 10_000

    with tempfile.TemporaryDirectory(prefix="zeroshot-context-bench-") as tmp:
        lb.django_setup(Path(tmp))
        from django.db import connection

        import context.services.builds as services
        from context.cluster_templates import template_builtin_list, template_resolve
        from ledger.bus import bus

        bus.push_enabled = False  # no live clients here; measure the build itself
        template = template_builtin_list()["worker-validator"]
        agents = template_resolve(template, {})["agents"]
        make_cluster("small", small, agents)
        make_cluster("big", big, agents)
        lb.analyze()

        timers = Timers()
        for name in ("build_packs", "budget_select", "build_metrics"):
            setattr(services, name, timers.wrap_core(getattr(services, name)))

        samples: dict[str, list[tuple[int, int, int]]] = {"small": [], "big": []}
        with connection.execute_wrapper(timers.sql_wrapper):
            for _ in range(20):  # warm-up
                for cid in samples:
                    services.context_build(cluster_id=cid, agent_id="worker")
            for _ in range(args.builds):
                for cid, values in samples.items():
                    timers.sql = timers.core = 0
                    started = time.perf_counter_ns()
                    outcome = services.context_build(cluster_id=cid, agent_id="worker")
                    total = time.perf_counter_ns() - started
                    assert "Missing tests" in outcome.context
                    values.append((total, timers.sql, timers.core))

    report: dict[str, Any] = {"messages": {"small": small, "big": big}, "builds": args.builds}
    for cid, values in samples.items():
        totals = sorted(v[0] for v in values)
        all_total = sum(v[0] for v in values)
        report[cid] = {
            "p50_ms": lb.percentile(totals, 0.50) / 1e6,
            "p95_ms": lb.percentile(totals, 0.95) / 1e6,
            "share_sql": sum(v[1] for v in values) / all_total,
            "share_pure_core": sum(v[2] for v in values) / all_total,
        }
        report[cid]["share_orm_and_glue"] = (
            1 - report[cid]["share_sql"] - report[cid]["share_pure_core"]
        )
    report["ratio_p50_big_over_small"] = report["big"]["p50_ms"] / report["small"]["p50_ms"]
    report["ratio_p95_big_over_small"] = report["big"]["p95_ms"] / report["small"]["p95_ms"]

    print(f"recorded build, worker of worker-validator, {args.builds} builds per cluster")
    print(
        f"{'cluster':>10} {'messages':>10} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'SQL':>6} {'core':>6} {'ORM+glue':>9}"
    )
    for cid in ("small", "big"):
        r = report[cid]
        print(
            f"{cid:>10} {report['messages'][cid]:>10,} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} "
            f"{r['share_sql']:>6.0%} {r['share_pure_core']:>6.0%} {r['share_orm_and_glue']:>9.0%}"
        )
    print(
        f"big/small: p50 {report['ratio_p50_big_over_small']:.2f}, "
        f"p95 {report['ratio_p95_big_over_small']:.2f}"
    )
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_PATH.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
