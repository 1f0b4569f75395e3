"""The publish path, the context build, the import and the cluster page against their goals.

Usage: ``.venv/bin/python bench/perf_bench.py [--quick] [--rounds N] [--only ROW[,ROW]]
[--postgres URL --redis URL] [--zeroshot PATH --reference DIR] [--section] [--profile-publish]``
(see bench/README.md).

Every row of the table is measured in one run, the rows interleaved round by round (three
rounds; ``--quick``: one, smaller), with the state snapshotter and the live push on as a server
runs them. Each figure is the median of the rounds with their range. Writes
``bench/results/perf.md`` (the table) and ``bench/results/perf.json`` (every figure).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import perf_http as ph

# Sibling scripts, reused for what they already measure (loaded as modules, not copied).
lb: Any = importlib.import_module("ledger_bench")
ib: Any = importlib.import_module("import_bench")
db: Any = importlib.import_module("dashboard_bench")

ROOT = lb.ROOT
RESULTS_MD = ROOT / "bench" / "results" / "perf.md"
RESULTS_JSON = ROOT / "bench" / "results" / "perf.json"
ROWS = (
    "publish",
    "publish_batch",
    "http_sqlite",
    "http_postgres",
    "http_batch",
    "websockets",
    "context_build",
    "import",
    "cluster_page",
    "zeroshot_publish",
)
X = "\N{MULTIPLICATION SIGN}"  # ratios written as the issue writes them
HTTP_ROWS = {"http_sqlite", "http_postgres", "http_batch", "websockets"}
ZEROSHOT_CLUSTER_SMALL = "steady-falcon-10k"
ZEROSHOT_CLUSTER_BIG = "steady-falcon-big"


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much each measurement does; ``--quick`` shrinks them for a smoke run."""

    rounds: int
    single: int  # messages published one per transaction, per round
    batch: int  # messages published 100 per transaction, per round
    http_requests: int  # single publishes per client per round (8 clients)
    http_batches: int  # batches of 100 per client per round (8 clients)
    sockets: int
    ws_publishes: int
    context_small: int
    context_big: int
    builds: int  # recorded builds per cluster per round (ours, and zeroshot's at 10k)
    zeroshot_big_builds: int  # zeroshot's builds at the big size (about half a second each)
    page_messages: int
    page_requests: int


FULL = Sizes(
    rounds=3,
    single=2_000,
    batch=20_000,
    http_requests=250,
    http_batches=8,
    sockets=200,
    ws_publishes=100,
    context_small=10_000,
    context_big=1_000_000,
    builds=100,
    zeroshot_big_builds=10,
    page_messages=100_000,
    page_requests=60,
)
QUICK = Sizes(
    rounds=1,
    single=300,
    batch=3_000,
    http_requests=30,
    http_batches=2,
    sockets=200,
    ws_publishes=20,
    context_small=10_000,
    context_big=100_000,
    builds=20,
    zeroshot_big_builds=3,
    page_messages=20_000,
    page_requests=15,
)


@dataclass(frozen=True, slots=True)
class Goal:
    """What a figure is held against: ``figure / against`` (or the figure alone) vs ``goal``."""

    key: str
    goal: float
    at_most: bool = False  # a latency or a ratio that must stay below its goal
    unit: str = X


# --- setup -------------------------------------------------------------------------------------


def django_setup(workdir: Path) -> None:
    """The project's own SQLite configuration in ``workdir``, migrated, with the state
    snapshotter and the live push on as a server runs them."""
    lb.django_setup(workdir / "inproc")
    from ledger.bus import bus
    from snapshots.snapshotter import snapshotter

    snapshotter.connect()  # ledger_bench measures without it; a server runs with it
    bus.push_enabled = True


