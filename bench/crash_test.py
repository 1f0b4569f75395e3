"""Crash test: publishers against the server while it is killed with SIGKILL and restarted.

Usage::

    .venv/bin/python bench/crash_test.py                      # SQLite, a fresh file
    .venv/bin/python bench/crash_test.py --database postgres  # a fresh PostgreSQL database
        [--postgres-url postgres://postgres@127.0.0.1:5432/postgres] [--kills 3] [--clients 4]

The server is the image's command (the Dockerfile's CMD, uvicorn) on a free port of the loopback.
Not part of the test suite (see bench/README.md). Clients publish singles and batches over HTTP
with their own message ids and idempotency keys; a request that fails (the server died under
it) is retried with the same body until it is acknowledged, as an agent would retry. Meanwhile
the server is killed ``--kills`` times with SIGKILL and restarted. Afterwards the ledger is read
back and checked:

- every acknowledged message is stored exactly once, at the sequence and with the timestamp
  its acknowledgement gave;
- sequences run 1..N without a gap, and the cluster's own counter says N;
- every batch is whole and consecutive (sequences +1, timestamps +1 ms), never partial;
- nothing is stored that no client sent.

Traffic goes only to 127.0.0.1; every loop is bounded in count and time. Figures go to
``bench/results/crash-<database>.json``.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "bench" / "results"
CLUSTER = "crash-test"
TOPIC = "CRASH_PROBE"  # no stage of the pipeline reacts to it
SECRET = "bench-only-key-of-a-throwaway-database"
# Bounds: no request loop runs longer than this, whatever happens to the server.
MAX_RUN_SECONDS = 600
RETRY_PAUSE = 0.05


@dataclass
class Request:
    """One publish as a client sends it (and resends it, unchanged, until acknowledged)."""

    path: str
    body: dict[str, Any]
    ids: list[str]
    acked: list[dict[str, Any]] | None = None
    attempts: int = 0


@dataclass
class ClientStats:
    requests: list[Request] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_argv(port: int) -> list[str]:
    """The Dockerfile's CMD (its exec form) on ``port`` of the loopback, run by this Python."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith("CMD ")]
    program, *argv = json.loads(line[len("CMD ") :])
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    return [sys.executable, "-m", program, *argv]


class Server:
    """The production server in a subprocess over the test's database; killed with SIGKILL,
    started again."""

    def __init__(self, env: dict[str, str], port: int, log: Path) -> None:
        self.env, self.port, self.log = env, port, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        began = time.monotonic()
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                server_argv(self.port),
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = began + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited early; see {self.log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return time.monotonic() - began
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"the server did not listen on {self.port}; see {self.log}")

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def client_loop(
    *,
    number: int,
    port: int,
    key: str,
    stop: threading.Event,
    stats: ClientStats,
    seed: int,
    deadline: float,
    plain_singles: bool = False,
) -> None:
    """Publish singles and batches until ``stop``; each request is retried until acknowledged.
    With ``plain_singles`` a single carries neither id nor idempotency key (the server numbers
    and names it); its text still names it for the check."""
    rng = random.Random(seed)
    conn: http.client.HTTPConnection | None = None
    sent = 0
    while not stop.is_set() and time.monotonic() < deadline:
        size = 1 if rng.random() < 0.5 else rng.randint(2, 25)
        ids = [f"c{number}-m{sent + i}" for i in range(size)]
        sent += size
        messages = [
            {
                "topic": TOPIC,
                "sender": f"client-{number}",
                "id": message_id,
                "idempotency_key": message_id,
                "content": {"text": f"probe {message_id}", "data": {"n": i}},
            }
            for i, message_id in enumerate(ids)
        ]
        if size == 1:
            if plain_singles:
                del messages[0]["id"], messages[0]["idempotency_key"]
            request = Request(f"/api/v1/clusters/{CLUSTER}/messages", messages[0], ids)
        else:
            request = Request(
                f"/api/v1/clusters/{CLUSTER}/messages/batch", {"messages": messages}, ids
            )
        stats.requests.append(request)
        # Once sent, a request is finished even after ``stop``: an agent never gives up on a
        # message it may have published.
        while request.acked is None and time.monotonic() < deadline:
            request.attempts += 1
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
                conn.request(
                    "POST",
                    request.path,
                    body=json.dumps(request.body),
                    headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                )
                response = conn.getresponse()
                payload = response.read()
                if response.status == 201:
                    answer = json.loads(payload)
                    request.acked = answer if isinstance(answer, list) else [answer]
                else:
                    stats.errors[f"http {response.status}"] += 1
                    time.sleep(RETRY_PAUSE)
            except (OSError, http.client.HTTPException) as error:
                stats.errors[type(error).__name__] += 1
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(RETRY_PAUSE)
    if conn is not None:
        conn.close()


