"""Server CPU of one pushed websocket frame written to one socket, by server and checkout.

Usage::

    .venv/bin/python bench/ws_write_cost.py \
        --servers uvicorn,uvicorn-websockets,uvicorn-wsproto --trees before=/tmp/old,after=.

``cpu_profile.py``'s push paths publish one message at a time, so the frames' CPU is the small
difference of two larger figures (publishes with sockets open and without). Here an agent
publishes batches (``--batches`` of ``--batch`` messages, a frame each on every agent's stream),
once with ``--sockets`` streams open (opened before the CPU window, so the handshakes are not in
it) and once with none; the difference over messages x sockets is the CPU of one frame's way
from the fan-out to the socket (the consumer, the ASGI send, the server's websocket layer, the
kernel's write), with little else in it. Each server is the production uvicorn command of
``cpu_profile.py`` (``uvicorn-websockets``, ``uvicorn-wsproto``: its other ``--ws`` choices) on
SQLite. Prints a table; with ``--out``, writes it there too.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_profile as cp  # a sibling script: the servers, the CPU window
import perf_http as ph


def publish_batches(server: cp.BenchServer, batches: int, batch: int, seed: int) -> list[int]:
    """Publish ``batches`` batches of ``batch`` marked messages; their markers, in order."""
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {server.key}"}
    markers: list[int] = []
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
        for b in range(batches):
            bodies = []
            for n in range(batch):
                marker = seed * 10_000 + b * batch + n
                markers.append(marker)
                bodies.append(ph.message_body(rng, ph.PLAIN_TOPIC, marker=f"mk{marker:06d}x"))
            http.post(
                "/api/v1/clusters/c-ws/messages/batch", json={"messages": bodies}
            ).raise_for_status()
    return markers


def one_round(
    server: cp.BenchServer, sockets: int, batches: int, batch: int, seed: int
) -> dict[str, float]:
    messages = batches * batch
    idle = cp.measured(server, lambda: len(publish_batches(server, batches, batch, 2 * seed)))
    with ph.Listeners(server, "c-ws", sockets, agents=True) as listeners:

        def load() -> int:
            markers = publish_batches(server, batches, batch, 2 * seed + 1)
            deadline = time.monotonic() + 60
            while len(listeners.arrivals(markers[-1])) < sockets:
                if time.monotonic() > deadline:
                    raise RuntimeError("the last frame did not reach every socket")
                time.sleep(0.02)
            return len(markers)

        busy = cp.measured(server, load)
        if listeners.failure is not None:
            raise RuntimeError(f"a stream failed: {listeners.failure!r}")
    extra = busy["server_cpu_s"] - idle["server_cpu_s"]
    return {
        "us_per_frame": 1e6 * extra / (messages * sockets),
        "cpu_with_s": busy["server_cpu_s"],
        "cpu_without_s": idle["server_cpu_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="uvicorn,uvicorn-websockets,uvicorn-wsproto")
    parser.add_argument("--trees", help="label=DIR,...: serve each checkout in turn")
    parser.add_argument("--sockets", type=int, default=100)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()
    trees: list[tuple[str, Path]] = [("", cp.ROOT)]
    if args.trees:
        trees = [
            (label, Path(folder).resolve())
            for label, _, folder in (item.partition("=") for item in args.trees.split(","))
        ]
    rows: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="ws-write-") as tmp:
        # Rounds go around the servers, so that a busy minute of the machine hits them alike.
        servers: dict[str, cp.BenchServer] = {}
        try:
            for label, root in trees:
                for kind in args.servers.split(","):
                    key = f"{kind} ({label})" if label else kind
                    name = f"{kind}_{label}" if label else kind
                    url = f"sqlite:///{Path(tmp) / f'{name}.sqlite3'}"
                    server = cp.BenchServer(kind, Path(tmp) / name, url, None, root)
                    server.prepare(["c-ws"])
                    servers[key] = server.start()
            for n in range(args.rounds):
                for key, server in servers.items():
                    row = one_round(server, args.sockets, args.batches, args.batch, n + 1)
                    rows.setdefault(key, []).append(row)
                    print(f"{key} round {n + 1}: {row['us_per_frame']:.1f} µs", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    lines = [
        f"`bench/ws_write_cost.py {' '.join(sys.argv[1:])}` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}): {args.sockets} agents' "
        f"streams, {args.batches} batches of {args.batch} messages; server CPU per frame per "
        "socket, median [min..max] of the rounds.",
        "",
        "| server | µs per frame per socket | server CPU with / without sockets, s |",
        "| --- | --- | --- |",
    ]
    for key, results in rows.items():
        cost = [r["us_per_frame"] for r in results]
        with_s = statistics.median(r["cpu_with_s"] for r in results)
        without_s = statistics.median(r["cpu_without_s"] for r in results)
        lines.append(
            f"| {key} | {statistics.median(cost):.1f} [{min(cost):.1f}..{max(cost):.1f}] | "
            f"{with_s:.2f} / {without_s:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
