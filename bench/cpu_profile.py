"""Server CPU time per request on each hot path, and where it goes.

Usage::

    .venv/bin/python bench/cpu_profile.py                       # daphne, SQLite
    .venv/bin/python bench/cpu_profile.py \
        --database-url postgres://postgres@127.0.0.1:5432/bench_cpu \
        --redis-url redis://127.0.0.1:6379/8                    # and PostgreSQL (its own db)
    .venv/bin/python bench/cpu_profile.py --servers daphne,uvicorn,granian --only publish,push
    .venv/bin/python bench/cpu_profile.py --no-profile          # the CPU figures alone

A production-like server (``DJANGO_DEBUG=0``, ``API_RATE_LIMIT`` off unless ``--rate-limit``, a
database migrated with ``manage.py migrate``) runs in a subprocess (``perf_http.Server``). For
each hot path a load runs against it and the server process's own CPU time
(``/proc/<pid>/stat`` utime + stime, threads included) is divided by the requests it answered:
a figure that holds on a shared, loaded machine where throughput does not. Throughput is shown
beside it.

Paths: ``publish`` (8 keep-alive clients, single messages), ``batch`` (8 clients, 100 messages a
request), ``claim`` and ``complete`` (8 workers on a running cluster of 16 agents whose tasks
were queued by trigger messages; each claim records its context build, each completion runs its
hook and publishes its batch), ``page`` (the cluster page of a cluster of 150 messages: 100
rows, signed in), ``query`` (an agent's query of the same cluster's newest 20 messages, one
after the other), ``push`` (``--sockets`` cluster pages listening while one agent publishes:
the extra server CPU over the same publishes with no page open, per message and per socket;
the pages are opened before the CPU window and closed after it, their handshakes and closes
measured apart), ``push-load`` (8 clients publishing single messages with ``--sockets`` cluster
pages open and with none: the rate's ratio, the extra CPU per socket per message and the frames
a page got per message), ``agents`` (the same as ``push`` with agents' streams).

Then, unless ``--no-profile``, each path runs again against a server started under
``bench/profiled_server.py`` (cProfile in every thread), and the top costs by own time are
named: for the first of ``--servers``, or those ``--profile-servers`` names. The kinds
``uvicorn-websockets`` and ``uvicorn-wsproto`` are the production uvicorn command with its other
websocket implementations (``--ws websockets``, ``--ws wsproto``). Writes
``bench/results/cpu.md`` (or ``--out``) and ``cpu.json`` beside it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import pstats
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import perf_http as ph  # a sibling script: the server subprocess, the loads, the sockets

ROOT = ph.ROOT
RESULTS = ROOT / "bench" / "results"
PATHS = (
    "publish",
    "batch",
    "tasks",
    "tasks-loop",
    "page",
    "page-agents",
    "query",
    "push",
    "push-load",
    "agents",
)
# The table's rows: a path's own, the tasks path's two (its claims and its completions).
ROWS = tuple(
    row for path in PATHS for row in (("claim", "complete") if path == "tasks" else (path,))
)
# What listens in the push paths: the cluster pages, or the agents' streams of the messages.
LISTENERS = {"push": "pages", "agents": "agent streams"}
AGENTS = 64  # an agent holds one task at a time: 64 claims, then 64 completions
TASKS_SETUP = """
from ledger.interfaces import MessageDraft, cluster_create, message_publish_batch
agents = [{{"id": f"a{{n}}", "role": "implementation", "prompt": "x",
           "triggers": [{{"topic": f"T{{n}}"}}]}} for n in range({agents})]
cluster_create(cluster_id="{cluster}", config={{"agents": agents}}, state="running")
for start in range(0, {tasks}, 100):
    ns = range(start, min(start + 100, {tasks}))
    drafts = [MessageDraft(topic=f"T{{n % {agents}}}", sender="bench") for n in ns]
    message_publish_batch(cluster_id="{cluster}", drafts=drafts)
"""

# The page's cluster holds more than a page of messages whatever paths run: the page shows 100.
PAGE_MESSAGES = 150
PAGE_SETUP = """
import random, sys
sys.path.insert(0, "bench")
import perf_http as ph
from ledger.interfaces import MessageDraft, message_publish_batch
rng = random.Random(7)
topics = ["AGENT_OUTPUT", "WORKER_PROGRESS"]
bodies = [ph.message_body(rng, rng.choice(topics)) for _ in range({messages})]
message_publish_batch(cluster_id="{cluster}", drafts=[MessageDraft(**b) for b in bodies])
"""
# The same page of a cluster that runs agents: the worker-validator template, started (its
# worker's first task queued), then the same messages: the agents and topology panels, the
# guidance form and the agents' tasks and builds read as an operator's page reads them.
PAGE_AGENTS_SETUP = (
    """