def check_ledger(requests: list[Request]) -> dict[str, Any]:
    """Read the cluster back and compare it with what the clients were told."""
    from ledger.models import Cluster, Message

    rows = list(
        Message.objects.filter(cluster_id=CLUSTER)
        .order_by("sequence")
        .values_list("content", "sequence", "timestamp")
    )
    # Every message's text names the client's id for it, given to the server or not.
    by_id: dict[str, list[tuple[int, int]]] = {}
    for content, sequence, timestamp in rows:
        by_id.setdefault(content["text"].removeprefix("probe "), []).append((sequence, timestamp))
    sequences = [sequence for _, sequence, _ in rows]
    cluster = Cluster.objects.get(pk=CLUSTER)

    acked = [r for r in requests if r.acked is not None]
    sent_ids = {message_id for r in requests for message_id in r.ids}
    lost = duplicated = misplaced = retried_twice_stored = 0
    for request in acked:
        assert request.acked is not None
        keyless = "idempotency_key" not in request.body and len(request.ids) == 1
        for message_id, wire in zip(request.ids, request.acked, strict=True):
            stored = by_id.get(message_id, [])
            place = (int(wire["sequence"]), wire["timestamp"])
            if not stored:
                lost += 1
            elif keyless and place in stored and len(stored) <= request.attempts:
                # Without a key, a retry after a commit whose answer the kill cut off stores
                # the message again (SPEC §1.1); each stored copy came from an attempt.
                retried_twice_stored += len(stored) - 1
            elif len(stored) > 1:
                duplicated += 1
            elif stored[0] != place:
                misplaced += 1
    partial = broken_batches = 0
    for request in requests:
        present = [message_id in by_id for message_id in request.ids]
        if any(present) and not all(present):
            partial += 1
        if all(present) and len(request.ids) > 1:
            places = [by_id[message_id][0] for message_id in request.ids]
            steps = {(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(places)}
            if steps != {(1, 1)}:
                broken_batches += 1
    return {
        "requests": len(requests),
        "requests_acked": len(acked),
        "singles_acked": sum(1 for r in acked if len(r.ids) == 1),
        "batches_acked": sum(1 for r in acked if len(r.ids) > 1),
        "messages_acked": sum(len(r.ids) for r in acked),
        "messages_stored": len(rows),
        "lost": lost,
        "duplicated": duplicated,
        "stored_again_by_a_retry_without_key": retried_twice_stored,
        "misplaced": misplaced,
        "partial_batches": partial,
        "batches_not_consecutive": broken_batches,
        "stored_but_never_sent": len(set(by_id) - sent_ids),
        "gapless": sequences == list(range(1, len(sequences) + 1)),
        "cluster_counter_matches": cluster.last_sequence == len(sequences),
        "retried_requests": sum(1 for r in requests if r.attempts > 1),
    }


def prepare_database(args: argparse.Namespace, workdir: Path) -> tuple[str, str | None]:
    """The DATABASE_URL of a fresh database, and the PostgreSQL one to drop afterwards."""
    if args.database == "sqlite":
        return f"sqlite:///{workdir / 'crash.sqlite3'}", None
    import psycopg

    name = args.database_name or f"crash_test_{os.getpid()}"
    with psycopg.connect(args.postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    base = args.postgres_url.rsplit("/", 1)[0]
    return f"{base}/{name}", name


def drop_database(args: argparse.Namespace, name: str) -> None:
    import psycopg

    with psycopg.connect(args.postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--postgres-url",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a database to connect to while creating and dropping the test's own",
    )
    parser.add_argument(
        "--database-name",
        help="the PostgreSQL database the run creates afresh (dropped first) and drops at the "
        "end; default crash_test_<pid>",
    )
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds-between-kills", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument(
        "--plain-singles",
        action="store_true",
        help="singles without id or idempotency key (the server's one-statement publish)",
    )
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="zeroshot-crash-"))
    database_url, pg_name = prepare_database(args, workdir)
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ZEROSHOT_DATA_DIR": str(workdir),
        "DJANGO_SETTINGS_MODULE": "zeroshot_web.settings",
        "DJANGO_SECRET_KEY": SECRET,
        "DJANGO_DEBUG": "0",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "API_RATE_LIMIT": "",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("REDIS_URL", None)
    # This process sets the database up and reads it back afterwards, with the same settings.
    for name in ("DATABASE_URL", "ZEROSHOT_DATA_DIR", "DJANGO_SETTINGS_MODULE"):
        os.environ[name] = env[name]
    os.environ.update(DJANGO_SECRET_KEY=SECRET, DJANGO_DEBUG="0")
    os.environ.pop("REDIS_URL", None)
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    from ledger.keys import api_key_create
    from ledger.services import cluster_create

    cluster_create(cluster_id=CLUSTER)
    key = api_key_create(name="crash-test")[1]

    server = Server(env, free_port(), workdir / "server.log")
    rng = random.Random(args.seed)
    stop = threading.Event()
    started = time.monotonic()
    deadline = started + MAX_RUN_SECONDS
    stats = [ClientStats() for _ in range(args.clients)]
    restarts: list[float] = []
    try:
        server.start()
        threads = [
            threading.Thread(
                target=client_loop,
                kwargs={
                    "number": n,
                    "port": server.port,
                    "key": key,
                    "stop": stop,
                    "stats": stats[n],
                    "seed": args.seed * 100 + n,
                    "deadline": deadline,
                    "plain_singles": args.plain_singles,
                },
                daemon=True,
            )
            for n in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        for _ in range(args.kills):
            time.sleep(args.seconds_between_kills * rng.uniform(0.6, 1.4))
            server.kill()
            time.sleep(rng.uniform(0.1, 1.0))
            restarts.append(server.start())
        time.sleep(args.seconds_between_kills)
        stop.set()
        for thread in threads:
            thread.join(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        stop.set()
        server.stop()
    requests = [request for s in stats for request in s.requests]
    figures = check_ledger(requests)
    errors: Counter[str] = Counter()
    for s in stats:
        errors.update(s.errors)
    results = {
        "database": args.database,
        "kills": args.kills,
        "clients": args.clients,
        "seconds": round(time.monotonic() - started, 1),
        "restart_seconds": [round(r, 2) for r in restarts],
        "client_errors": dict(errors),
        **figures,
    }
    if pg_name is not None:
        from django.db import connections

        connections.close_all()
        drop_database(args, pg_name)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    suffix = "-plain-singles" if args.plain_singles else ""
    (RESULTS_DIR / f"crash-{args.database}{suffix}.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    clean = (
        figures["lost"] == figures["duplicated"] == figures["misplaced"] == 0
        and figures["partial_batches"] == figures["batches_not_consecutive"] == 0
        and figures["stored_but_never_sent"] == 0
        and figures["gapless"]
        and figures["cluster_counter_matches"]
        and all(r.acked is not None for r in requests)
    )
    print("PASS" if clean else "FAIL")
    sys.exit(0 if clean else 1)


if __name__ == "__main__":
    main()
