"""Runner benchmark: the runner's own overhead per task, and tasks per second through one runner.

Usage: ``.venv/bin/python bench/runner_bench.py [--quick]`` (see bench/README.md).

The runner works against the in-memory work API of the runner's tests, served over HTTP on
loopback (in this process, or apart), and against the real server: daphne over a fresh SQLite
database, set up as ``bench/runs_bench.py`` does. It prints a table and writes
``bench/results/runner.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402 - after the path set-up above

from tests.runner.work_api_fake import FakeWorkApi  # noqa: E402
from zeroshot_runner.backoff import Backoff  # noqa: E402
from zeroshot_runner.client import WorkClient  # noqa: E402
from zeroshot_runner.providers.base import Provider  # noqa: E402
from zeroshot_runner.providers.command import CommandProvider  # noqa: E402
from zeroshot_runner.providers.scripted import ScriptedProvider, script_from_json  # noqa: E402
from zeroshot_runner.worker import Runner, RunnerSettings, TaskReport  # noqa: E402

RESULTS_PATH = ROOT / "bench" / "results" / "runner.json"
PROMPT = "## Task\nFix the failing test in parser.py.\n" + "context line\n" * 200


@dataclass(frozen=True, slots=True)
class Api:
    """A work API holding queued tasks: where it is, and how many tasks it has completed."""

    url: str
    completed: Callable[[], int]
    key: str = "test-key"
    cluster: str = "c1"
    # Ends the cluster once every task is done, so that ``--exit-when-done`` ends the runner
    # (the fake ends its cluster by itself when it runs out of tasks).
    finish: Callable[[], None] = lambda: None


Fake = Callable[[int], AbstractContextManager[Api]]
RESULT = {"summary": "fixed", "completionStatus": {"canValidate": True, "percentComplete": 100}}


@dataclass(frozen=True, slots=True)
class Sizes:
    overhead_tasks: int
    throughput_tasks: int
    command_tasks: int
    warmup: int


FULL = Sizes(overhead_tasks=500, throughput_tasks=2000, command_tasks=300, warmup=50)
QUICK = Sizes(overhead_tasks=100, throughput_tasks=400, command_tasks=60, warmup=20)


def filled_fake(tasks: int) -> FakeWorkApi:
    fake = FakeWorkApi()
    fake.end_when_idle = True
    for n in range(tasks):
        fake.add_task(agent_id="worker", iteration=n + 1, prompt=PROMPT)
    return fake


def completed_count(fake: FakeWorkApi) -> int:
    return sum(1 for task in fake.tasks.values() if task.state == "completed")


@contextmanager
def fake_here(tasks: int) -> Iterator[Api]:
    """The fake work API in this process, sharing the interpreter (and its GIL) with the runner."""
    with filled_fake(tasks).running() as fake:
        yield Api(fake.url, lambda: completed_count(fake))


def _serve(connection: Connection, tasks: int) -> None:
    with filled_fake(tasks).running() as fake:
        connection.send(fake.url)
        while connection.recv() == "count":
            connection.send(completed_count(fake))


@contextmanager
def fake_apart(tasks: int) -> Iterator[Api]:
    """The fake work API in a process of its own, so that its work does not slow the runner's."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=_serve, args=(theirs, tasks), daemon=True)
    process.start()

    def count() -> int:
        ours.send("count")
        return int(ours.recv())

    try:
        yield Api(ours.recv(), count)
    finally:
        ours.send("stop")
        process.join(10)


@contextmanager
def server(tasks: int) -> Iterator[Api]:
    """The real server: daphne over a fresh SQLite database, serving a running cluster with
    ``tasks`` queued tasks (set up by bench/runs_bench.py)."""
    import runs_bench

    with (
        tempfile.TemporaryDirectory(prefix="zeroshot-runner-bench-") as tmp,
        runs_bench.served_cluster(f"sqlite:///{Path(tmp) / 'bench.sqlite3'}", Path(tmp), tasks) as (
            url,
            key,
            completed,
        ),
    ):

        def finish() -> None:
            httpx.post(
                f"{url}/api/v1/clusters/tps/stop",
                headers={"Authorization": f"Bearer {key}"},
                timeout=30,
            ).raise_for_status()

        yield Api(url, completed, key=key, cluster="tps", finish=finish)


def work(
    provider: Provider, *, tasks: int, concurrency: int, warmup: int, fake: Fake = fake_here
) -> list[TaskReport]:
    """Queue ``warmup + tasks`` tasks, run one runner over them, return the measured reports."""
    reports: list[TaskReport] = []
    with fake(warmup + tasks) as api:
        client = WorkClient(url=api.url, key=api.key, backoff=Backoff(attempts=2))
        runner = Runner(
            client=client,
            provider=provider,
            settings=RunnerSettings(
                worker="bench",
                cluster=api.cluster,
                concurrency=concurrency,
                wait=0.2,
                lease=60.0,
                exit_when_done=True,
            ),
            observer=reports.append,
        )
        thread = threading.Thread(target=runner.run)
        thread.start()
        while thread.is_alive() and len(reports) < warmup + tasks:
            time.sleep(0.05)
        api.finish()
        thread.join()
        client.close()
        assert api.completed() == warmup + tasks, "every task must complete"
    assert all(report.status == "completed" for report in reports)
    # Warm-up tasks are the first ones claimed.
    return sorted(reports, key=lambda report: report.claim_sent)[warmup:]


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(fraction * len(ordered)) - 1))]