from runs.services.clusters import cluster_start
from context.services.templates import cluster_create_from_template
cluster_create_from_template(
    template_name="worker-validator", params=None, cluster_id="{cluster}", labels=None
)
cluster_start(cluster_id="{cluster}", issue={{"title": "Bench", "text": "A page to render."}})
"""
    + PAGE_SETUP
)


# uvicorn's websocket implementations, one server kind each (``--ws``): the same command
# otherwise, so that they are compared on the push paths side by side. ``uvicorn`` is the
# production command's, read from the served tree's Dockerfile (docs/decisions/0211, 0290), so
# that each of ``--trees`` is served as it would be deployed.
UVICORN_WS = {
    "uvicorn": None,
    "uvicorn-websockets": "websockets",
    "uvicorn-wsproto": "wsproto",
}


def production_ws(root: Path) -> str:
    """The ``--ws`` of the image's command in ``root``'s Dockerfile."""
    cmd = re.search(r"^CMD (\[.*?\])$", (root / "Dockerfile").read_text(), re.M | re.S)
    if cmd is None:
        raise ValueError(f"no CMD in {root / 'Dockerfile'}")
    argv = json.loads(cmd.group(1).replace("\\\n", " "))
    return str(argv[argv.index("--ws") + 1])


def server_command(kind: str, port: int, root: Path = ROOT) -> list[str]:
    """How each ASGI server is started: one process, the app as the operator's guide names it."""
    app = "zeroshot_web.asgi:application"
    if kind == "daphne":
        return ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), app]
    if kind in UVICORN_WS:
        ws = UVICORN_WS[kind] or production_ws(root)
        return [
            "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port),
            "--loop", "uvloop", "--http", "httptools", "--ws", ws,
            "--ws-per-message-deflate", "false", "--lifespan", "on",
            "--no-access-log", "--log-level", "warning", app,
        ]  # fmt: skip
    if kind == "granian":
        return [
            "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1", "--runtime-threads", "1",
            "--no-access-log", "--log-level", "warning", app,
        ]  # fmt: skip
    raise ValueError(kind)


class BenchServer(ph.Server):
    """``perf_http.Server`` with a choice of ASGI server and an optional profiler around it."""

    def __init__(
        self,
        kind: str,
        workdir: Path,
        database_url: str,
        redis_url: str | None,
        root: Path = ROOT,
    ):
        super().__init__(kind, workdir, database_url, redis_url)
        self.kind = kind
        self.root = root
        self.profile_out: Path | None = None

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(self.root / "manage.py"), *args],
            env=self.env,
            cwd=self.root,
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout

    def start(self) -> BenchServer:
        args = server_command(self.kind, self.port, self.root)
        if self.profile_out is not None:
            args = [str(ROOT / "bench" / "profiled_server.py"), str(self.profile_out), *args[1:]]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, *args],
                env=self.env,
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.kind} exited early:\n{self.log_tail()}")
            try:
                httpx.get(f"{self.url}/healthz", timeout=1)  # cheap: no schema to build
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.kind} did not answer on {self.port}:\n{self.log_tail()}")

    def stop(self) -> None:
        """As ``perf_http.Server.stop``; a profiled server is given the time to merge and write
        its profiles (a thread's each: many seconds on a loaded machine)."""
        if self.process is None or self.profile_out is None:
            super().stop()
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def cpu_seconds(self) -> float:
        """The server's CPU, its children's included (granian serves from a worker process)."""
        if self.process is None:
            return 0.0
        total = 0.0
        for pid in [self.process.pid, *children(self.process.pid)]:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def database_cpu_seconds(self) -> float:
        """PostgreSQL's own CPU: every ``postgres`` process of the machine (its backends, the
        WAL writer, the checkpointer), on the same cores as the server. 0 on SQLite, which
        runs inside the server."""
        if not self.env["DATABASE_URL"].startswith("postgres"):
            return 0.0
        return postgres_cpu_seconds()


def postgres_cpu_seconds() -> float:
    total = 0
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_file.read_text()
        except OSError:
            continue
        if "(postgres)" in stat:
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for kid in map(int, kids):
            found += [kid, *children(kid)]
    return found


def settle(server: BenchServer, seconds: float = 0.6) -> None:
    """Wait until the server's CPU stops moving (the post-commit pipeline has caught up)."""
    last = server.cpu_seconds()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(seconds)
        now = server.cpu_seconds()
        if now - last < 0.02:
            return
        last = now


def measured(server: BenchServer, load: Callable[[], int]) -> dict[str, float]:
    """Server CPU over ``load`` (which returns the requests it made), the settling included."""
    settle(server)
    cpu, db_cpu, began = server.cpu_seconds(), server.database_cpu_seconds(), time.perf_counter()
    requests = load()
    wall = time.perf_counter() - began
    settle(server)
    cpu = server.cpu_seconds() - cpu
    db_cpu = server.database_cpu_seconds() - db_cpu
    return {
        "requests": requests,
        "cpu_ms": 1000 * cpu / requests,
        "db_cpu_ms": 1000 * db_cpu / requests,
        "req_s": requests / wall,
        "server_cpu_s": cpu,
    }


