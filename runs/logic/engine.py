"""Running one logic script in a sandbox process, within hard limits (SPEC §7.2).

Why QuickJS and why a separate process: ``docs/decisions/0030-logic-script-engine.md``. In
short: every evaluation gets a brand-new QuickJS runtime (a fraction of a millisecond), so no
global a script sets can reach the next one. QuickJS stops JavaScript at its CPU-time limit and
refuses allocations past its memory cap, but a few built-ins never check the time (a regular
expression that backtracks catastrophically) and an exhausted heap can crash it. So the runtime
lives in a small worker process (``sandbox_worker.py``), and the caller waits at most the limit
plus ``WALL_GRACE_S`` of wall-clock time: a worker that has not answered by then is killed, one
that died is replaced, and either way the caller gets an error value. The server, its threads and
its shutdown never wait on a script.

Workers are pooled: each evaluation borrows an idle one (or starts one, about 50 ms) and gives it
back, so evaluations from several threads run in parallel, each in its own process. The pool is
bounded (``sandbox_pool_configure``, ``RUNS_SANDBOX_POOL_SIZE``): at most that many sandbox
processes exist at once, and an evaluation beyond them waits for one (at most ``POOL_WAIT_S``)
instead of starting another, so the memory scripts can hold is the pool size times
``MEMORY_LIMIT_BYTES``. A worker keeps the last ledger view it received, so the several scripts
evaluated against one view send it once. A worker's environment is ``SANDBOX_ENVIRONMENT`` alone:
none of the server's secrets (``DJANGO_SECRET_KEY``, ``DATABASE_URL``) reach it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from runs.logic.records import JSON, LogicError
from runs.logic.view import ViewPayload

logger = logging.getLogger(__name__)

TIME_LIMIT_S: Final = 1.0
TRANSFORM_TIME_LIMIT_S: Final = 5.0
# Room for a full view (VIEW_MAX_BYTES of text and its parsed messages) with space to spare.
MEMORY_LIMIT_BYTES: Final = 256 * 1024 * 1024
# QuickJS counts the worker's CPU time; on a busy machine the wall clock runs ahead of it, so the
# caller waits this much longer before it kills the worker.
WALL_GRACE_S: Final = 1.0
# Sandbox processes at most, busy or idle; evaluations beyond them wait for one.
POOL_SIZE_DEFAULT: Final = 4
# How long an evaluation waits for a sandbox process before it fails.
POOL_WAIT_S: Final = 30.0
# The whole environment of a sandbox process.
SANDBOX_ENVIRONMENT: Final = {"LC_ALL": "C.UTF-8"}

Mode = Literal["trigger", "value"]

_WORKER: Final = Path(__file__).resolve().parent / "sandbox_worker.py"
_HEADER: Final = 4


@dataclass(frozen=True, slots=True)
class ScriptJob:
    """One evaluation: the script body, how to read its outcome, and what it sees."""

    script: str
    mode: Mode
    strict: bool
    scope_json: str
    view: ViewPayload
    time_limit: float = TIME_LIMIT_S


def script_run(job: ScriptJob) -> dict[str, JSON] | LogicError:
    """Run ``job`` in a sandbox worker and return the prelude's report, or why it failed."""
    if not _is_unicode(job.script):
        return LogicError("script", "the script holds a lone surrogate, which is not Unicode text")
    for _ in range(2):
        try:
            worker = _POOL.acquire(timeout=POOL_WAIT_S)
        except OSError as exc:
            return LogicError("crash", f"the sandbox process could not be started: {exc}")
        if worker is None:
            return LogicError(
                "timeout", f"no sandbox process was free within {POOL_WAIT_S:g} s; try again"
            )
        started = time.perf_counter()
        try:
            reply = worker.run(job)
        except _WorkerGone:
            # An idle worker that died between two jobs (killed from outside): try a new one.
            _POOL.release(worker, keep=False)
            continue
        _POOL.release(worker, keep=not (isinstance(reply, LogicError) or reply.get("recycle")))
        _observe(time.perf_counter() - started)
        return _outcome(reply, job.time_limit)
    return LogicError("crash", "the sandbox process died before it could take the script")


# Called with each evaluation's seconds in its sandbox process (the operator's metrics).
_OBSERVERS: Final[list[Callable[[float], None]]] = []


def sandbox_observe(observer: Callable[[float], None]) -> None:
    """Call ``observer`` with the seconds of every evaluation from now on (quick, never raising)."""
    if observer not in _OBSERVERS:
        _OBSERVERS.append(observer)


def _observe(seconds: float) -> None:
    for observer in _OBSERVERS:
        observer(seconds)


@dataclass(frozen=True, slots=True)
class PoolStats:
    """The sandbox pool of this process: its bound, the processes alive and those busy."""

    size: int
    processes: int
    busy: int


def sandbox_pool_stats() -> PoolStats:
    """The pool of this process, now."""
    return _POOL.stats()