def overhead(reports: list[TaskReport]) -> dict[str, Any]:
    """Claim → provider start and provider end → completion acknowledged, in milliseconds."""
    start = [(r.provider_started - r.claim_sent) * 1000 for r in reports]
    end = [(r.finished - r.provider_ended) * 1000 for r in reports]
    provider = [(r.provider_ended - r.provider_started) * 1000 for r in reports]
    return {
        "tasks": len(reports),
        "claim_to_start_ms": {"p50": statistics.median(start), "p95": percentile(start, 0.95)},
        "end_to_completed_ms": {"p50": statistics.median(end), "p95": percentile(end, 0.95)},
        "provider_ms_p50": statistics.median(provider),
    }


def throughput(reports: list[TaskReport]) -> dict[str, Any]:
    """Tasks per second from the first measured claim to the last acknowledgement."""
    seconds = max(r.finished for r in reports) - min(r.claim_sent for r in reports)
    return {"tasks": len(reports), "seconds": seconds, "tasks_per_second": len(reports) / seconds}


def scripted(lines: int, agents: tuple[str, ...] = ("worker",)) -> ScriptedProvider:
    entry = {"result": RESULT, "output": [f"step {n}" for n in range(lines)]}
    return ScriptedProvider(script_from_json({agent: [entry] for agent in agents}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer tasks, a smoke run")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    started = time.perf_counter()
    load_before = os.getloadavg()

    quiet = scripted(0)
    # The served cluster's agents (runs_bench.served_cluster): a0 … a15.
    served_quiet = scripted(0, tuple(f"a{n}" for n in range(16)))
    chatty = scripted(3)
    echo = CommandProvider(
        command=f"cat >/dev/null; echo '{json.dumps(RESULT)}'", default_timeout=30.0
    )
    results = {
        "benchmark": "runner",
        "mode": "quick" if args.quick else "full",
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": {
            "python": platform.python_version(),
            "httpx": httpx.__version__,
            "machine": platform.machine(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "overhead_scripted_no_output": overhead(
            work(quiet, tasks=sizes.overhead_tasks, concurrency=1, warmup=sizes.warmup)
        ),
        "overhead_scripted_3_lines": overhead(
            work(chatty, tasks=sizes.overhead_tasks, concurrency=1, warmup=sizes.warmup)
        ),
        "overhead_scripted_no_output_fake_apart": overhead(
            work(
                quiet,
                tasks=sizes.overhead_tasks,
                concurrency=1,
                warmup=sizes.warmup,
                fake=fake_apart,
            )
        ),
        "throughput_scripted_c8": throughput(
            work(quiet, tasks=sizes.throughput_tasks, concurrency=8, warmup=sizes.warmup)
        ),
        "throughput_scripted_c1": throughput(
            work(quiet, tasks=sizes.throughput_tasks // 2, concurrency=1, warmup=sizes.warmup)
        ),
        "throughput_scripted_c8_fake_apart": throughput(
            work(
                quiet,
                tasks=sizes.throughput_tasks,
                concurrency=8,
                warmup=sizes.warmup,
                fake=fake_apart,
            )
        ),
        "throughput_command_c8": throughput(
            work(echo, tasks=sizes.command_tasks, concurrency=8, warmup=sizes.warmup)
        ),
        "overhead_scripted_no_output_server": overhead(
            work(
                served_quiet,
                tasks=sizes.overhead_tasks,
                concurrency=1,
                warmup=sizes.warmup,
                fake=server,
            )
        ),
        "throughput_scripted_c8_server": throughput(
            work(
                served_quiet,
                tasks=sizes.throughput_tasks // 4,
                concurrency=8,
                warmup=sizes.warmup,
                fake=server,
            )
        ),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "total_seconds": time.perf_counter() - started,
    }
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_PATH.write_text(json.dumps(results, indent=2) + "\n")
    print_report(results)


def print_report(results: dict[str, Any]) -> None:
    print(
        f"\nRunner benchmark ({results['mode']}), Python {results['environment']['python']}, "
        f"httpx {results['environment']['httpx']}, {results['environment']['cpus']} CPUs"
    )
    print("\noverhead per task (concurrency 1)     claim→start p50/p95   end→completed p50/p95")
    for key, label in (
        ("overhead_scripted_no_output", "scripted, no output"),
        ("overhead_scripted_3_lines", "scripted, 3 output lines"),
        ("overhead_scripted_no_output_fake_apart", "scripted, no output, fake apart"),
        ("overhead_scripted_no_output_server", "scripted, no output, real server"),
    ):
        row = results[key]
        start, end = row["claim_to_start_ms"], row["end_to_completed_ms"]
        print(
            f"  {label:<34} {start['p50']:6.2f} / {start['p95']:6.2f} ms"
            f"     {end['p50']:6.2f} / {end['p95']:6.2f} ms"
        )
    print("\nthroughput                            tasks     seconds    tasks/s")
    for key, label in (
        ("throughput_scripted_c8", "scripted, returns at once, c=8"),
        ("throughput_scripted_c1", "scripted, returns at once, c=1"),
        ("throughput_scripted_c8_fake_apart", "same, c=8, fake apart"),
        ("throughput_command_c8", "command (sh: cat; echo), c=8"),
        ("throughput_scripted_c8_server", "scripted, c=8, real server (SQLite)"),
    ):
        row = results[key]
        rate = row["tasks_per_second"]
        print(f"  {label:<34} {row['tasks']:6d}  {row['seconds']:9.2f}  {rate:9.1f}")
    load = results["load_average"]
    print(
        f"\nload average {load['before'][0]:.2f} → {load['after'][0]:.2f}; "
        f"written to {RESULTS_PATH.relative_to(ROOT)} in {results['total_seconds']:.0f}s"
    )


if __name__ == "__main__":
    main()