# --- the loads ---------------------------------------------------------------------------------


def publish_load(server: BenchServer, requests: int, batch: int, seed: int) -> Callable[[], int]:
    load = ph.Load(
        clients=8, requests=requests, batch=batch, trigger_share=0.0, trigger_topic=ph.PLAIN_TOPIC
    )

    def run() -> int:
        figures = ph.http_publish(server, "c-pub", load, seed=seed)
        return int(figures["requests"])

    return run


class Tasks:
    """8 workers in phases: each claims (no wait) ``AGENTS // 8`` tasks, then all complete what
    they hold. The CPU of each phase is read apart (after the server settles), so that a claim
    and a completion are measured on their own; the pipeline work a completion starts is the
    completion's."""

    def __init__(self, server: BenchServer, tasks: int, claim_wait: float = 0.0) -> None:
        self.server = server
        self.phases = max(1, tasks // AGENTS)
        # How long a tasks-loop claim may wait for a task (a runner long-polls: its claims wait).
        self.claim_wait = claim_wait
        self.held: list[list[dict[str, Any]]] = [[] for _ in range(8)]
        self.headers = {"Authorization": f"Bearer {server.key}"}

    def _on_threads(self, work: Callable[[int], object]) -> None:
        """``work(n)`` for the 8 workers, each on a thread of its own; raises the first error
        one of them raised, with the server's log."""
        errors: list[str] = []

        def worker(n: int) -> None:
            try:
                work(n)
            except Exception as error:
                errors.append(repr(error))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise RuntimeError(f"{errors[0]}\n{self.server.log_tail()}")

    def _parallel(self, work: Callable[[httpx.Client, int], int]) -> int:
        counts = [0] * 8

        def worker(n: int) -> None:
            with httpx.Client(base_url=self.server.url, headers=self.headers, timeout=60) as c:
                counts[n] = work(c, n)

        self._on_threads(worker)
        return sum(counts)

    def claim(self) -> int:
        def work(client: httpx.Client, n: int) -> int:
            # Only this path's cluster: the page-agents path's started cluster queues tasks too.
            wanted = {"cluster": "tps", "wait": 0, "worker": f"w{n}"}
            for _ in range(AGENTS // 8):
                answer = client.post("/api/v1/tasks/claim", json=wanted)
                answer.raise_for_status()
                if answer.status_code == 204:
                    raise RuntimeError("no task to claim")
                self.held[n].append(answer.json()["task"])
            return AGENTS // 8

        return self._parallel(work)

    def complete(self) -> int:
        def work(client: httpx.Client, n: int) -> int:
            tasks, self.held[n] = self.held[n], []
            for task in tasks:
                answer = client.post(
                    f"/api/v1/tasks/{task['id']}/complete",
                    json={"lease_id": task["lease_id"], "result": {}, "output": "{}"},
                )
                if answer.is_error:
                    raise RuntimeError(f"{answer.status_code} {answer.text} for {task}")
            return len(tasks)

        return self._parallel(work)

    def loop(self) -> dict[str, float]:
        """8 workers as runners work: each claims a task and completes it at once, one after
        another, over its own kept-alive connection, until the phases' tasks are done. Tasks per
        second over the whole load, the server's CPU per cycle, and this process's CPU per cycle
        (the workers' client side, to tell whether they, not the server, set the rate)."""
        target = self.phases * AGENTS
        done = [0]
        lock = threading.Lock()
        clients = [
            httpx.Client(base_url=self.server.url, headers=self.headers, timeout=60)
            for _ in range(8)
        ]
        for client in clients:  # connected before the clock starts
            client.get("/healthz").raise_for_status()

        def worker(n: int) -> None:
            wanted = {"cluster": "tps", "wait": self.claim_wait, "worker": f"w{n}"}
            while True:
                with lock:
                    if done[0] >= target:
                        return
                    done[0] += 1
                answer = clients[n].post("/api/v1/tasks/claim", json=wanted)
                answer.raise_for_status()
                if answer.status_code == 204:
                    raise RuntimeError("no task to claim")
                task = answer.json()["task"]
                answer = clients[n].post(
                    f"/api/v1/tasks/{task['id']}/complete",
                    json={"lease_id": task["lease_id"], "result": {}, "output": "{}"},
                )
                answer.raise_for_status()

        settle(self.server)
        before, own, began = self.server.cpu_seconds(), time.process_time(), time.perf_counter()
        db_before = self.server.database_cpu_seconds()
        try:
            self._on_threads(worker)
            wall = time.perf_counter() - began
            own = time.process_time() - own
        finally:
            for client in clients:
                client.close()
        settle(self.server)
        cpu = self.server.cpu_seconds() - before
        db_cpu = self.server.database_cpu_seconds() - db_before
        return {
            "requests": target,
            "cpu_ms": 1000 * cpu / target,
            "db_cpu_ms": 1000 * db_cpu / target,
            "req_s": target / wall,
            "client_cpu_ms": 1000 * own / target,
            "server_cpu_s": cpu,
        }

    def cycle(self) -> dict[str, dict[str, float]]:
        """Claim and complete every task of the phases; CPU per claim, per completion, per cycle."""
        cpu = {"claim": 0.0, "complete": 0.0}
        wall = {"claim": 0.0, "complete": 0.0}
        count = {"claim": 0, "complete": 0}
        settle(self.server)
        for _ in range(self.phases):
            for name, step in (("claim", self.claim), ("complete", self.complete)):
                before, began = self.server.cpu_seconds(), time.perf_counter()
                count[name] += step()
                wall[name] += time.perf_counter() - began
                settle(self.server, 0.25)
                cpu[name] += self.server.cpu_seconds() - before
        out = {
            name: {
                "requests": count[name],
                "cpu_ms": 1000 * cpu[name] / count[name],
                "req_s": count[name] / wall[name],
                "server_cpu_s": cpu[name],
            }
            for name in cpu
        }
        tasks = count["complete"]
        out["cycle"] = {
            "requests": tasks,
            "cpu_ms": 1000 * (cpu["claim"] + cpu["complete"]) / tasks,
            "req_s": tasks / (wall["claim"] + wall["complete"]),
            "server_cpu_s": cpu["claim"] + cpu["complete"],
        }
        return out


def gets_load(
    server: BenchServer,
    requests: int,
    path: str,
    headers: dict[str, str],
    answered: Callable[[httpx.Response], bool],
) -> Callable[[], int]:
    """``requests`` GETs of ``path`` one after the other, each checked by ``answered``."""

    def run() -> int:
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
            for _ in range(requests):
                answer = client.get(path)
                answer.raise_for_status()
                if not answered(answer):
                    raise RuntimeError(f"GET {path} did not answer as expected")
        return requests

    return run


def page_load(server: BenchServer, requests: int, cluster: str = "c-page") -> Callable[[], int]:
    return gets_load(
        server,
        requests,
        f"/clusters/{cluster}/",
        {"Cookie": server.cookie},
        lambda answer: b"<html" in answer.content[:400].lower(),
    )


def query_load(server: BenchServer, requests: int, cluster: str = "c-page") -> Callable[[], int]:
    return gets_load(
        server,
        requests,
        f"/api/v1/clusters/{cluster}/messages?limit=20",
        {"Authorization": f"Bearer {server.key}"},
        lambda answer: len(answer.json()["items"]) == 20,
    )


def push_figures(
    server: BenchServer, sockets: int, publishes: int, seed: int, *, agents: bool = False
) -> dict[str, Any]:
    """Server CPU per published message with ``sockets`` pages (or, with ``agents``, agents'
    streams) open and with none. The sockets are opened before the CPU window and closed after
    it: their handshakes and closes are a cost per socket, measured apart (``connect``), not
    one per message."""
    rows: dict[str, Any] = {}
    handshakes_s = 0.0
    for open_pages in (0, sockets):
        box: dict[str, Any] = {}
        listeners: ph.Listeners | None = None
        if open_pages:
            settle(server)
            before = server.cpu_seconds()
            listeners = ph.Listeners(server, "c-push", open_pages, agents=agents).__enter__()
            settle(server)
            handshakes_s += server.cpu_seconds() - before

        def run(
            open_pages: int = open_pages,
            box: dict[str, Any] = box,
            listeners: ph.Listeners | None = listeners,
        ) -> int:
            box.update(
                ph.websocket_publish(
                    server,
                    "c-push",
                    sockets=open_pages,
                    publishes=publishes,
                    seed=2 * seed + (1 if open_pages else 0),  # markers of six digits
                    agents=agents,
                    listeners=listeners,
                )
            )
            return publishes + 3  # the warm-up publishes are inside the CPU window

        try:
            figures = measured(server, run)
        finally:
            if listeners is not None:
                before = server.cpu_seconds()
                listeners.__exit__(None, None, None)
                settle(server)
                handshakes_s += server.cpu_seconds() - before
        rows[str(open_pages)] = {**figures, **box}
    without, with_pages = rows["0"], rows[str(sockets)]
    per_socket = (with_pages["cpu_ms"] - without["cpu_ms"]) / sockets
    # As the figure was measured up to round 3: the handshakes and closes inside the window.
    with_handshakes = per_socket + 1000 * handshakes_s / (publishes + 3) / sockets
    return {
        "sockets": sockets,
        "cpu_ms_per_message_no_pages": without["cpu_ms"],
        "cpu_ms_per_message_with_pages": with_pages["cpu_ms"],
        "cpu_ms_per_socket_per_message": per_socket,
        "cpu_ms_per_socket_per_message_with_handshakes": with_handshakes,
        "connect_ms_per_socket": 1000 * handshakes_s / sockets,
        "msg_s_ratio": with_pages["msg_s"] / without["msg_s"],
        "push_p50_ms": with_pages.get("push_p50_ms"),
        "delivered": with_pages.get("delivered"),
        "rows": rows,
    }


def push_load_figures(
    server: BenchServer, sockets: int, publishes: int, seed: int
) -> dict[str, Any]:
    """8 clients publishing single messages at once with ``sockets`` cluster pages open and with
    none: the publishing rate with pages over the rate without, the server CPU per message, and
    the frames a page got per message (pushes gathered into fewer frames show there)."""
    rows: dict[str, Any] = {}
    for open_pages in (0, sockets):
        listeners: ph.Listeners | None = None
        if open_pages:
            settle(server)
            listeners = ph.Listeners(server, "c-push", open_pages).__enter__()
        load = ph.Load(
            clients=8,
            requests=publishes,
            batch=1,
            trigger_share=0.0,
            trigger_topic=ph.PLAIN_TOPIC,
        )
        box: dict[str, Any] = {}

        def run(load: ph.Load = load, box: dict[str, Any] = box) -> int:
            box.update(ph.http_publish(server, "c-push", load, seed=seed))
            return int(box["requests"])

        try:
            figures = measured(server, run)
            if listeners is not None:
                if listeners.failure is not None:
                    raise RuntimeError(f"page socket failed: {listeners.failure!r}")
                # The two warm-up publishes of each client are pushed too.
                pushed = figures["requests"] + 2 * load.clients
                figures["frames_per_message"] = listeners.frames / open_pages / pushed
        finally:
            if listeners is not None:
                listeners.__exit__(None, None, None)
                settle(server)
        rows[str(open_pages)] = {**figures, "msg_s": box["msg_s"]}
    without, with_pages = rows["0"], rows[str(sockets)]
    return {
        "sockets": sockets,
        "cpu_ms_per_message_no_pages": without["cpu_ms"],
        "cpu_ms_per_message_with_pages": with_pages["cpu_ms"],
        "cpu_ms_per_socket_per_message": (with_pages["cpu_ms"] - without["cpu_ms"]) / sockets,
        "msg_s_ratio": with_pages["msg_s"] / without["msg_s"],
        "msg_s_no_pages": without["msg_s"],
        "msg_s_with_pages": with_pages["msg_s"],
        "frames_per_message": with_pages["frames_per_message"],
        "rows": rows,
    }


# --- one server, every path -------------------------------------------------------------------


def prepare(server: BenchServer, tasks: int) -> None:
    server.prepare(["c-pub", "c-push", "c-page"])
    setups = (
        TASKS_SETUP.format(agents=AGENTS, cluster="tps", tasks=tasks),
        PAGE_SETUP.format(cluster="c-page", messages=PAGE_MESSAGES),
        PAGE_AGENTS_SETUP.format(cluster="c-page-agents", messages=PAGE_MESSAGES),
    )
    for setup in setups:
        subprocess.run(
            [sys.executable, str(server.root / "manage.py"), "shell", "-c", setup],
            env={**server.env, "ZEROSHOT_PIPELINE": "inline"},
            cwd=server.root,
            check=True,
            capture_output=True,
        )


def run_paths(
    server: BenchServer, paths: list[str], args: argparse.Namespace, seed: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tasks = Tasks(server, args.tasks, args.claim_wait)
    for path in paths:
        if path == "publish":
            out[path] = measured(server, publish_load(server, args.publishes, 1, seed))
            out[path]["msg_s"] = out[path]["req_s"]
        elif path == "batch":
            figures = measured(server, publish_load(server, args.batches, 100, seed))
            figures["cpu_ms_per_message"] = figures["cpu_ms"] / 100
            figures["msg_s"] = figures["req_s"] * 100
            out[path] = figures
        elif path == "tasks":
            cycle = tasks.cycle()
            out["claim"], out["complete"] = cycle["claim"], cycle["complete"]
            out["task_cycle_cpu_ms"] = cycle["cycle"]["cpu_ms"]
            out["task_cycle_s"] = cycle["cycle"]["req_s"]
        elif path == "tasks-loop":
            out[path] = tasks.loop()
        elif path == "page":
            out[path] = measured(server, page_load(server, args.pages))
        elif path == "page-agents":
            out[path] = measured(server, page_load(server, args.pages, "c-page-agents"))
        elif path == "query":
            out[path] = measured(server, query_load(server, args.pages))
        elif path == "push-load":
            out[path] = push_load_figures(server, args.sockets, args.publishes, seed)
        elif path in LISTENERS:
            out[path] = push_figures(
                server, args.sockets, args.push_messages, seed, agents=path == "agents"
            )
    return out


# Blocking waits: a thread parked in one uses no CPU, yet the profile of a served process
# books time to them (seen on this machine for the pipeline's condition waits, whatever the
# clock); they are left out of the tables and of the total.
WAITS = ("acquire' of '_thread.lock", "get' of '_queue.SimpleQueue", "poll' of 'select.epoll")


def top_costs(profile: Path, limit: int, root: Path = ROOT) -> dict[str, Any]:
    """The top costs by own time, and the project's functions (of the tree served) by
    cumulative time."""
    stats = pstats.Stats(str(profile), stream=io.StringIO())
    for key in list(stats.stats):  # type: ignore[attr-defined]
        if any(wait in key[2] for wait in WAITS):
            del stats.stats[key]  # type: ignore[attr-defined]
    total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    rows = []
    for (filename, line, name), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{short(filename, root)}:{line}({name})",
                "calls": calls,
                "own_s": tottime,
                "own_share": tottime / total if total else 0.0,
                "cum_s": cumtime,
                "cum_share": cumtime / total if total else 0.0,
            }
        )
    unsorted = list(rows)
    rows.sort(key=lambda row: row["own_s"], reverse=True)
    ours = [
        row
        for (filename, _line, name), row in zip(stats.stats, unsorted, strict=True)  # type: ignore[attr-defined]
        if filename.startswith(str(root))
        and "/bench/" not in filename
        and "/.venv/" not in filename
        and not name.startswith(("_work", "_next", "_sweep"))  # the pipeline's waiting loops
    ]
    ours.sort(key=lambda row: row["cum_s"], reverse=True)
    return {"own": rows[:limit], "ours": ours[:limit], "total_s": total}


def short(filename: str, root: Path = ROOT) -> str:
    for marker in ("site-packages/", str(root) + "/", "lib/python3.11/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def fresh_database(url: str | None, name: str) -> str | None:
    """A PostgreSQL database of the benchmark's own (its name must start with bench_)."""
    if url is None:
        return None
    parts = urlsplit(url)
    base = parts.path.lstrip("/")
    if not base.startswith("bench_"):
        raise SystemExit("--database-url must name a database starting with bench_")
    db = f"{base}_{name}"
    admin = parts._replace(path="/postgres").geturl()
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db}"')
    return parts._replace(path=f"/{db}").geturl()


def drop_database(url: str | None) -> None:
    if url is None:
        return
    parts = urlsplit(url)
    import psycopg

    with psycopg.connect(parts._replace(path="/postgres").geturl(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parts.path.lstrip("/")}" WITH (FORCE)')


def bench_one(
    kind: str,
    db: str,
    workdir: Path,
    args: argparse.Namespace,
    paths: list[str],
    label: str = "",
    root: Path = ROOT,
) -> dict[str, Any]:
    name = f"{kind}_{label}" if label else kind
    pg_url = fresh_database(args.database_url, name) if db == "postgresql" else None
    url = pg_url or f"sqlite:///{workdir / f'{name}-{db}.sqlite3'}"
    server = BenchServer(kind, workdir / db / name, url, args.redis_url if pg_url else None, root)
    if args.rate_limit:
        # The production default is a limit: its count in the cache is part of every request.
        server.env["API_RATE_LIMIT"] = args.rate_limit
    rounds: list[dict[str, Any]] = []
    profiles: dict[str, Any] = {}
    try:
        task_paths = len({"tasks", "tasks-loop"} & set(paths))
        tasks_needed = task_paths * args.tasks * (args.rounds + (0 if args.no_profile else 1)) + 16
        prepare(server, tasks_needed)
        server.start()
        try:
            for n in range(args.rounds):
                rounds.append(run_paths(server, paths, args, seed=n + 1))
                print(f"{name} {db} round {n + 1}: {summary(rounds[-1])}", flush=True)
        finally:
            server.stop()
        if not args.no_profile and kind in args.profile_servers.split(","):
            for path in paths:
                server.profile_out = RESULTS / f"cpu-{name}-{db}-{path}.prof"
                server.start()
                try:
                    figures = run_paths(server, [path], args, seed=100)
                finally:
                    server.stop()
                deadline = time.monotonic() + 20  # merging the threads' profiles takes a while
                while not server.profile_out.exists() and time.monotonic() < deadline:
                    time.sleep(0.5)
                if not server.profile_out.exists():
                    raise RuntimeError(f"no profile written:\n{server.log_tail()}")
                top = top_costs(server.profile_out, args.top, root)
                profiles[path] = {"figures": figures, "top": top}
    finally:
        drop_database(pg_url)
    return {"rounds": rounds, "profiles": profiles, "tracebacks": server.tracebacks()}


def summary(figures: dict[str, Any]) -> str:
    parts = []
    for path, row in figures.items():
        if path in LISTENERS or path == "push-load":
            parts.append(f"{path} {row['cpu_ms_per_socket_per_message']:.3f} ms/socket/msg")
        elif isinstance(row, dict) and "cpu_ms" in row:
            parts.append(f"{path} {row['cpu_ms']:.2f} ms")
    return ", ".join(parts)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def fmt(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    return f"{median(values):.{digits}f} [{min(values):.{digits}f}..{max(values):.{digits}f}]"


def push_load_note(rows: list[dict[str, Any]]) -> str:
    """The note of a ``push-load`` row: both publishing rates, CPU per message, frames."""
    return (
        f"{rows[0]['sockets']} pages, 8 clients publishing; "
        f"{fmt([r['msg_s_with_pages'] for r in rows], 0)} msg/s with, "
        f"{fmt([r['msg_s_no_pages'] for r in rows], 0)} without; per message "
        f"{fmt([r['cpu_ms_per_message_with_pages'] for r in rows])} ms with, "
        f"{fmt([r['cpu_ms_per_message_no_pages'] for r in rows])} ms without; "
        f"frames per page per message {fmt([r['frames_per_message'] for r in rows])}"
    )


def listeners_note(path: str, rows: list[dict[str, Any]]) -> str:
    """The note of a row of sockets listening to one publisher (``LISTENERS``)."""
    return (
        f"{rows[0]['sockets']} {LISTENERS[path]}; per message "
        f"{fmt([r['cpu_ms_per_message_with_pages'] for r in rows])} ms with, "
        f"{fmt([r['cpu_ms_per_message_no_pages'] for r in rows])} ms without; "
        f"push p50 {fmt([r['push_p50_ms'] for r in rows], 1)} ms; "
        f"delivered {fmt([r['delivered'] for r in rows])}; a socket's handshake "
        f"and close {fmt([r['connect_ms_per_socket'] for r in rows])} ms, per "
        "socket per message with them (as measured up to round 3) "
        f"{fmt([r['cpu_ms_per_socket_per_message_with_handshakes'] for r in rows], 3)}"
        " ms"
    )


def table(results: dict[str, Any]) -> list[str]:
    lines = [
        "| server | database | path | server CPU per request, ms | throughput | note |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key, result in results.items():
        kind, db, *label = key.split("/")
        if label:
            kind = f"{kind} ({label[0]})"
        rounds = result["rounds"]
        for path in ROWS:
            rows = [r[path] for r in rounds if path in r]
            if not rows:
                continue
            if path == "push-load" or path in LISTENERS:
                cpu = fmt([r["cpu_ms_per_socket_per_message"] for r in rows], 3)
                thr = fmt([r["msg_s_ratio"] for r in rows], 2) + "x of none open"
                note = push_load_note(rows) if path == "push-load" else listeners_note(path, rows)
                what = f"{path}, per socket per message"
                lines.append(f"| {kind} | {db} | {what} | {cpu} | {thr} | {note} |")
                continue
            cpu = fmt([r["cpu_ms"] for r in rows])
            if path in ("publish", "batch"):
                thr = fmt([r["msg_s"] for r in rows], 0) + " msg/s"
            else:
                thr = fmt([r["req_s"] for r in rows], 0) + " req/s"
            note = ""
            if path == "batch":
                note = f"{fmt([r['cpu_ms_per_message'] for r in rows], 3)} ms per message"
            if path == "tasks-loop":
                thr = fmt([r["req_s"] for r in rows], 0) + " tasks/s"
                client = fmt([r["client_cpu_ms"] for r in rows])
                note = f"per task cycle; the 8 workers' own CPU {client} ms a cycle"
            if path == "complete":
                cycle = [r["task_cycle_cpu_ms"] for r in rounds if "task_cycle_cpu_ms" in r]
                rate = [r["task_cycle_s"] for r in rounds if "task_cycle_s" in r]
                note = f"task cycle (claim + complete): {fmt(cycle)} ms, {fmt(rate, 0)} tasks/s"
            if db == "postgresql" and all("db_cpu_ms" in r for r in rows):
                own = f"PostgreSQL's own CPU {fmt([r['db_cpu_ms'] for r in rows])} ms"
                note = f"{note}; {own}" if note else own
            lines.append(f"| {kind} | {db} | {path} | {cpu} | {thr} | {note} |")
    return lines


def report(results: dict[str, Any], args: argparse.Namespace, load: tuple[float, float]) -> str:
    lines = [
        f"# Server CPU per request ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"`bench/cpu_profile.py {' '.join(sys.argv[1:])}`: {args.rounds} round(s), median "
        "[min..max]. Server CPU = the server process's own utime+stime (`/proc`, all its "
        "threads and children) over the load and until it settles, divided by the requests. "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, load average "
        f"{load[0]:.2f} before, {load[1]:.2f} after.",
        "",
        f"Loads: publish 8 clients x {args.publishes} single messages; "
        f"batch 8 x {args.batches} of 100; tasks: {args.tasks} tasks of {AGENTS} agents, "
        "8 workers claiming (without waiting) one task per agent, then completing them, "
        f"phase after phase; page `GET /clusters/<id>/` x {args.pages} signed in (a cluster "
        f"of {PAGE_MESSAGES} messages, the page shows 100; page-agents: the same messages in a "
        "started worker-validator cluster, its agents' panels shown); query: an agent's "
        f"`GET /api/v1/clusters/<id>/messages?limit=20` of the page's cluster x {args.pages}; push "
        f"{args.push_messages} messages one after the other with {args.sockets} cluster pages "
        "open, minus the same with none, over the pages (the pages opened before and closed "
        "after the CPU window: their handshakes are a figure of their own in the note); "
        "agents: the same with as many agents' streams (`/ws/clusters/<id>/`) instead of "
        "pages.",
        "",
        *table(results),
        "",
        "Tracebacks in the servers' logs: "
        + ", ".join(f"{key} {result['tracebacks']}" for key, result in results.items())
        + ".",
    ]
    for key, result in results.items():
        for path, profile in result["profiles"].items():
            top = profile["top"]
            lines += [
                "",
                f"## Top costs, {key}, {path}",
                "",
                f"cProfile in every thread on its CPU clock, {top['total_s']:.2f} s of CPU in "
                "all (the server's start included; blocking waits left out). Own time:",
                "",
                "| function | calls | own s | share |",
                "| --- | --- | --- | --- |",
            ]
            for row in top["own"]:
                lines.append(
                    f"| `{row['function']}` | {row['calls']} | {row['own_s']:.3f} | "
                    f"{100 * row['own_share']:.1f} % |"
                )
            lines += [
                "",
                "The project's functions by cumulative time (callees included):",
                "",
                "| function | calls | cumulative s | share |",
                "| --- | --- | --- | --- |",
            ]
            for row in top["ours"]:
                lines.append(
                    f"| `{row['function']}` | {row['calls']} | {row['cum_s']:.3f} | "
                    f"{100 * row['cum_share']:.1f} % |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--servers",
        default="daphne",
        help="daphne,uvicorn,granian; uvicorn-websockets and uvicorn-wsproto: uvicorn with "
        "--ws websockets or wsproto",
    )
    parser.add_argument(
        "--profile-servers", help="which of --servers run again profiled (the first by default)"
    )
    parser.add_argument("--only", default=",".join(PATHS), help=",".join(PATHS))
    parser.add_argument("--database-url", help="postgres://…/bench_…: also run on PostgreSQL")
    parser.add_argument("--redis-url", help="the channel layer for the PostgreSQL server")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--publishes", type=int, default=60, help="per client")
    parser.add_argument("--batches", type=int, default=4, help="per client")
    parser.add_argument("--tasks", type=int, default=256)
    parser.add_argument(
        "--claim-wait",
        type=float,
        default=0.0,
        help="the tasks-loop claims' wait, in seconds (a runner's long poll); 0 by default",
    )
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--sockets", type=int, default=100)
    parser.add_argument("--push-messages", type=int, default=40)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument(
        "--rate-limit",
        default="",
        help="API_RATE_LIMIT for the servers, high enough never to refuse (e.g. 1000000/m); "
        "off by default",
    )
    parser.add_argument(
        "--trees",
        help="label=DIR,...: serve each checkout of the app in turn (e.g. before=/tmp/old,after=.)",
    )
    parser.add_argument("--out", default=str(RESULTS / "cpu.md"))
    args = parser.parse_args()
    if args.profile_servers is None:
        args.profile_servers = args.servers.split(",")[0]
    paths = [p for p in args.only.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise SystemExit(f"unknown paths: {sorted(unknown)}")
    databases = ([] if args.no_sqlite else ["sqlite"]) + (
        ["postgresql"] if args.database_url else []
    )
    trees: list[tuple[str, Path]] = [("", ROOT)]
    if args.trees:
        trees = [
            (label, Path(folder).resolve())
            for label, _, folder in (item.partition("=") for item in args.trees.split(","))
        ]
    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cpu-bench-") as tmp:
        for db in databases:
            for label, root in trees:
                for kind in args.servers.split(","):
                    key = f"{kind}/{db}" + (f"/{label}" if label else "")
                    results[key] = bench_one(kind, db, Path(tmp), args, paths, label, root)
    text = report(results, args, (load_before, os.getloadavg()[0]))
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