def sandbox_pool_configure(*, size: int) -> None:
    """Allow at most ``size`` sandbox processes at once (busy or idle)."""
    _POOL.configure(size=size)


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _outcome(
    reply: dict[str, JSON] | LogicError, time_limit: float
) -> dict[str, JSON] | LogicError:
    if isinstance(reply, LogicError):
        return reply
    error = reply.get("error")
    if not isinstance(error, dict):
        return reply
    if error["kind"] == "timeout":
        return _timeout(time_limit)
    if error["kind"] == "memory":
        megabytes = MEMORY_LIMIT_BYTES // (1024 * 1024)
        return LogicError("memory", f"the script ran past its {megabytes} MiB memory limit")
    return LogicError("script", str(error["message"]))


def _timeout(time_limit: float) -> LogicError:
    return LogicError("timeout", f"the script ran past its {time_limit:g} s time limit")


class _WorkerGone(Exception):
    """The worker was dead before the request could be sent."""


class _WorkerDied(Exception):
    """The worker closed its output before it answered: it died while running the script."""


class _Worker:
    """One sandbox process and the view it holds."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(_WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            env=SANDBOX_ENVIRONMENT,
        )
        self.view_key: int | None = None

    def run(self, job: ScriptJob) -> dict[str, JSON] | LogicError:
        parts = [job.script.encode("utf-8"), job.scope_json.encode("utf-8")]
        send_view = job.view.key != self.view_key
        if send_view:
            parts += [job.view.index_json.encode("ascii"), job.view.blob.encode("ascii")]
        header = {
            "mode": job.mode,
            "strict": job.strict,
            "time_limit": job.time_limit,
            "memory_limit": MEMORY_LIMIT_BYTES,
            "view_key": job.view.key,
            "sizes": [len(part) for part in parts],
        }
        encoded = json.dumps(header).encode("utf-8")
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(len(encoded).to_bytes(_HEADER, "big") + encoded)
            for part in parts:
                stdin.write(part)
            stdin.flush()
        except OSError as exc:
            raise _WorkerGone from exc
        self.view_key = job.view.key
        deadline = time.monotonic() + job.time_limit + WALL_GRACE_S
        try:
            reply = self._read_reply(deadline)
        except _WorkerDied:
            return self._died()
        if reply is None:
            # Still running past the wall deadline: a built-in that never checks the time.
            self.close()
            logger.warning(
                "a logic script ignored its %g s limit; its worker was killed", job.time_limit
            )
            return _timeout(job.time_limit)
        answer: dict[str, JSON] = json.loads(reply)
        return answer

    def _read_reply(self, deadline: float) -> bytes | None:
        head = self._read(_HEADER, deadline)
        if head is None:
            return None
        return self._read(int.from_bytes(head, "big"), deadline)

    def _read(self, size: int, deadline: float) -> bytes | None:
        stdout = self.process.stdout
        assert stdout is not None
        chunks: list[bytes] = []
        remaining = size
        with selectors.DefaultSelector() as selector:
            selector.register(stdout.fileno(), selectors.EVENT_READ)
            while remaining:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    return None
                chunk = os.read(stdout.fileno(), remaining)
                if not chunk:
                    raise _WorkerDied
                chunks.append(chunk)
                remaining -= len(chunk)
        return b"".join(chunks)

    def _died(self) -> LogicError:
        # The pipe closes a moment before the process can be reaped: wait for its status.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        self.close()
        code = self.process.returncode
        died = f"exit status {code}"
        if code < 0:
            try:
                died = signal.Signals(-code).name
            except ValueError:
                died = f"signal {-code}"
        return LogicError(
            "crash",
            f"the sandbox process running the script died ({died}); scripts that exhaust their "
            "memory can do this",
        )

    def close(self) -> None:
        """End the process now; nothing it holds is worth waiting for."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


class _Pool:
    """At most ``size`` sandbox processes, shared by every thread of the process."""

    def __init__(self, size: int) -> None:
        self._changed = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy = 0
        self._size = size

    def configure(self, *, size: int) -> None:
        if size < 1:
            raise ValueError("the sandbox pool needs at least one process")
        with self._changed:
            self._size = size
            surplus = self._idle[: max(0, len(self._idle) + self._busy - size)]
            del self._idle[: len(surplus)]
            self._changed.notify_all()
        for worker in surplus:
            worker.close()

    def acquire(self, *, timeout: float) -> _Worker | None:
        """An idle worker, a new one if the pool has room, or ``None`` after ``timeout``."""
        with self._changed:
            if not self._changed.wait_for(
                lambda: self._idle or self._busy < self._size, timeout=timeout
            ):
                return None
            self._busy += 1
            if self._idle:
                return self._idle.pop()
        try:
            return _Worker()
        except BaseException:
            self._give_back()
            raise

    def release(self, worker: _Worker, *, keep: bool) -> None:
        with self._changed:
            if keep and len(self._idle) + self._busy <= self._size:
                self._idle.append(worker)
                self._busy -= 1
                self._changed.notify()
                return
        worker.close()
        self._give_back()

    def _give_back(self) -> None:
        with self._changed:
            self._busy -= 1
            self._changed.notify()

    def stats(self) -> PoolStats:
        with self._changed:
            return PoolStats(
                size=self._size, processes=len(self._idle) + self._busy, busy=self._busy
            )

    def close(self) -> None:
        """End every idle worker (at exit; busy ones end when their caller is done)."""
        with self._changed:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


_POOL: Final = _Pool(POOL_SIZE_DEFAULT)
atexit.register(_POOL.close)
