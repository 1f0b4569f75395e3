"""Dashboard benchmarks: server render time of the cluster page and the inspector, live latency.

Usage: ``.venv/bin/python bench/dashboard_bench.py [--quick] [--keep]`` (see bench/README.md).

Part 1 renders ``/clusters/<id>/`` and ``/clusters/<id>/agents/worker/`` in-process through
Django's test ``Client`` on a big and a small worker-validator cluster (raw-filled like the ledger
benchmark), interleaved. Part 2 starts daphne in a subprocess on the same SQLite file, opens the
big cluster's page in Chromium (Playwright) and times each message from the start of its publish
(``POST /api/v1/clusters/<id>/messages``) to its row appearing in the page's timeline.

The run uses its own SQLite file in a fresh temporary directory, never ``data/``; it prints a
table and writes ``bench/results/dashboard.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ledger_bench as lb  # a sibling script: its fast filler, setup and percentile

RESULTS_PATH = lb.ROOT / "bench" / "results" / "dashboard.json"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
HOSTS = "127.0.0.1,localhost"
ASGI_APP = "zeroshot_web.asgi:application"
TEMPLATE = "worker-validator"
AGENT = "worker"
ISSUE_TEXT = "# Add a login button\n\nIt goes in the header."
MARKER = "dashbench"
# Records, in the page, when a timeline row carrying a marker is first inserted. Date.now() and
# Python's time.time() read the same wall clock: the browser runs on this machine.
OBSERVER_JS = """(pattern) => {
  window.__dashSeen = {};
  const marker = new RegExp(pattern);
  new MutationObserver((records) => {
    const now = Date.now();
    for (const record of records) {
      for (const node of record.addedNodes) {
        if (node.nodeType !== Node.ELEMENT_NODE) { continue; }
        const rows = node.matches("li.msg") ? [node] : node.querySelectorAll("li.msg");
        for (const row of rows) {
          if (!row.closest("#timeline-rows")) { continue; }
          const found = marker.exec(row.textContent);
          if (found && !(found[0] in window.__dashSeen)) { window.__dashSeen[found[0]] = now; }
        }
      }
    }
  }).observe(document.body, { childList: true, subtree: true });
}"""


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much each measurement does; ``--quick`` shrinks them for a smoke run."""

    big: int
    small: int
    requests: int
    warmup: int
    publishes: int
    publish_warmup: int


FULL = Sizes(big=100_000, small=1_000, requests=100, warmup=10, publishes=50, publish_warmup=3)
QUICK = Sizes(big=10_000, small=1_000, requests=40, warmup=5, publishes=20, publish_warmup=2)


# --- setup ----------------------------------------------------------------------------------


def make_cluster(cluster_id: str, count: int, agents: list[Any], *, seed: int) -> dict[str, Any]:
    """A worker-validator cluster: a raw bulk fill, then the anchors the inspector shows."""
    from ledger.interfaces import ImportedMessage, message_import_batch
    from ledger.models import Cluster

    filled = lb.fill_cluster(cluster_id, count, seed=seed)
    Cluster.objects.filter(pk=cluster_id).update(config={"agents": agents}, template=TEMPLATE)
    base = 1_770_000_000_000 + count
    anchors = [
        ("ISSUE_OPENED", "system", {"text": ISSUE_TEXT}),
        (
            "STATE_SNAPSHOT",
            "state-snapshotter",
            {"text": "Task: Add a login button", "data": {"version": 1}},
        ),
        ("VALIDATION_RESULT", "validator", {"text": "Missing tests", "data": {"approved": False}}),
        ("IMPLEMENTATION_READY", "worker", {"text": "Button added"}),
    ]
    message_import_batch(
        cluster_id=cluster_id,
        messages=[
            ImportedMessage(
                f"anchor-{cluster_id}-{i}", base + i, topic, sender, "broadcast", c, None
            )
            for i, (topic, sender, c) in enumerate(anchors)
        ],
    )
    return {"messages": count + len(anchors), "fill_seconds": filled["fill_seconds"]}


# --- part 1: server render time ---------------------------------------------------------------


class SqlTimer:
    """Nanoseconds spent inside the database driver's ``execute`` (Django's execute_wrapper)."""

    def __init__(self) -> None:
        self.nanos = 0

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        started = time.perf_counter_ns()
        try:
            return execute(sql, params, many, context)
        finally:
            self.nanos += time.perf_counter_ns() - started