def full_schema(path: Path) -> list[str]:
    """The CREATE statements of the cluster and message tables, all their indexes, the search
    index and its triggers: what a message insert pays for in our schema."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND ("
            "tbl_name IN ('ledger_cluster', 'ledger_message', 'ledger_message_search')"
            " OR name = 'ledger_message_text')"
        ).fetchall()
    finally:
        conn.close()
    order = {"table": 0, "view": 1, "index": 2, "trigger": 3}
    rows = [r for r in rows if not (r[1].startswith("ledger_message_search_") and r[0] == "table")]
    return [sql for _, _, sql in sorted(rows, key=lambda r: (order[r[0]], r[1]))]


def raw_connect(path: Path) -> sqlite3.Connection:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn: sqlite3.Connection = lb.raw_connect(path)
    return conn


def raw_insert(
    path: Path,
    schema: Sequence[str],
    cluster: tuple[Any, ...],
    chunks: Iterator[Sequence[tuple[Any, ...]]],
) -> tuple[int, float]:
    """Insert each chunk in its own ``BEGIN IMMEDIATE`` transaction; rows and seconds (only the
    inserts and commits are timed)."""
    conn = raw_connect(path)
    try:
        for sql in schema:
            conn.execute(sql)
        conn.execute(
            f"INSERT INTO ledger_cluster VALUES ({', '.join('?' * len(cluster))})", cluster
        )
        rows, nanos = 0, 0
        for chunk in chunks:
            started = time.perf_counter_ns()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(lb.INSERT_SQL, chunk)
            conn.execute("COMMIT")
            nanos += time.perf_counter_ns() - started
            rows += len(chunk)
        return rows, nanos / 1e9
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def cluster_row(path: Path, cluster_id: str) -> tuple[Any, ...]:
    conn = sqlite3.connect(path)
    try:
        row: tuple[Any, ...] = conn.execute(
            "SELECT * FROM ledger_cluster WHERE id = ?", (cluster_id,)
        ).fetchone()
        return row
    finally:
        conn.close()


def message_chunks(
    path: Path, cluster_id: str, size: int, *, skip_sender: str = ""
) -> Iterator[list[tuple[Any, ...]]]:
    """The rows we stored for a cluster (but those of ``skip_sender``), ``size`` at a time,
    exactly as they are in the table."""
    conn = sqlite3.connect(path)
    try:
        cursor = conn.execute(
            f"SELECT {', '.join(lb.MESSAGE_COLUMNS)} FROM ledger_message "
            "WHERE cluster_id = ? AND sender != ? ORDER BY sequence",
            (cluster_id, skip_sender),
        )
        while chunk := cursor.fetchmany(size):
            yield chunk
    finally:
        conn.close()


def raw_rates(
    workdir: Path, source: Path, cluster_id: str, per_transaction: int, *, skip_sender: str = ""
) -> dict[str, float]:
    """Rows per second of the raw insert into the full schema and, as a diagnostic, into the
    schema without the search index (the baseline before the index existed)."""
    schema = full_schema(source)
    plain = [sql for sql in schema if "ledger_message_search" not in sql]
    plain = [sql for sql in plain if "ledger_message_text" not in sql]
    rates: dict[str, float] = {"raw_rows": 0}
    for key, statements in (("raw_msg_s", schema), ("raw_nosearch_msg_s", plain)):
        rows, seconds = raw_insert(
            workdir / f"raw-{key}.sqlite3",
            statements,
            cluster_row(source, cluster_id),
            message_chunks(source, cluster_id, per_transaction, skip_sender=skip_sender),
        )
        rates[key] = rows / seconds
        rates["raw_rows"] = rows
    return rates


# --- rows 1 and 2: the publish services against a raw insert ----------------------------------


class Publish:
    """``message_publish`` (one per transaction) and ``message_publish_batch`` (100 per
    transaction), each against plain sqlite3 inserting the same rows into the same schema."""

    def __init__(self, sizes: Sizes, workdir: Path) -> None:
        from ledger.services import cluster_create

        self.sizes = sizes
        self.workdir = workdir
        self.drafts_single = lb.make_drafts(sizes.single, seed=2)
        self.drafts_batch = lb.make_drafts(sizes.batch, seed=3)
        cluster_create(cluster_id="perf-warmup", created_at=1_770_000_000_000)
        warmup = lb.make_drafts(400, seed=1)
        lb.publish_single("perf-warmup", warmup[:100])
        lb.publish_batches("perf-warmup", warmup[100:], 100)

    def measure(self, name: str, round_no: int) -> dict[str, Any]:
        from django.db import connection

        from ledger.services import cluster_create

        single = name == "publish"
        cluster_id = f"perf-{name}-{round_no}"
        cluster_create(cluster_id=cluster_id, created_at=1_770_000_000_000)
        drafts = self.drafts_single if single else self.drafts_batch
        if single:
            nanos = lb.clock(lambda: lb.publish_single(cluster_id, drafts))
        else:
            nanos = lb.clock(lambda: lb.publish_batches(cluster_id, drafts, 100))
        connection.close()  # the raw writer must not wait behind Django's connection
        # The snapshotter's own messages are not in the drafts: the raw insert leaves them out.
        raw = raw_rates(
            self.workdir,
            lb.db_path(),
            cluster_id,
            1 if single else 100,
            skip_sender="state-snapshotter",
        )
        assert raw["raw_rows"] == len(drafts), (raw, len(drafts))
        ours = len(drafts) / (nanos / 1e9)
        return {
            "msg_s": ours,
            **raw,
            "ratio": ours / raw["raw_msg_s"],
            "ratio_nosearch": ours / raw["raw_nosearch_msg_s"],
        }


# --- rows 7 and 8: zeroshot ledgers, our build against zeroshot's, the import --------------------


class ZeroshotLedgers:
    """Two zeroshot ledgers (10k and the big size) of a worker-validator run, made with the
    reference generator and imported with ``zeroshot_import``."""

    def __init__(self, sizes: Sizes, workdir: Path, reference: Path | None) -> None:
        self.dir = workdir / "zeroshot"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.reference = reference
        self.sizes = sizes
        self.small = self.dir / f"{ZEROSHOT_CLUSTER_SMALL}.db"
        self.big = self.dir / f"{ZEROSHOT_CLUSTER_BIG}.db"
        self.generated: dict[str, float] = {}

    def make(self, *, small: bool) -> None:
        from context.cluster_templates import template_builtin_list, template_resolve

        agents = template_resolve(template_builtin_list()["worker-validator"], {})["agents"]
        agents_json = self.dir / "agents.json"
        agents_json.write_text(json.dumps(agents))
        wanted = [(self.big, ZEROSHOT_CLUSTER_BIG, self.sizes.context_big)]
        if small:
            wanted.insert(0, (self.small, ZEROSHOT_CLUSTER_SMALL, self.sizes.context_small))
        for path, cluster_id, count in wanted:
            started = time.perf_counter()
            if self.reference is not None:
                subprocess.run(
                    [
                        sys.executable,
                        str(self.reference / "gen_ledger.py"),
                        str(self.dir),
                        cluster_id,
                        str(count),
                        "--agents",
                        str(agents_json),
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
            else:  # our own generator: importable, but not a worker-validator run
                ib.make_ledger(path, count)
            self.generated[cluster_id] = time.perf_counter() - started


class ContextBuild:
    """Recorded builds of the worker's context on our imported copy of each ledger, against
    zeroshot's own ``buildContext`` on the ledger itself (``zs_driver.js``)."""

    def __init__(
        self, sizes: Sizes, ledgers: ZeroshotLedgers, zeroshot: Path | None, driver: Path | None
    ) -> None:
        from ledger.importing import zeroshot_import

        self.sizes = sizes
        self.ledgers = ledgers
        for path in (ledgers.small, ledgers.big):
            zeroshot_import(path=path)
        lb.analyze()
        self.node: subprocess.Popen[str] | None = None
        self.absent = ""
        if zeroshot is None:
            self.absent = "no zeroshot checkout given (--zeroshot PATH)"
        elif driver is None or not driver.exists():
            self.absent = "no zs_driver.js (--reference DIR)"
        elif not (zeroshot / "node_modules" / "better-sqlite3").exists():
            self.absent = f"{zeroshot} has no node_modules/better-sqlite3"
        else:
            self.node = subprocess.Popen(
                ["node", str(driver)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "ZS_ROOT": str(zeroshot)},
            )
        for cluster_id in (ZEROSHOT_CLUSTER_SMALL, ZEROSHOT_CLUSTER_BIG):
            for _ in range(10):
                self.ours(cluster_id)
        if self.node is not None:
            self.theirs(ledgers.small, 5)
            self.theirs(ledgers.big, 1)

    def ours(self, cluster_id: str) -> float:
        from context.services.builds import context_build

        started = time.perf_counter_ns()
        outcome = context_build(cluster_id=cluster_id, agent_id="worker")
        elapsed = (time.perf_counter_ns() - started) / 1e6
        if self.ledgers.reference is not None:
            assert "Missing tests" in outcome.context, "the build lost the last VALIDATION_RESULT"
        return elapsed

    def theirs(self, path: Path, builds: int) -> list[float]:
        assert self.node is not None
        assert self.node.stdin is not None
        assert self.node.stdout is not None
        self.node.stdin.write(f"build {path} {builds}\n")
        self.node.stdin.flush()
        answer = json.loads(self.node.stdout.readline())
        assert answer["chars"] > 0
        return [float(ms) for ms in answer["ms"]]

    def measure(self, round_no: int) -> dict[str, Any]:
        small = [self.ours(ZEROSHOT_CLUSTER_SMALL) for _ in range(self.sizes.builds)]
        big = [self.ours(ZEROSHOT_CLUSTER_BIG) for _ in range(self.sizes.builds)]
        figures: dict[str, Any] = {
            "ours_small_p50_ms": statistics.median(small),
            "ours_big_p50_ms": statistics.median(big),
        }
        figures["ours_big_over_small"] = figures["ours_big_p50_ms"] / figures["ours_small_p50_ms"]
        if self.node is not None:
            zs_small = statistics.median(self.theirs(self.ledgers.small, self.sizes.builds))
            zs_big = statistics.median(
                self.theirs(self.ledgers.big, self.sizes.zeroshot_big_builds)
            )
            figures.update(
                zeroshot_small_p50_ms=zs_small,
                zeroshot_big_p50_ms=zs_big,
                ratio_small=figures["ours_small_p50_ms"] / zs_small,
                ratio_big=figures["ours_big_p50_ms"] / zs_big,
            )
        return figures

    def close(self) -> None:
        if self.node is not None:
            assert self.node.stdin is not None
            self.node.stdin.write("quit\n")
            self.node.stdin.close()
            self.node.wait(10)


