"""The cost of one logic-script evaluation, on ledger views of 1,000 and 10,000 messages.

Usage: ``.venv/bin/python bench/logic_bench.py [--quick]`` (see bench/README.md).

The view is filled like a zeroshot run (lifecycle and token-usage messages, an issue, plans,
implementations, validation results, snapshots; a few hundred bytes to a few kilobytes each).
Rows:
- ``worker trigger``: the worker's "a validator rejected" trigger of our worker-validator
  template (findLast + query since + per-validator latest), on the newest VALIDATION_RESULT,
  the view unchanged since the last evaluation (the sandbox worker already holds it);
- ``worker trigger, new msg``: the same after one more VALIDATION_RESULT was appended to the
  view, so the view's payload is built and sent again: what the first script evaluated for a
  newly offered message costs;
- ``sender check``: ``return message.sender === 'worker'``, which reads no ledger at all;
- ``hook logic``: zeroshot's worker hook logic (``result.completionStatus?.canValidate``);
- ``view payload``: appending one message and building the view's payload, in Python alone.
Each row is timed N times after a warm-up; p50 and p95 in milliseconds. Evaluations run in a
pooled sandbox process, so the first evaluation of the run (not timed) starts it.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runs.logic import (  # noqa: E402 - the path above makes the checkout importable
    AgentInfo,
    ClusterInfo,
    LedgerView,
    hook_logic_evaluate,
    trigger_logic_evaluate,
)

RESULTS_PATH = ROOT / "bench" / "results" / "logic.json"
TEMPLATE = ROOT / "context" / "builtin_templates" / "worker-validator.json"

# topic, sender, share of messages, text length
MIX = [
    ("AGENT_LIFECYCLE", "worker", 0.40, 120),
    ("TOKEN_USAGE", "worker", 0.20, 60),
    ("STATE_SNAPSHOT", "system", 0.10, 1500),
    ("IMPLEMENTATION_READY", "worker", 0.12, 1000),
    ("VALIDATION_RESULT", "validator", 0.12, 700),
    ("PLAN_READY", "planner", 0.05, 3000),
    ("ISSUE_OPENED", "system", 0.01, 2000),
]
WORDS = [
    "the",
    "worker",
    "changed",
    "files",
    "and",
    "the",
    "validator",
    "read",
    "them",
    "again",
    "before",
    "approving",
]


def make_messages(count: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    topics = [m[0] for m in MIX]
    weights = [m[2] for m in MIX]
    by_topic = {m[0]: m for m in MIX}
    messages = []
    timestamp = 1_760_000_000_000
    for sequence in range(1, count + 1):
        topic, sender, _, length = by_topic[rng.choices(topics, weights)[0]]
        timestamp += rng.randint(1, 4000)
        text = " ".join(rng.choice(WORDS) for _ in range(length // 6))
        data: dict[str, Any] = {"event": "TASK_COMPLETED", "agent": sender, "iteration": sequence}
        if topic == "VALIDATION_RESULT":
            data = {"approved": rng.random() < 0.5, "errors": [text[:120]] * 2}
        if topic == "IMPLEMENTATION_READY":
            data = {"completionStatus": {"canValidate": True, "percentComplete": 100}}
        messages.append(
            {
                "id": f"msg_{sequence:032x}",
                "sequence": str(sequence),
                "timestamp": timestamp,
                "cluster_id": "bench",
                "topic": topic,
                "sender": sender,
                "receiver": "broadcast",
                "content": {"text": text, "data": data},
                "metadata": None,
            }
        )
    # The offered message is the newest VALIDATION_RESULT.
    messages[-1].update(topic="VALIDATION_RESULT", sender="validator")
    messages[-1]["content"]["data"] = {"approved": False, "errors": ["a test fails"]}
    return messages


def rejections(after: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """More VALIDATION_RESULT rejections following ``after``, to grow a view one by one."""
    sequence, timestamp = int(after["sequence"]), int(after["timestamp"])
    return [
        {
            **after,
            "id": f"msg_{sequence + n:032x}",
            "sequence": str(sequence + n),
            "timestamp": timestamp + 1000 * n,
        }
        for n in range(1, count + 1)
    ]


def timed(fn: Callable[[], object], runs: int) -> dict[str, float]:
    for _ in range(max(3, runs // 20)):
        fn()
    samples = []
    for _ in range(runs):
        started = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - started) / 1e6)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 3),
        "p95_ms": round(samples[int(len(samples) * 0.95) - 1], 3),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    args = parser.parse_args()
    runs = 60 if args.quick else 400

    template = json.loads(TEMPLATE.read_text(encoding="utf-8"))
    worker = template["agents"][0]
    rejected = next(
        t
        for t in worker["triggers"]
        if t.get("action") != "stop_cluster" and t["topic"] == "VALIDATION_RESULT"
    )["logic"]["script"]
    cluster = ClusterInfo.of(id="bench", config=template)
    agent = AgentInfo(id="worker", role="implementation", iteration=3)
    hook_script = "if (!result.completionStatus?.canValidate) return { topic: 'WORKER_PROGRESS' };"

    results: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "rows": {},
    }
    for size in (1_000, 10_000):
        messages = make_messages(size)
        # The bound keeps the view at `size` messages while the "new msg" rows append to it.
        view = LedgerView(messages, max_messages=size)
        label = f"{size} messages ({view.size_bytes / 1e6:.2f} MB)"
        offered = messages[-1]
        outcome = trigger_logic_evaluate(rejected, message=offered, view=view, cluster=cluster)
        assert getattr(outcome, "passed", None) is True, outcome
        count = runs if size == 1_000 else max(20, runs // 4)
        warmup = max(3, count // 20)
        grown = iter(rejections(offered, 2 * (count + warmup)))

        def after_one_more(
            view: LedgerView = view, grown: Iterator[dict[str, Any]] = grown
        ) -> object:
            message = next(grown)
            view.append(message)
            return trigger_logic_evaluate(rejected, message=message, view=view, cluster=cluster)

        def payload_after_one_more(
            view: LedgerView = view, grown: Iterator[dict[str, Any]] = grown
        ) -> object:
            view.append(next(grown))
            return view.payload()

        rows = {
            "worker trigger": timed(
                lambda v=view, o=offered: trigger_logic_evaluate(
                    rejected, message=o, view=v, cluster=cluster
                ),
                count,
            ),
            "sender check": timed(
                lambda v=view, o=offered: trigger_logic_evaluate(
                    "return message.sender === 'worker';", message=o, view=v, cluster=cluster
                ),
                count,
            ),
            "hook logic": timed(
                lambda v=view, o=offered: hook_logic_evaluate(
                    hook_script,
                    result={"completionStatus": {"canValidate": False}},
                    agent=agent,
                    message=o,
                    view=v,
                    cluster=cluster,
                ),
                count,
            ),
            "worker trigger, new msg": timed(after_one_more, count),
            "view payload": timed(payload_after_one_more, count),
        }
        results["rows"][label] = rows

    print(f"{'view':<28} {'row':<24} {'p50 ms':>8} {'p95 ms':>8}")
    for view_name, rows in results["rows"].items():
        for row, figures in rows.items():
            print(f"{view_name:<28} {row:<24} {figures['p50_ms']:>8.2f} {figures['p95_ms']:>8.2f}")
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_PATH.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
