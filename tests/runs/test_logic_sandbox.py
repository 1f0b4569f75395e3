"""The sandbox itself: limits, errors as values, a fresh scope every time, no I/O, threads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from runs.logic import (
    ERROR_TEXT_MAX,
    AgentInfo,
    ClusterInfo,
    LedgerView,
    LogicError,
    TransformMessage,
    TriggerOutcome,
    hook_logic_evaluate,
    transform_evaluate,
    trigger_logic_evaluate,
)
from runs.logic.engine import POOL_SIZE_DEFAULT, sandbox_pool_configure
from tests.runs.ledger_data import Run

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ClusterInfo(id="run-1", agents=({"id": "worker", "role": "implementation"},))


def offered() -> dict[str, object]:
    return Run().publish("ISSUE_OPENED", "system", text="fix the bug")


def trigger(script: str, view: LedgerView | None = None) -> TriggerOutcome | LogicError:
    return trigger_logic_evaluate(
        script, message=offered(), view=view or LedgerView(), cluster=CLUSTER
    )


def assert_still_works() -> None:
    assert trigger("return message.sender === 'system';") == TriggerOutcome(passed=True)


@pytest.mark.parametrize(
    ("value", "passed"),
    [
        ("true", True),
        ("1", True),
        ("'no'", True),
        ("{}", True),
        ("[]", True),
        ("false", False),
        ("0", False),
        ("''", False),
        ("null", False),
        ("undefined", False),
        ("NaN", False),
    ],
)
def test_a_trigger_passes_on_javascript_truthiness(value: str, passed: bool) -> None:
    assert trigger(f"return {value};") == TriggerOutcome(passed=passed)


def test_a_script_without_return_does_not_pass() -> None:
    assert trigger("const x = 1;") == TriggerOutcome(passed=False)


def test_a_thrown_error_is_a_value_naming_the_line() -> None:
    # given a script that reads a property of undefined on its second line
    script = "const status = message.content.data;\nreturn status.canValidate;"

    # when it runs
    outcome = trigger(script)

    # then the caller gets the error as a value, with the script's line
    assert isinstance(outcome, LogicError)
    assert outcome.kind == "script"
    assert outcome.message.startswith("TypeError: cannot read property 'canValidate'")
    assert "script:2" in outcome.message
    assert_still_works()


@pytest.mark.parametrize(
    ("script", "text"),
    [
        ("throw 'plain words';", "plain words"),
        ("throw { code: 7 };", '{"code":7}'),
        ("return (;", "SyntaxError"),
        ("return notDefined;", "ReferenceError: 'notDefined' is not defined"),
        ("function f(n) { return f(n + 1) + 1; }\nreturn f(0);", "stack overflow"),
    ],
)
def test_every_kind_of_failure_is_a_script_error(script: str, text: str) -> None:
    outcome = trigger(script)

    assert isinstance(outcome, LogicError)
    assert outcome.kind == "script"
    assert text in outcome.message


def test_a_script_that_is_not_unicode_text_is_an_error() -> None:
    # JSON can carry a lone surrogate ("\\ud800"), which no engine can read as source text
    outcome = trigger("return '\ud800';")

    assert outcome == LogicError(
        "script", "the script holds a lone surrogate, which is not Unicode text"
    )
    assert_still_works()


def test_error_text_is_at_most_2000_characters() -> None:
    outcome = trigger("throw new Error('x'.repeat(10000));")

    assert isinstance(outcome, LogicError)
    assert len(outcome.message) == ERROR_TEXT_MAX
    assert outcome.message.endswith("…")


@pytest.mark.timed
def test_an_endless_loop_is_stopped_at_its_limit() -> None:
    # given a script that never ends, and one that even catches what stops it
    for script in ("while (true) {}", "for (;;) { try { while (true) {} } catch (e) {} }"):
        # when it runs
        started = time.monotonic()
        outcome = trigger(script)
        elapsed = time.monotonic() - started

        # then it is a timeout within about a second, and the next script runs normally
        assert outcome == LogicError("timeout", "the script ran past its 1 s time limit")
        assert 0.9 <= elapsed < 2.5
        assert_still_works()


def test_a_gigabyte_allocation_is_stopped_by_the_memory_limit() -> None:
    for script in (
        "const a = new Array(1e9).fill(0); return a.length;",
        "const chunks = []; while (true) chunks.push(new Array(1e6).fill(chunks.length));",
        "let s = 'x'; while (true) s = s + s;",
    ):
        started = time.monotonic()
        outcome = trigger(script)

        assert isinstance(outcome, LogicError)
        assert outcome.kind == "memory"
        assert time.monotonic() - started < 2.5
        assert_still_works()


def test_a_builtin_that_ignores_the_time_limit_is_killed_at_the_wall_deadline() -> None:
    # given a regular expression that backtracks for hours: QuickJS never checks the time in it
    script = "return /(a+)+$/.test('a'.repeat(40) + 'b');"

    # when it runs
    started = time.monotonic()
    outcome = trigger(script)

    # then its worker is killed after the limit and its grace, and the next script runs
    assert outcome == LogicError("timeout", "the script ran past its 1 s time limit")
    assert time.monotonic() - started < 3
    assert_still_works()


def test_a_dead_sandbox_process_is_an_error_value_and_is_replaced() -> None:
    # given a script that is running when its sandbox process is killed from outside
    outcome: list[object] = []
    runner = threading.Thread(target=lambda: outcome.append(trigger("while (true) {}")))
    runner.start()
    worker = _wait_for_busy_worker()
    os.kill(worker, signal.SIGKILL)
    runner.join(timeout=10)

    # then the caller gets a crash error at once, and the next script gets a new process
    [error] = outcome
    assert isinstance(error, LogicError)
    assert error.kind == "crash"
    assert "SIGKILL" in error.message
    assert_still_works()


def test_sandbox_processes_end_with_the_process_that_started_them() -> None:
    # given a process that leaves a script running in a sandbox process and exits at once
    program = textwrap.dedent(
        """
        import os, sys, threading, time
        from runs.logic import ClusterInfo, LedgerView, trigger_logic_evaluate
        message = {"id": "m", "sequence": 1, "timestamp": 1, "topic": "T", "sender": "s"}
        threading.Thread(
            target=trigger_logic_evaluate,
            args=("return /(a+)+$/.test('a'.repeat(40) + 'b');",),
            kwargs={"message": message, "view": LedgerView(), "cluster": ClusterInfo(id="c")},
            daemon=True,
        ).start()
        time.sleep(0.5)
        tasks = f"/proc/{os.getpid()}/task"
        print(" ".join(open(f"{tasks}/{t}/children").read() for t in os.listdir(tasks)))
        """
    )

    # when it exits
    finished = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=30
    )

    # then it exited at once, and its sandbox process followed within a second or two
    assert finished.returncode == 0, finished.stderr
    [child] = [int(pid) for pid in finished.stdout.split()]
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists()


def _wait_for_busy_worker() -> int:
    """The pid of a sandbox process of this test process that is using the CPU."""
    deadline = time.monotonic() + 5
    tasks = Path(f"/proc/{os.getpid()}/task")
    while time.monotonic() < deadline:
        for pid in _children(tasks):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_text()
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if "sandbox_worker" in command and state == "R":
                return pid
        time.sleep(0.05)
    raise AssertionError("no sandbox process is running a script")


def _children(tasks: Path) -> list[int]:
    found = []
    for task in tasks.iterdir():
        try:
            found += [int(pid) for pid in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def test_each_evaluation_has_a_fresh_global_scope() -> None:
    # given scripts that leave globals behind in every way they can
    leaks = [
        "globalThis.leaked = 1; Array.prototype.leaked = 2; ledger.leaked = 3; return true;",
        "JSON.parse = () => 'broken'; return true;",
    ]
    for script in leaks:
        assert trigger(script) == TriggerOutcome(passed=True)

    # when the next script looks for them, then none is there
    look = (
        "return typeof leaked === 'undefined' && [].leaked === undefined"
        " && ledger.leaked === undefined && JSON.parse('1') === 1;"
    )
    assert trigger(look) == TriggerOutcome(passed=True)


def test_sloppy_mode_globals_do_not_survive_a_transform_either() -> None:
    run = Run()
    message = run.publish("ISSUE_OPENED", "system")

    def transform(script: str) -> object:
        return transform_evaluate(
            script, result={}, triggering_message=message, view=run.view(), cluster=CLUSTER
        )

    transform("counter = 1; return { topic: 'A', content: {} };")
    second = transform("return { topic: 'B', content: { data: typeof counter === 'undefined' } };")

    assert getattr(second, "content", None) == {"data": True}


def test_trigger_and_hook_logic_run_in_strict_mode_transforms_do_not() -> None:
    run = Run()
    message = run.publish("ISSUE_OPENED", "system")
    undeclared = "undeclared = 1; return { topic: 'DONE', content: {} };"

    strict = hook_logic_evaluate(
        undeclared,
        result={},
        agent=AgentInfo(id="worker"),
        message=message,
        view=run.view(),
        cluster=CLUSTER,
    )
    sloppy = transform_evaluate(
        undeclared, result={}, triggering_message=message, view=run.view(), cluster=CLUSTER
    )

    assert isinstance(strict, LogicError)
    assert "ReferenceError" in strict.message
    assert getattr(sloppy, "topic", None) == "DONE"


def test_no_io_is_reachable() -> None:
    # given the names through which JavaScript hosts usually reach files, processes or network
    script = """
    const names = ['require', 'process', 'fetch', 'XMLHttpRequest', 'WebSocket', 'setTimeout',
      'setInterval', 'std', 'os', 'print', 'scriptArgs', 'Deno', 'Bun'];
    return { found: names.filter((name) => typeof globalThis[name] !== 'undefined') };
    """

    # when a script looks for them
    outcome = hook_logic_evaluate(
        script,
        result={},
        agent=AgentInfo(id="worker"),
        message=offered(),
        view=LedgerView(),
        cluster=CLUSTER,
    )

    # then none exists
    assert outcome == {"found": []}


def test_the_usual_builtins_are_there() -> None:
    script = """
    const s = new Set([1, 2, 2]);
    const m = new Map([['a', 1]]);
    const d = new Date(0).toISOString();
    const o = { a: { b: null } };
    return s.size === 2 && m.get('a') === 1 && d === '1970-01-01T00:00:00.000Z'
      && Math.max(1, 3) === 3 && JSON.stringify([1]) === '[1]'
      && (o.a?.b ?? 'fallback') === 'fallback' && Object.entries(o).length === 1
      && [1, [2]].flat().length === 2 && typeof console.log === 'function';
    """
    assert trigger(script) == TriggerOutcome(passed=True)


def test_evaluations_from_several_threads_each_see_their_own_data() -> None:
    # given eight threads, each with its own ledger and one of them stuck in a loop
    failures: list[str] = []

    def evaluate_many(worker: int) -> None:
        run = Run(f"run-{worker}")
        for n in range(worker + 1):
            run.publish("VALIDATION_RESULT", f"validator-{n}", data={"approved": True})
        for _ in range(15):
            outcome = trigger_logic_evaluate(
                f"return ledger.count({{ topic: 'VALIDATION_RESULT' }}) === {worker + 1}"
                " && message.cluster_id === cluster.id;",
                message=run.last,
                view=run.view(),
                cluster=ClusterInfo(id=f"run-{worker}"),
            )
            if outcome != TriggerOutcome(passed=True):
                failures.append(f"{worker}: {outcome}")

    def loop() -> None:
        if not isinstance(trigger("while (true) {}"), LogicError):
            failures.append("the loop was not stopped")

    threads = [threading.Thread(target=evaluate_many, args=(n,)) for n in range(7)]
    threads.append(threading.Thread(target=loop))

    # when they all evaluate at once
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    # then every evaluation saw its own cluster, and the loop held nobody up
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    assert time.monotonic() - started < 10


def test_a_transform_may_run_longer_than_trigger_logic() -> None:
    # given a transform busy for 2.2 s of wall-clock time: longer than trigger logic may wait
    # (1 s of CPU, 2 s of wall clock), within the transform's 5 s
    busy = "const end = Date.now() + 2200; while (Date.now() < end) {}\n"

    # when it runs
    outcome = transform_evaluate(
        busy + "return { topic: 'DONE', content: {} };",
        result={},
        triggering_message=offered(),
        view=LedgerView(),
        cluster=CLUSTER,
    )

    # then it finishes
    assert outcome == TransformMessage(topic="DONE", content={})


def test_throw_null_is_reported_as_a_thrown_null_not_the_memory_limit() -> None:
    outcome = trigger("throw null;")

    assert outcome == LogicError("script", "the script threw null")


def test_a_2000_deep_return_value_is_an_error_and_the_worker_survives() -> None:
    outcome = hook_logic_evaluate(
        "let v = {}; for (let i = 0; i < 2000; i++) v = { a: v }; return v;",
        result={},
        agent=AgentInfo(id="worker", role="implementation", iteration=1),
        message=offered(),
        view=LedgerView(),
        cluster=CLUSTER,
    )

    assert isinstance(outcome, LogicError)
    assert outcome.kind == "script"
    assert "nested too deeply" in outcome.message
    assert_still_works()


def test_a_sandbox_process_gets_none_of_the_servers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DJANGO_SECRET_KEY", "the-secret-key")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:password@db/zsw")
    sandbox_pool_configure(size=1)
    try:
        assert_still_works()
        pids = [pid for pid in _children(Path(f"/proc/{os.getpid()}/task")) if _is_sandbox(pid)]
        environments = [Path(f"/proc/{pid}/environ").read_bytes() for pid in pids]
    finally:
        sandbox_pool_configure(size=POOL_SIZE_DEFAULT)

    assert environments == [b"LC_ALL=C.UTF-8\0"]


def test_sandbox_processes_are_a_bounded_pool_and_evaluations_queue_for_it() -> None:
    # given a pool of 2 and 8 threads, each running a transform busy for 0.3 s
    sandbox_pool_configure(size=2)
    busy = "const end = Date.now() + 300; while (Date.now() < end) {}\n"
    outcomes: list[object] = []
    most = 0
    tasks = Path(f"/proc/{os.getpid()}/task")

    def transform() -> None:
        outcomes.append(
            transform_evaluate(
                busy + "return { topic: 'DONE', content: {} };",
                result={},
                triggering_message=offered(),
                view=LedgerView(),
                cluster=CLUSTER,
            )
        )

    try:
        threads = [threading.Thread(target=transform) for _ in range(8)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            most = max(most, sum(1 for pid in _children(tasks) if _is_sandbox(pid)))
            time.sleep(0.01)
    finally:
        sandbox_pool_configure(size=POOL_SIZE_DEFAULT)

    # then every one ran, never more than 2 sandbox processes at once
    assert outcomes == [TransformMessage(topic="DONE", content={})] * 8
    assert 1 <= most <= 2


def _is_sandbox(pid: int) -> bool:
    try:
        return "sandbox_worker" in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False