IMPORT_ROUND = """
import json, time
from pathlib import Path
from ledger.importing import zeroshot_import
started = time.perf_counter()
zeroshot_import(path=Path({path!r}))
print(json.dumps({{"seconds": time.perf_counter() - started}}))
"""


class Import:
    """``zeroshot_import`` of the big ledger into a fresh database (a process of its own, as the
    command runs it), against plain sqlite3 inserting the rows it stored, 20,000 per
    transaction, into a fresh copy of our schema with all its indexes."""

    def __init__(self, ledgers: ZeroshotLedgers, workdir: Path) -> None:
        self.ledgers = ledgers
        self.workdir = workdir

    def measure(self, round_no: int) -> dict[str, Any]:
        target = self.workdir / f"import-{round_no}"
        target.mkdir()
        env = {
            **os.environ,
            "ZEROSHOT_DATA_DIR": str(target),
            "DJANGO_SETTINGS_MODULE": "zeroshot_web.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": "bench-only-key-of-a-throwaway-database",
        }
        for name in ("DATABASE_URL", "REDIS_URL"):
            env.pop(name, None)
        manage = [sys.executable, str(ROOT / "manage.py")]
        try:
            subprocess.run([*manage, "migrate", "-v", "0"], env=env, cwd=ROOT, check=True)
            out = subprocess.run(
                [*manage, "shell", "-c", IMPORT_ROUND.format(path=str(self.ledgers.big))],
                env=env,
                cwd=ROOT,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            seconds = json.loads(out.strip().splitlines()[-1])["seconds"]
            raw = raw_rates(target, target / "zeroshot.sqlite3", ZEROSHOT_CLUSTER_BIG, 20_000)
        finally:
            shutil.rmtree(target, ignore_errors=True)
        ours = raw["raw_rows"] / seconds
        return {
            "messages": raw["raw_rows"],
            "msg_s": ours,
            **raw,
            "ratio": ours / raw["raw_msg_s"],
            "ratio_nosearch": ours / raw["raw_nosearch_msg_s"],
        }


# --- row 10: our publish beside zeroshot's MessageBus.publish ----------------------------------


ZS_PUBLISH_DRIVER = ROOT / "bench" / "zs_publish_driver.js"


def draft_line(draft: Any) -> str:
    """A draft as zeroshot's ``MessageBus.publish`` takes it (the cluster id added there)."""
    return json.dumps(
        {
            "topic": draft.topic,
            "sender": draft.sender,
            "receiver": draft.receiver,
            "content": draft.content,
            "metadata": draft.metadata,
        }
    )


class ZeroshotPublish:
    """The same drafts, one message per call, side by side: our in-process ``message_publish``
    (SQLite, WAL, ``synchronous=NORMAL``, push and snapshotter on) and zeroshot's
    ``MessageBus.publish`` → ``Ledger.append`` (better-sqlite3, the same PRAGMAs, one process,
    ``zs_publish_driver.js``). Messages per second over the wall time and CPU per message: this
    process's CPU (``time.process_time``, every thread) for ours, the node process's
    ``process.cpuUsage()`` for theirs, each over its publishes only."""

    def __init__(self, sizes: Sizes, workdir: Path, zeroshot: Path | None) -> None:
        self.sizes = sizes
        self.dir = workdir / "zs-publish"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.drafts = lb.make_drafts(sizes.single, seed=4)
        self.drafts_file = self.dir / "drafts.jsonl"
        self.drafts_file.write_text("".join(draft_line(d) + "\n" for d in self.drafts))
        self.node: subprocess.Popen[str] | None = None
        self.absent = ""
        self.versions = ""
        if zeroshot is None:
            self.absent = "no zeroshot checkout given (--zeroshot PATH)"
        elif not (zeroshot / "node_modules" / "better-sqlite3").exists():
            self.absent = f"{zeroshot} has no node_modules/better-sqlite3"
        elif shutil.which("node") is None:
            self.absent = "no node on PATH"
        else:
            self.node = subprocess.Popen(
                ["node", str(ZS_PUBLISH_DRIVER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "ZS_ROOT": str(zeroshot)},
            )
            self.theirs("zs-publish-warmup", self.sizes.single // 4 or 1)

    def theirs(self, name: str, count: int | None = None) -> dict[str, Any]:
        assert self.node is not None
        assert self.node.stdin is not None
        assert self.node.stdout is not None
        source = self.drafts_file
        if count is not None:  # a warm-up on the first drafts
            source = self.dir / "warmup.jsonl"
            source.write_text("".join(draft_line(d) + "\n" for d in self.drafts[:count]))
        target = self.dir / f"{name}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        self.node.stdin.write(f"publish {target} {source}\n")
        self.node.stdin.flush()
        answer: dict[str, Any] = json.loads(self.node.stdout.readline())
        assert answer["stored"] == answer["count"], answer
        return answer

    def ours(self, cluster_id: str) -> tuple[float, float]:
        """(seconds of wall time, seconds of this process's CPU) for publishing the drafts."""
        from ledger.services import cluster_create

        cluster_create(cluster_id=cluster_id, created_at=1_770_000_000_000)
        cpu = time.process_time()
        nanos = lb.clock(lambda: lb.publish_single(cluster_id, self.drafts))
        return nanos / 1e9, time.process_time() - cpu

    def measure(self, round_no: int) -> dict[str, Any]:
        count = len(self.drafts)
        wall, cpu = self.ours(f"perf-zs-publish-{round_no}")
        figures: dict[str, Any] = {
            "msg_s": count / wall,
            "cpu_ms": cpu * 1000 / count,
        }
        if self.node is not None:
            zs = self.theirs(f"zs-publish-{round_no}")
            figures |= {
                "zeroshot_msg_s": count / (zs["wall_ms"] / 1000),
                "zeroshot_cpu_ms": zs["cpu_ms"] / count,
            }
            figures["ratio"] = figures["msg_s"] / figures["zeroshot_msg_s"]
            figures["cpu_ratio"] = figures["cpu_ms"] / figures["zeroshot_cpu_ms"]
            self.versions = f"better-sqlite3 {zs['better_sqlite3']}, SQLite {zs['sqlite']}"
        return figures

    def profile(self, top: int = 8) -> list[str]:
        """One more untimed pass of ``message_publish`` under cProfile: the top costs by own
        time, and the project's functions by cumulative time, per message."""
        import cProfile
        import pstats

        from ledger.services import cluster_create

        cluster_create(cluster_id="perf-zs-publish-profile", created_at=1_770_000_000_000)
        profiler = cProfile.Profile(time.thread_time)  # this thread's CPU, not its waits
        profiler.runcall(lb.publish_single, "perf-zs-publish-profile", self.drafts)
        stats = pstats.Stats(profiler)
        count = len(self.drafts)
        entries = stats.stats  # type: ignore[attr-defined]
        total = sum(own for _, _, own, _, _ in entries.values())

        def name(key: tuple[str, int, str]) -> str:
            file, line, func = key
            relative = file.removeprefix(str(ROOT) + "/")
            if relative.startswith("/"):
                relative = "/".join(Path(relative).parts[-2:])
            if line:
                return f"`{relative}:{line} {func}`"
            return f"`{func.split(' at 0x')[0]}>`" if " at 0x" in func else f"`{func}`"

        by_own = sorted(entries.items(), key=lambda item: -item[1][2])[:top]
        project = ("ledger/", "snapshots/", "context/", "runs/", "zeroshot_web/", "operations/")
        by_cum = sorted(
            (
                item
                for item in entries.items()
                if item[0][0].removeprefix(str(ROOT) + "/").startswith(project)
            ),
            key=lambda item: -item[1][3],
        )[:top]
        own = ", ".join(
            f"{name(k)} {v[2] * 1e6 / count:.0f} µs ({v[2] / total:.0%}, {v[1] / count:.3g} calls)"
            for k, v in by_own
        )
        cum = ", ".join(f"{name(k)} {v[3] * 1e6 / count:.0f} µs" for k, v in by_cum)
        publish_total = max(v[3] for v in entries.values())
        by_cum_all = sorted(entries.items(), key=lambda item: -item[1][3])[1 : 2 * top + 1]
        cum_all = ", ".join(
            f"{name(k)} {v[3] * 1e6 / count:.0f} µs ({v[3] / publish_total:.0%})"
            for k, v in by_cum_all
        )
        return [
            f"Profile of `message_publish` (cProfile on the publishing thread's CPU clock, {count} "
            f"messages, {total * 1e6 / count:.0f} µs of CPU a message under the profiler), top "
            f"own time per message: {own}.",
            f"The project's functions by cumulative time per message: {cum}.",
            f"Every function by cumulative time per message: {cum_all}.",
        ]

    def close(self) -> None:
        if self.node is not None:
            assert self.node.stdin is not None
            self.node.stdin.write("quit\n")
            self.node.stdin.close()
            self.node.wait(10)
            self.node = None


# --- row 9: the cluster page ---------------------------------------------------------------------


class ClusterPage:
    """``GET /clusters/<id>/`` (100 rows) of a big cluster through Django's test client."""

    def __init__(self, sizes: Sizes) -> None:
        from django.contrib.auth import get_user_model
        from django.test import Client

        from context.cluster_templates import template_builtin_list, template_resolve
        from ledger.selectors import TIMELINE_PAGE

        self.sizes = sizes
        self.page_rows = TIMELINE_PAGE
        agents = template_resolve(template_builtin_list()["worker-validator"], {})["agents"]
        db.make_cluster("perf-page", sizes.page_messages, agents, seed=5)
        lb.analyze()
        user = get_user_model().objects.create_user("perf-operator", is_staff=True)
        self.client = Client(HTTP_HOST="localhost")
        self.client.force_login(user)
        for _ in range(5):
            self.get()

    def get(self) -> float:
        started = time.perf_counter_ns()
        response = self.client.get("/clusters/perf-page/")
        elapsed = (time.perf_counter_ns() - started) / 1e6
        assert response.status_code == 200, response.status_code
        # Rows only: the snapshotter may replace the panel's snapshot while the run goes on.
        rows = response.content.decode().count('<li class="msg"')
        assert rows == self.page_rows, f"the cluster page shows {rows} rows"
        return elapsed

    def measure(self, round_no: int) -> dict[str, Any]:
        times = [self.get() for _ in range(self.sizes.page_requests)]
        return {"p50_ms": statistics.median(times), "p95_ms": ph.percentile(times, 0.95)}


# --- rows 3 to 6: HTTP and websockets -------------------------------------------------------------


class Http:
    """daphne servers (SQLite; PostgreSQL + Redis when given) and the loads against them."""

    def __init__(
        self, sizes: Sizes, workdir: Path, rows: set[str], postgres: str | None, redis: str | None
    ) -> None:
        from snapshots.state import SNAPSHOT_TRIGGER_TOPICS

        self.sizes = sizes
        self.trigger = ph.trigger_topic(SNAPSHOT_TRIGGER_TOPICS)
        self.rows = rows
        self.servers: dict[str, ph.Server] = {}
        self.admin_url = ""
        self.database = ""
        clusters = [f"http-{n}" for n in range(12)]
        sqlite_dir = workdir / "server-sqlite"
        sqlite_dir.mkdir()
        self.servers["sqlite"] = ph.Server(
            "sqlite", workdir, f"sqlite:///{sqlite_dir / 'zeroshot.sqlite3'}"
        )
        if postgres and rows & {"http_postgres", "http_batch"}:
            import psycopg

            base, self.database = postgres.rsplit("/", 1)
            assert self.database.startswith("bench_"), "use a database named bench_…"
            self.admin_url = f"{base}/postgres"
            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{self.database}"')
            self.servers["postgres"] = ph.Server("postgres", workdir, postgres, redis)
        for server in self.servers.values():
            server.prepare(clusters)
            server.start()

    def load(self, *, batch: int, trigger_share: float) -> ph.Load:
        requests = self.sizes.http_requests if batch == 1 else self.sizes.http_batches
        return ph.Load(
            clients=8,
            requests=requests,
            batch=batch,
            trigger_share=trigger_share,
            trigger_topic=self.trigger,
        )

    def publish(self, database: str, round_no: int) -> dict[str, Any]:
        """Rows 3 and 4: single publishes, plain topic and snapshot-trigger topic."""
        server = self.servers[database]
        plain = ph.http_publish(
            server, "http-0", self.load(batch=1, trigger_share=0), seed=round_no
        )
        trigger = ph.http_publish(
            server, "http-1", self.load(batch=1, trigger_share=1), seed=round_no + 50
        )
        return {
            **plain,
            **{f"trigger_{key}": value for key, value in trigger.items()},
        }

    def batch(self, round_no: int) -> dict[str, Any]:
        """Row 5: batches of 100 on each database, plain and with 25 % trigger topics."""
        figures: dict[str, Any] = {}
        for name, server in self.servers.items():
            plain = ph.http_publish(
                server, "http-2", self.load(batch=100, trigger_share=0), seed=round_no
            )
            mixed = ph.http_publish(
                server, "http-3", self.load(batch=100, trigger_share=0.25), seed=round_no + 50
            )
            figures.update({f"{name}_{key}": value for key, value in plain.items()})
            figures.update({f"{name}_trigger25_{key}": value for key, value in mixed.items()})
        return figures

    def websockets(self, round_no: int) -> dict[str, Any]:
        """Row 6: one agent publishing with 200 cluster pages listening, and with none."""
        server = self.servers["sqlite"]
        listened = ph.websocket_publish(
            server,
            "http-4",
            sockets=self.sizes.sockets,
            publishes=self.sizes.ws_publishes,
            seed=round_no * 2 + 1,
        )
        alone = ph.websocket_publish(
            server, "http-5", sockets=0, publishes=self.sizes.ws_publishes, seed=round_no * 2 + 2
        )
        return {
            **listened,
            "none_msg_s": alone["msg_s"],
            "none_publish_p50_ms": alone["publish_p50_ms"],
            "ratio": listened["msg_s"] / alone["msg_s"],
        }

    def close(self) -> dict[str, int]:
        tracebacks = {}
        for name, server in self.servers.items():
            server.stop()
            tracebacks[name] = server.tracebacks()
        if self.admin_url:
            import psycopg

            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        return tracebacks


# --- the run -------------------------------------------------------------------------------------


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(rounds: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    keys = [k for k, v in rounds[0].items() if isinstance(v, int | float)]
    return {key: spread([float(r[key]) for r in rounds]) for key in keys}


def fmt(value: float, unit: str = "") -> str:
    if math.isnan(value):
        return "n/a"
    if unit == X:
        return f"{value:.3f}{X}" if value < 0.1 else f"{value:.2f}{X}"
    if value >= 10_000:
        return f"{value / 1000:.1f}k{unit}"
    if value >= 100:
        return f"{value:,.0f}{unit}"
    return f"{value:.1f}{unit}" if value >= 10 else f"{value:.2f}{unit}"


def figure(summary: dict[str, dict[str, float]], key: str, unit: str = "") -> str:
    if key not in summary:
        return "n/a"
    s = summary[key]
    if len({s["min"], s["max"]}) == 1:
        return fmt(s["median"], unit)
    low, high = (fmt(s[end], unit).removesuffix(unit) for end in ("min", "max"))
    return f"{fmt(s['median'], unit)} [{low}..{high}]"


def verdict(summary: dict[str, dict[str, float]], goal: Goal) -> str:
    if goal.key not in summary:
        return "not measured"
    value = summary[goal.key]["median"]
    met = value <= goal.goal if goal.at_most else value >= goal.goal
    sign = "≤" if goal.at_most else "≥"
    return f"{'**met**' if met else 'missed'} ({sign} {fmt(goal.goal, goal.unit)})"


def table(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(path, figure, against, goal) for each row of the issue's table that was run."""
    s: dict[str, dict[str, dict[str, float]]] = results["summary"]
    out: list[tuple[str, str, str, str]] = []
    if "publish" in s:
        r = s["publish"]
        out.append(
            (
                "`message_publish`, one per transaction, push + snapshotter on (SQLite)",
                f"{figure(r, 'msg_s', ' msg/s')} = {figure(r, 'ratio', X)}",
                f"raw `BEGIN IMMEDIATE` insert, same PRAGMAs, indexes and search triggers: "
                f"{figure(r, 'raw_msg_s', ' msg/s')} (without the search index: "
                f"{figure(r, 'raw_nosearch_msg_s', ' msg/s')}, ours "
                f"{figure(r, 'ratio_nosearch', X)} of it)",
                verdict(r, Goal("ratio", 0.3)),
            )
        )
    if "publish_batch" in s:
        r = s["publish_batch"]
        out.append(
            (
                "`message_publish_batch`, 100 per transaction (SQLite)",
                f"{figure(r, 'msg_s', ' msg/s')} = {figure(r, 'ratio', X)}",
                f"raw `executemany` of 100: {figure(r, 'raw_msg_s', ' msg/s')} (without the "
                f"search index: {figure(r, 'raw_nosearch_msg_s', ' msg/s')}, ours "
                f"{figure(r, 'ratio_nosearch', X)} of it)",
                verdict(r, Goal("ratio", 0.6)),
            )
        )
    for name, goal in (("http_sqlite", 800.0), ("http_postgres", 500.0)):
        if name not in s:
            continue
        r = s[name]
        database = "SQLite" if name == "http_sqlite" else "PostgreSQL"
        out.append(
            (
                f"HTTP, 8 keep-alive clients, single publish, {database} (daphne)",
                f"{figure(r, 'msg_s', ' msg/s')}, p50 {figure(r, 'p50_ms', ' ms')}, "
                f"p99 {figure(r, 'p99_ms', ' ms')}; trigger topic: "
                f"{figure(r, 'trigger_msg_s', ' msg/s')}, p99 {figure(r, 'trigger_p99_ms', ' ms')}",
                f"client CPU {figure(r, 'client_cpu', '')} of a core, server "
                f"{figure(r, 'server_cpu', '')}",
                f"{verdict(r, Goal('msg_s', goal, unit=' msg/s'))}; "
                + (
                    f"p99 {verdict(r, Goal('p99_ms', 50, at_most=True, unit=' ms'))}; "
                    if name == "http_sqlite"
                    else ""
                )
                + f"trigger {verdict(r, Goal('trigger_msg_s', goal, unit=' msg/s'))}",
            )
        )
    if "http_batch" in s:
        r = s["http_batch"]
        for database, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
            if f"{database}_msg_s" not in r:
                continue
            out.append(
                (
                    f"HTTP batch-100, 8 clients, {label}",
                    f"{figure(r, f'{database}_msg_s', ' msg/s')}; 25 % trigger topics: "
                    f"{figure(r, f'{database}_trigger25_msg_s', ' msg/s')}",
                    f"p50 {figure(r, f'{database}_p50_ms', ' ms')} per batch",
                    f"{verdict(r, Goal(f'{database}_msg_s', 20_000, unit=' msg/s'))}; 25 %: "
                    f"{verdict(r, Goal(f'{database}_trigger25_msg_s', 20_000, unit=' msg/s'))}",
                )
            )
    if "websockets" in s:
        r = s["websockets"]
        out.append(
            (
                f"{results['sizes']['sockets']} open cluster-page websockets, one agent "
                "publishing (SQLite)",
                f"{figure(r, 'msg_s', ' msg/s')}, publish p50 {figure(r, 'publish_p50_ms', ' ms')}"
                f" = {figure(r, 'ratio', X)}; push p50 {figure(r, 'push_p50_ms', ' ms')}, "
                f"p95 {figure(r, 'push_p95_ms', ' ms')}; delivered {figure(r, 'delivered')}",
                f"no sockets: {figure(r, 'none_msg_s', ' msg/s')}, "
                f"p50 {figure(r, 'none_publish_p50_ms', ' ms')}",
                f"{verdict(r, Goal('ratio', 0.8))}; push "
                f"{verdict(r, Goal('push_p50_ms', 50, at_most=True, unit=' ms'))}",
            )
        )
    if "context_build" in s:
        r = s["context_build"]
        sizes = results["sizes"]
        big = f"{sizes['context_big']:,}"
        zs = results.get("zeroshot", {})
        against = (
            f"zeroshot {zs.get('commit', '?')} `buildContext` on the same ledger: "
            f"{figure(r, 'zeroshot_small_p50_ms', ' ms')} / "
            f"{figure(r, 'zeroshot_big_p50_ms', ' ms')}"
            if "ratio_small" in r
            else f"zeroshot not measured: {zs.get('absent', '')}"
        )
        out.append(
            (
                f"recorded context build, worker-validator `worker`, 10,000 / {big} messages",
                f"p50 {figure(r, 'ours_small_p50_ms', ' ms')} / "
                f"{figure(r, 'ours_big_p50_ms', ' ms')}"
                f" = {figure(r, 'ratio_small', X)} / {figure(r, 'ratio_big', X)}; "
                f"{big}/10k {figure(r, 'ours_big_over_small', X)}",
                against,
                f"10k {verdict(r, Goal('ratio_small', 0.7, at_most=True))}; big "
                f"{verdict(r, Goal('ratio_big', 0.02, at_most=True))} (goal at 1M); ours "
                f"{verdict(r, Goal('ours_big_over_small', 1.1, at_most=True))}",
            )
        )
    if "import" in s:
        r = s["import"]
        out.append(
            (
                f"`import_zeroshot`, {results['sizes']['context_big']:,} messages",
                f"{figure(r, 'msg_s', ' msg/s')} = {figure(r, 'ratio', X)}",
                f"raw insert into our schema with all its indexes, 20,000 per transaction: "
                f"{figure(r, 'raw_msg_s', ' msg/s')} (without the search index: "
                f"{figure(r, 'raw_nosearch_msg_s', ' msg/s')}, ours "
                f"{figure(r, 'ratio_nosearch', X)} of it)",
                verdict(r, Goal("ratio", 0.9)),
            )
        )
    if "cluster_page" in s:
        r = s["cluster_page"]
        out.append(
            (
                f"cluster page, 100 rows, {results['sizes']['page_messages']:,}-message cluster",
                f"p50 {figure(r, 'p50_ms', ' ms')} server time (p95 {figure(r, 'p95_ms', ' ms')})",
                "Django test client, in process",
                verdict(r, Goal("p50_ms", 8, at_most=True, unit=" ms")),
            )
        )
    if "zeroshot_publish" in s:
        r = s["zeroshot_publish"]
        zs = results.get("zeroshot", {})
        against = (
            f"zeroshot {zs.get('commit', '?')} `MessageBus.publish` → `Ledger.append` "
            f"(better-sqlite3, same PRAGMAs, one process): "
            f"{figure(r, 'zeroshot_msg_s', ' msg/s')}, "
            f"{figure(r, 'zeroshot_cpu_ms', ' ms')} CPU a message; ours uses "
            f"{figure(r, 'cpu_ratio', X)} its CPU"
            if "ratio" in r
            else f"zeroshot not measured: {zs.get('absent', '')}"
        )
        out.append(
            (
                f"`message_publish` beside zeroshot's, {results['sizes']['single']:,} drafts one "
                "per call, push + snapshotter on (SQLite, WAL, `synchronous=NORMAL`)",
                f"{figure(r, 'msg_s', ' msg/s')}, {figure(r, 'cpu_ms', ' ms')} CPU a message"
                f" = {figure(r, 'ratio', X)}",
                against,
                verdict(r, Goal("ratio", 0.3)),
            )
        )
    return out


def markdown(results: dict[str, Any]) -> str:
    rounds = results["sizes"]["rounds"]
    lines = [
        f"# Performance against the goals ({results['mode']} run, {results['created_at']})",
        "",
        f"{rounds} round{'s' if rounds > 1 else ''}, rows interleaved; median [min..max] of the "
        "rounds. Snapshotter and live push on. "
        f"{results['environment']['cpus']} cores, Python {results['environment']['python']}, "
        f"SQLite {results['environment']['sqlite']}, load average "
        f"{results['load_before']} before, {results['load_after']} after.",
        "",
        "| path | figure | against | goal |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {' | '.join(cells)} |" for cells in table(results)]
    for note in results["notes"]:
        lines += ["", f"- {note}"]
    return "\n".join(lines) + "\n"


def with_section(path: Path, rows: Sequence[str], text: str) -> str:
    """``path``'s text with ``text`` as its section for ``rows``: a section headed like this one
    is replaced, any other text is kept, and a file that is not there yet gets the section."""
    heading = f"## Rows {', '.join(rows)}"
    body = text.replace("# Performance", "Performance", 1).strip()
    section = f"{heading}\n\n{body}\n"
    old = path.read_text() if path.exists() else ""
    start = old.find(heading + "\n")
    if start < 0:
        return f"{old.rstrip()}\n\n{section}" if old else section
    end = old.find("\n## ", start + len(heading))
    rest = old[end + 1 :] if end >= 0 else ""
    return f"{old[:start]}{section}" + (f"\n{rest}" if rest else "")


def zeroshot_node() -> str:
    done = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def zeroshot_commit(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {"absent": "no zeroshot checkout given (--zeroshot PATH)"}
    stamp = path / ".zeroshot-commit"
    commit = stamp.read_text().strip() if stamp.exists() else ""
    if not commit:
        done = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        commit = done.stdout.strip() or "unknown commit"
    return {"path": str(path), "commit": commit[:8]}


def parse_only(value: str | None) -> list[str]:
    if not value:
        return list(ROWS)
    wanted = []
    for item in value.split(","):
        item = item.strip()
        name = ROWS[int(item) - 1] if item.isdigit() else item
        if name not in ROWS:
            raise SystemExit(f"unknown row {item!r}; rows: {', '.join(ROWS)} (or 1-{len(ROWS)})")
        wanted.append(name)
    return [row for row in ROWS if row in wanted]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    parser.add_argument("--only", help=f"rows to run, by name or number: {', '.join(ROWS)}")
    parser.add_argument("--postgres", help="a server URL whose database is named bench_…")
    parser.add_argument("--redis", help="the Redis URL of the PostgreSQL server's channel layer")
    parser.add_argument("--zeroshot", type=Path, help="a zeroshot checkout with better-sqlite3")
    parser.add_argument(
        "--reference",
        type=Path,
        default=os.environ.get("ZEROSHOT_BENCH_REFERENCE") or None,
        help="the folder of gen_ledger.py and zs_driver.js (or $ZEROSHOT_BENCH_REFERENCE)",
    )
    parser.add_argument("--rounds", type=int, help="rounds (default: 3; --quick: 1)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument(
        "--profile-publish",
        action="store_true",
        help="after the rounds, profile message_publish (row zeroshot_publish) into the notes",
    )
    parser.add_argument(
        "--section",
        action="store_true",
        help="write the table as a section of bench/results/perf.md (replacing the section of "
        "the same rows), keeping the rest of the file",
    )
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.rounds:
        sizes = replace(sizes, rounds=args.rounds)
    rows = parse_only(args.only)
    notes: list[str] = []
    if args.postgres and not args.redis:
        parser.error("the PostgreSQL rows need --redis too")
    if not args.postgres:
        rows = [r for r in rows if r != "http_postgres"]
        notes.append("PostgreSQL rows skipped: no --postgres URL.")

    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    workdir = Path(tempfile.mkdtemp(prefix="zeroshot-perf-bench-"))
    parts: dict[str, Callable[[int], dict[str, Any]]] = {}
    closers: list[Callable[[], object]] = []
    zs = zeroshot_commit(args.zeroshot)
    http_tracebacks: dict[str, int] = {}
    try:
        django_setup(workdir)
        print(f"setting up {', '.join(rows)} in {workdir}", flush=True)
        if {"publish", "publish_batch"} & set(rows):
            publish = Publish(sizes, workdir)
            for name in ("publish", "publish_batch"):
                if name in rows:
                    parts[name] = lambda n, name=name: publish.measure(name, n)  # type: ignore[misc]
        if {"context_build", "import"} & set(rows):
            ledgers = ZeroshotLedgers(sizes, workdir, args.reference)
            ledgers.make(small="context_build" in rows)
            if args.reference is None:
                notes.append(
                    "No --reference folder: the import used bench/make_zeroshot_ledger.py's "
                    "ledger, and the context build needs gen_ledger.py's worker-validator run."
                )
            if "context_build" in rows and args.reference is not None:
                driver = args.reference / "zs_driver.js"
                build = ContextBuild(sizes, ledgers, args.zeroshot, driver)
                closers.append(build.close)
                parts["context_build"] = build.measure
                if build.absent:
                    zs["absent"] = build.absent
                    notes.append(f"zeroshot's builder not measured: {build.absent}.")
            elif "context_build" in rows:
                rows.remove("context_build")
            if "import" in rows:
                parts["import"] = Import(ledgers, workdir).measure
        if "cluster_page" in rows:
            parts["cluster_page"] = ClusterPage(sizes).measure
        if "zeroshot_publish" in rows:
            zs_publish = ZeroshotPublish(sizes, workdir, args.zeroshot)
            closers.append(zs_publish.close)
            parts["zeroshot_publish"] = zs_publish.measure
            if zs_publish.absent:
                zs["absent"] = zs_publish.absent
                notes.append(f"zeroshot's publish not measured: {zs_publish.absent}.")
        if HTTP_ROWS & set(rows):
            from django.db import connection

            connection.close()
            http = Http(sizes, workdir, set(rows), args.postgres, args.redis)
            closers.append(lambda: http_tracebacks.update(http.close()))
            if "http_sqlite" in rows:
                parts["http_sqlite"] = lambda n: http.publish("sqlite", n)
            if "http_postgres" in rows:
                parts["http_postgres"] = lambda n: http.publish("postgres", n)
            if "http_batch" in rows:
                parts["http_batch"] = http.batch
            if "websockets" in rows:
                parts["websockets"] = http.websockets

        measured: dict[str, list[dict[str, Any]]] = {name: [] for name in parts}
        for round_no in range(sizes.rounds):
            for name in [r for r in ROWS if r in parts]:
                began = time.perf_counter()
                measured[name].append(parts[name](round_no))
                print(
                    f"round {round_no + 1}/{sizes.rounds} {name}: "
                    f"{time.perf_counter() - began:.1f}s",
                    flush=True,
                )
        if "zeroshot_publish" in parts and zs_publish.versions:
            notes.append(
                f"zeroshot's publish ran on node {zeroshot_node()}, {zs_publish.versions}; "
                "ours on Python's sqlite3 (the SQLite in the header). zeroshot's bus had no "
                "listener but its own forwarding and no websocket client; ours ran with the "
                "push and the snapshotter subscribed, as a server."
            )
        if "zeroshot_publish" in parts and args.profile_publish:
            notes += zs_publish.profile()
    finally:
        for close in closers:
            close()
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if any(http_tracebacks.values()):
        notes.append(f"tracebacks in the servers' logs: {http_tracebacks}.")
    if HTTP_ROWS & set(measured):
        notes.append(
            "HTTP rows: `API_RATE_LIMIT` off (the default 3000/m per key would answer 429); "
            "client and server share the machine's cores."
        )
    results: dict[str, Any] = {
        "benchmark": "perf",
        "mode": "quick" if args.quick else "full",
        "created_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "environment": lb.environment(),
        "sizes": asdict(sizes),
        "rows": list(measured),
        "zeroshot": zs,
        "rounds": measured,
        "summary": {name: summarize(values) for name, values in measured.items()},
        "notes": notes,
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "total_seconds": time.perf_counter() - started,
    }
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    text = markdown(results)
    figures = RESULTS_JSON
    if args.section:  # the full run's figures stay where they are
        text = with_section(RESULTS_MD, rows, text)
        figures = RESULTS_JSON.with_name(f"perf-{'-'.join(rows)}.json")
    figures.write_text(json.dumps(results, indent=2) + "\n")
    RESULTS_MD.write_text(text)
    print(text)
    print(f"written to {RESULTS_MD.relative_to(ROOT)} in {results['total_seconds']:.0f}s")


if __name__ == "__main__":
    main()