def check_page(page: str, html: str) -> None:
    """The response is the page we mean to time, with the content it should have."""
    from ledger.selectors import TIMELINE_PAGE

    if page == "cluster":
        rows = html.count('<li class="msg"')
        assert rows == TIMELINE_PAGE, f"cluster page shows {rows} rows, not the UI's page size"
        assert "Task: Add a login button" in html  # the snapshot panel
    else:
        assert "Add a login button" in html, "inspector shows no ISSUE_OPENED pack"
        assert "Missing tests" in html, "inspector shows no VALIDATION_RESULT pack"


def measure_render(clusters: dict[str, str], sizes: Sizes) -> dict[str, Any]:
    """Time each page on each cluster, interleaved; count queries once per page and cluster."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    user = get_user_model().objects.create_user("bench-operator", is_staff=True)
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    urls = {
        (size, page): url
        for size, cluster_id in clusters.items()
        for page, url in (
            ("cluster", f"/clusters/{cluster_id}/"),
            ("inspector", f"/clusters/{cluster_id}/agents/{AGENT}/"),
        )
    }

    def get(url: str) -> Any:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        return response

    queries: dict[tuple[str, str], list[str]] = {}
    sizes_bytes: dict[tuple[str, str], int] = {}
    for key, url in urls.items():
        response = get(url)
        check_page(key[1], response.content.decode())
        sizes_bytes[key] = len(response.content)
        with CaptureQueriesContext(connection) as captured:
            get(url)
        queries[key] = [q["sql"] for q in captured.captured_queries]
        for _ in range(sizes.warmup):
            get(url)

    timer = SqlTimer()
    samples: dict[tuple[str, str], list[tuple[int, int]]] = {key: [] for key in urls}
    with connection.execute_wrapper(timer):
        for _ in range(sizes.requests):
            for key, url in urls.items():
                timer.nanos = 0
                started = time.perf_counter_ns()
                get(url)
                samples[key].append((time.perf_counter_ns() - started, timer.nanos))

    pages: dict[str, dict[str, Any]] = {}
    for (size, page), values in samples.items():
        totals = sorted(total for total, _ in values)
        sql_share = sum(sql for _, sql in values) / sum(total for total, _ in values)
        pages.setdefault(page, {})[size] = {
            "url": urls[(size, page)],
            "requests": len(values),
            "p50_ms": lb.percentile(totals, 0.50) / 1e6,
            "p95_ms": lb.percentile(totals, 0.95) / 1e6,
            "min_ms": totals[0] / 1e6,
            "share_sql": sql_share,
            "queries": len(queries[(size, page)]),
            "sql": queries[(size, page)],
            "response_bytes": sizes_bytes[(size, page)],
        }
    for figures in pages.values():
        figures["ratio_p50_big_over_small"] = figures["big"]["p50_ms"] / figures["small"]["p50_ms"]
        figures["ratio_p95_big_over_small"] = figures["big"]["p95_ms"] / figures["small"]["p95_ms"]
    return pages


def slowest_queries(cluster_id: str, page_sql: Sequence[str]) -> list[dict[str, Any]]:
    """Each query of a page timed alone through plain sqlite3 (median of 20), slowest first."""
    conn = lb.raw_connect(lb.db_path())
    try:
        timed = []
        for sql in page_sql:
            if not sql.lstrip().upper().startswith("SELECT"):
                continue
            runs = []
            for _ in range(20):
                started = time.perf_counter_ns()
                conn.execute(sql).fetchall()
                runs.append(time.perf_counter_ns() - started)
            plan = [row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()]
            timed.append({"sql": sql, "p50_ms": sorted(runs)[10] / 1e6, "plan": plan})
    finally:
        conn.close()
    return sorted(timed, key=lambda q: -q["p50_ms"])[:3]


# --- part 2: publish to row in the browser ---------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_daphne(workdir: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """Daphne over the benchmark's SQLite file, static files collected for whitenoise."""
    data_dir = workdir / "live-server"
    data_dir.mkdir()
    env = {
        **os.environ,
        "DATABASE_URL": "sqlite:///" + str(lb.db_path().resolve()),
        "ZEROSHOT_DATA_DIR": str(data_dir),
        "DJANGO_SETTINGS_MODULE": "zeroshot_web.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "bench-only-key-of-a-throwaway-database",
        "DJANGO_ALLOWED_HOSTS": HOSTS,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    env.pop("REDIS_URL", None)  # the in-memory channel layer, in the one process that publishes
    subprocess.run(
        [sys.executable, str(lb.ROOT / "manage.py"), "collectstatic", "--noinput", "-v", "0"],
        env=env,
        cwd=lb.ROOT,
        check=True,
    )
    port = free_port()
    log = data_dir / "daphne.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), ASGI_APP],
            env=env,
            cwd=lb.ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 20
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited early:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            if time.monotonic() > deadline:
                stop(process)
                raise RuntimeError(f"daphne did not listen on {port}:\n{log.read_text()}") from None
            time.sleep(0.05)
    return process, f"http://127.0.0.1:{port}", log


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def publish(base_url: str, cluster_id: str, key: str, text: str) -> None:
    """Publish like an agent does: one plain HTTP request with a Bearer key."""
    body = {"topic": "AGENT_OUTPUT", "sender": AGENT, "content": {"text": text}}
    request = urllib.request.Request(
        f"{base_url}/api/v1/clusters/{cluster_id}/messages",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201, response.status


def live_credentials() -> tuple[str, str, str]:
    """A session cookie for the browser and an API key for the publisher (made before Playwright
    starts: its event loop on this thread would make Django refuse ORM calls)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from ledger.keys import api_key_create

    user = get_user_model().objects.create_user("bench-live-operator", is_staff=True)
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    _, key = api_key_create(name="dashboard-bench-agent")
    connection.close()  # nothing of ours may hold the SQLite file while daphne writes to it
    return settings.SESSION_COOKIE_NAME, session, key


def measure_live(workdir: Path, cluster_id: str, sizes: Sizes) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    from ledger.selectors import TIMELINE_PAGE

    cookie_name, session, key = live_credentials()
    process, base_url, log = start_daphne(workdir)
    errors: list[str] = []
    latencies: list[float] = []
    round_trips: list[float] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 860})
            context.add_cookies([{"name": cookie_name, "value": session, "url": base_url}])
            page = context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            started = time.perf_counter()
            page.goto(f"{base_url}/clusters/{cluster_id}/")
            page.wait_for_selector("[data-live-status][data-state=open]", timeout=15_000)
            page_open_s = time.perf_counter() - started
            # The page opens on its newest rows; the server's state snapshotter publishes
            # STATE_SNAPSHOT rows of its own on this filled cluster, which may already be in.
            assert page.locator("#timeline-rows li.msg").count() >= TIMELINE_PAGE
            page.evaluate(OBSERVER_JS, rf"{MARKER}-\d+")
            for i in range(sizes.publish_warmup + sizes.publishes):
                marker = f"{MARKER}-{i:04d}"
                published_ms = time.time() * 1000
                publish(base_url, cluster_id, key, f"{marker} live row from the benchmark")
                acked_ms = time.time() * 1000
                seen_ms = page.wait_for_function(
                    "(m) => window.__dashSeen[m]", arg=marker, timeout=10_000
                ).json_value()
                if i >= sizes.publish_warmup:
                    latencies.append(seen_ms - published_ms)
                    round_trips.append(acked_ms - published_ms)
            # Only the benchmark's own rows are counted, not the snapshotter's.
            ours = page.locator("#timeline-rows li.msg", has_text=MARKER).count()
            assert ours == sizes.publish_warmup + sizes.publishes, ours
            browser.close()
    finally:
        stop(process)
    server_errors = [
        line for line in log.read_text(errors="replace").splitlines() if "Traceback" in line
    ]
    latencies.sort()
    round_trips.sort()
    return {
        "cluster": cluster_id,
        "publishes": len(latencies),
        "warmup_publishes": sizes.publish_warmup,
        "p50_ms": lb.percentile(latencies, 0.50),
        "p95_ms": lb.percentile(latencies, 0.95),
        "max_ms": latencies[-1],
        "min_ms": latencies[0],
        "publish_round_trip_p50_ms": lb.percentile(round_trips, 0.50),
        "publish_round_trip_p95_ms": lb.percentile(round_trips, 0.95),
        "page_open_to_live_s": page_open_s,
        "console_errors": errors,
        "server_tracebacks": len(server_errors),
    }


# --- report ---------------------------------------------------------------------------------


def print_report(results: dict[str, Any]) -> None:
    render, live, messages = results["render"], results["live"], results["messages"]
    print(
        f"\nDashboard benchmark ({results['mode']}), SQLite {results['environment']['sqlite']}, "
        f"{results['sizes']['requests']} requests per page and cluster (test Client, in-process)"
    )
    loads = (results["environment"][f"load_average_at_{when}"][0] for when in ("start", "end"))
    print("load average (1 min) at start and end: {:.1f}, {:.1f}".format(*loads))
    print(
        f"\n{'page':<11}{'cluster':<8}{'messages':>10}{'p50 ms':>9}{'p95 ms':>9}"
        f"{'SQL':>6}{'queries':>9}{'KiB':>7}   big/small p50  p95"
    )
    for page, figures in render.items():
        for size in ("big", "small"):
            row = figures[size]
            line = (
                f"{page:<11}{size:<8}{messages[size]:>10,}{row['p50_ms']:>9.2f}"
                f"{row['p95_ms']:>9.2f}{row['share_sql']:>6.0%}{row['queries']:>9}"
                f"{row['response_bytes'] / 1024:>7.0f}"
            )
            if size == "big":
                line += (
                    f"   {figures['ratio_p50_big_over_small']:>13.2f}"
                    f"{figures['ratio_p95_big_over_small']:>5.2f}"
                )
            print(line)
    print(
        f"\nPublish → row in the browser ({live['publishes']} messages, cluster of "
        f"{messages['big']:,}, daphne + Chromium):"
    )
    print(
        f"  p50 {live['p50_ms']:.1f} ms   p95 {live['p95_ms']:.1f} ms   max {live['max_ms']:.1f} ms"
        f"   (the POST's own round trip: p50 {live['publish_round_trip_p50_ms']:.1f} ms, "
        f"p95 {live['publish_round_trip_p95_ms']:.1f} ms)"
    )
    print(f"  page load until the socket is open: {live['page_open_to_live_s']:.2f} s")
    if live["console_errors"] or live["server_tracebacks"]:
        print(
            f"  console errors: {live['console_errors']}; tracebacks: {live['server_tracebacks']}"
        )
    print(f"\nwritten to {RESULTS_PATH.relative_to(lb.ROOT)} in {results['total_seconds']:.0f}s")


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
    load_at_start = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="zeroshot-dashboard-bench-"))
    try:
        # The test Client asks for host "localhost"; DEBUG is off, so it must be allowed.
        os.environ["DJANGO_ALLOWED_HOSTS"] = HOSTS
        lb.django_setup(workdir)
        from context.cluster_templates import template_builtin_list, template_resolve
        from ledger.bus import bus
        from ledger.selectors import TIMELINE_PAGE

        bus.push_enabled = False  # nobody listens in this process
        agents = template_resolve(template_builtin_list()[TEMPLATE], {})["agents"]
        assert isinstance(agents, list)
        clusters = {"big": "dash-big", "small": "dash-small"}
        fills = {
            "big": make_cluster(clusters["big"], sizes.big, agents, seed=21),
            "small": make_cluster(clusters["small"], sizes.small, agents, seed=22),
        }
        analyze_seconds = lb.analyze()
        render = measure_render(clusters, sizes)
        slowest = {
            page: slowest_queries(clusters["big"], figures["big"]["sql"])
            for page, figures in render.items()
        }
        live = measure_live(workdir, clusters["big"], sizes)
        import django

        results = {
            "benchmark": "dashboard",
            "mode": "quick" if args.quick else "full",
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            # Other work on the machine moves every figure: say how busy it was.
            "environment": {
                **lb.environment(),
                "django": django.get_version(),
                "load_average_at_start": load_at_start,
                "load_average_at_end": os.getloadavg(),
            },
            "sizes": {
                "big": sizes.big,
                "small": sizes.small,
                "requests": sizes.requests,
                "warmup_requests": sizes.warmup,
                "publishes": sizes.publishes,
                "timeline_page": TIMELINE_PAGE,
            },
            "messages": {size: fill["messages"] for size, fill in fills.items()},
            "fill_seconds": {size: fill["fill_seconds"] for size, fill in fills.items()},
            "analyze_seconds": analyze_seconds,
            "render": render,
            "slowest_queries_big": slowest,
            "live": live,
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
