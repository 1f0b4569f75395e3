"""Write a realistic zeroshot ledger of N messages, for the import benchmark.

Usage: ``python bench/make_zeroshot_ledger.py /tmp/bench/steady-falcon-7.db --clusters-json``
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path

# Run as a script from anywhere: the project is not an installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ledger.zeroshot import (
    ZeroshotCluster,
    ZeroshotMessage,
    create_ledger_schema,
    insert_messages,
    write_clusters_json,
)

AGENTS = [
    {"id": "planner", "role": "planning"},
    {"id": "worker", "role": "implementation"},
    {"id": "validator-requirements", "role": "validator"},
    {"id": "validator-code", "role": "validator"},
    {"id": "git-pusher", "role": "completion-detector"},
]
# Roughly the mix of a long zeroshot run: raw output dominates, control messages are rare.
TOPIC_WEIGHTS = [
    ("AGENT_OUTPUT", 80),
    ("AGENT_LIFECYCLE", 8),
    ("TOKEN_USAGE", 4),
    ("STATE_SNAPSHOT", 2),
    ("PLAN_READY", 1),
    ("IMPLEMENTATION_READY", 2),
    ("VALIDATION_RESULT", 2),
    ("CONTEXT_METRICS", 1),
]
PROSE = (
    "the plan adds a login button to the header and wires it to the session endpoint "
    "tests cover the happy path and an expired token the validator asks for evidence"
)


def _messages(cluster_id: str, count: int, rng: random.Random) -> Iterator[ZeroshotMessage]:
    # Pools drawn once: generating a million messages should cost less than writing them.
    topics = [topic for topic, weight in TOPIC_WEIGHTS for _ in range(weight)]
    words = PROSE.split()
    texts = [" ".join(rng.choices(words, k=rng.randint(4, 40))) for _ in range(4096)]
    steps = (0, 1, 1, 2, 5, 40)
    timestamp = 1_770_000_000_000
    for rowid in range(1, count + 1):
        # zeroshot's clock never goes backwards, and a batch shares close or equal timestamps.
        timestamp += steps[rng.getrandbits(8) % len(steps)]
        topic = topics[rng.getrandbits(16) % len(topics)]
        agent = AGENTS[rng.getrandbits(8) % len(AGENTS)]
        text = texts[rng.getrandbits(12)]
        data: object = None
        metadata: object = None
        if topic == "AGENT_OUTPUT":
            data = {"line": text, "agent": agent["id"], "iteration": 1 + rowid % 5}
        elif topic == "TOKEN_USAGE":
            data = {
                "role": agent["role"],
                "inputTokens": rng.randint(100, 90_000),
                "outputTokens": rng.randint(10, 8_000),
                "totalCostUsd": round(rng.random() / 10, 6),
            }
        elif topic == "VALIDATION_RESULT":
            data = {"approved": rng.random() < 0.7, "errors": [], "summary": text[:80]}
        elif topic == "AGENT_LIFECYCLE":
            data = {"event": "TASK_STARTED", "agent": agent["id"], "role": agent["role"]}
            metadata = {"replayPolicy": "context"}
        yield ZeroshotMessage(
            rowid=rowid,
            id=f"msg_{rng.getrandbits(128):032x}",
            timestamp=timestamp,
            topic=topic,
            sender=agent["id"],
            receiver="system" if topic == "AGENT_LIFECYCLE" else "broadcast",
            content_text=text,
            content_data=data,
            metadata=metadata,
            cluster_id=cluster_id,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="the ledger file to create (<cluster-id>.db)")
    parser.add_argument("--count", type=int, default=1_000_000, help="messages (default 1000000)")
    parser.add_argument(
        "--clusters-json", action="store_true", help="also write clusters.json beside the ledger"
    )
    parser.add_argument("--seed", type=int, default=4, help="random seed (default 4)")
    args = parser.parse_args()

    path: Path = args.path
    if path.exists():
        parser.error(f"{path} already exists")
    path.parent.mkdir(parents=True, exist_ok=True)
    cluster_id = path.stem
    started = time.perf_counter()
    conn = sqlite3.connect(path)
    try:
        create_ledger_schema(conn, with_sequence_table=True)
        # A throwaway benchmark file: durability of each page write does not matter.
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-262144")
        written = insert_messages(
            conn, _messages(cluster_id, args.count, random.Random(args.seed)), chunk_size=20_000
        )
    finally:
        conn.close()
    if args.clusters_json:
        write_clusters_json(
            path.parent / "clusters.json",
            [
                ZeroshotCluster(
                    id=cluster_id,
                    config={"agents": AGENTS},
                    state="completed",
                    created_at=1_770_000_000_000,
                )
            ],
        )
    elapsed = time.perf_counter() - started
    size_mb = path.stat().st_size / 1_000_000
    print(f"wrote {written} messages to {path} ({size_mb:.1f} MB) in {elapsed:.1f}s")


if __name__ == "__main__":
    main()
