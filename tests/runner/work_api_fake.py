"""An in-memory work API (SPEC §7.4) served over real HTTP, for the runner's tests and bench.

It keeps tasks, leases and attempts, long-polls claims, answers 204 when there is nothing to do
and 409 to a stale lease, completes idempotently, and records every request. Faults can be
injected per path: answered instead of the request, or after the request was applied (a lost
answer).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ACTIVE = ("initializing", "running", "stopping")


@dataclass
class FakeTask:
    id: str
    cluster: str
    agent: dict[str, Any]
    iteration: int
    prompt: str
    state: str = "queued"
    lease_id: str | None = None
    lease_expires: float = 0.0
    attempts: int = 0
    worker: str | None = None
    lines: list[str] = field(default_factory=list)
    result: Any = None
    output: str | None = None
    usage: Any = None
    error: str | None = None
    retryable: bool | None = None
    complete_body: dict[str, Any] | None = None
    fails: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Fault:
    method: str
    path_suffix: str
    status: int
    times: int
    headers: dict[str, str]
    body: Any
    after: bool


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    body: Any
    headers: dict[str, str]
    status: int
    at: float


class FakeWorkApi:
    """The work API's semantics in memory; ``url`` is where it listens once started."""

    def __init__(self, *, key: str = "test-key", cluster: str = "c1") -> None:
        self.key = key
        self.cluster = cluster
        self.cluster_state = "running"
        # The states of other clusters (tasks may name any cluster; unnamed ones run).
        self.cluster_states: dict[str, str] = {}
        # Messages published through POST /clusters/{id}/messages: (cluster, body).
        self.messages: list[tuple[str, dict[str, Any]]] = []
        # Ends the cluster ("completed") once every task is completed or failed for good.
        self.end_when_idle = False
        self.tasks: dict[str, FakeTask] = {}
        # Queued and claimed tasks, oldest first: claims look only here, so a long run does
        # not slow them down.
        self._open: dict[str, FakeTask] = {}
        self.requests: list[Seen] = []
        self.max_claimed = 0
        # Claims waiting for work right now.
        self.polling = 0
        self._faults: list[Fault] = []
        self._cond = threading.Condition()
        self._closing = False
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # --- set-up -----------------------------------------------------------------------------

    def add_task(
        self,
        *,
        agent_id: str = "worker",
        role: str = "worker",
        iteration: int = 1,
        prompt: str = "Do the work.",
        cluster: str | None = None,
        **agent_fields: Any,
    ) -> str:
        task_id = f"task_{uuid.uuid4().hex}"
        agent = {"id": agent_id, "role": role, "prompt": "You work.", **agent_fields}
        with self._cond:
            self.tasks[task_id] = self._open[task_id] = FakeTask(
                id=task_id,
                cluster=cluster or self.cluster,
                agent=agent,
                iteration=iteration,
                prompt=prompt,
            )
            self._cond.notify_all()
        return task_id

    def inject(
        self,
        path_suffix: str,
        status: int,
        *,
        method: str = "POST",
        times: int = 1,
        headers: dict[str, str] | None = None,
        body: Any = None,
        after: bool = False,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status`` (``after``: apply first)."""
        with self._cond:
            self._faults.append(
                Fault(method, path_suffix, status, times, headers or {}, body, after)
            )

    @contextmanager
    def running(self) -> Iterator[FakeWorkApi]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes; with Nagle on, the second one waits for
            # the client's delayed ACK (40 ms a request on Linux).
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                status, headers, answer = fake.handle(method, self.path, body, dict(self.headers))
                data = b"" if answer is None else json.dumps(answer).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = _QuietServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            server.shutdown()
            server.server_close()

    # --- reading what happened --------------------------------------------------------------

    def seen(self, path_suffix: str, method: str = "POST") -> list[Seen]:
        with self._cond:
            return [r for r in self.requests if r.method == method and r.path.endswith(path_suffix)]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Wait until ``predicate`` (called under the fake's lock) holds; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def in_state(self, state: str) -> list[FakeTask]:
        return [task for task in self.tasks.values() if task.state == state]

    # --- the API ----------------------------------------------------------------------------

    def handle(
        self, method: str, path: str, body: Any, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], Any]:
        if headers.get("Authorization") != f"Bearer {self.key}":
            return self._record(method, path, body, headers, 401, {}, _error("unauthorized"))
        fault = self._take_fault(method, path)
        if fault is not None and not fault.after:
            return self._record(
                method, path, body, headers, fault.status, fault.headers, fault.body
            )
        status, answer = self._apply(method, path, body or {})
        if fault is not None:
            status, answer = fault.status, fault.body
        return self._record(
            method, path, body, headers, status, fault.headers if fault else {}, answer
        )

    def _apply(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        parts = path.removeprefix("/api/v1/").split("/")
        if method == "GET" and parts[0] == "clusters" and len(parts) == 2:
            if not self._known(parts[1]):
                return 404, _error("not_found")
            return 200, {"id": parts[1], "state": self.state_of(parts[1])}
        if method == "POST" and parts[0] == "clusters" and parts[2:] == ["messages"]:
            if not self._known(parts[1]):
                return 404, _error("not_found")
            with self._cond:
                self.messages.append((parts[1], body))
                self._cond.notify_all()
            return 201, {"cluster_id": parts[1], **body}
        if method == "POST" and parts == ["tasks", "claim"]:
            return self._claim(body)
        if method == "POST" and parts[0] == "tasks" and len(parts) == 3:
            with self._cond:
                task = self.tasks.get(parts[1])
                if task is None:
                    return 404, _error("not_found")
                answer = getattr(self, f"_{parts[2]}")(task, body)
                self._cond.notify_all()
                return answer
        return 404, _error("not_found")

    def _claim(self, body: dict[str, Any]) -> tuple[int, Any]:
        deadline = time.monotonic() + float(body.get("wait", 0))
        with self._cond:
            self.polling += 1
            try:
                while True:
                    task = self._claimable(body)
                    if task is not None:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0 or self._closing:
                        return 204, None
                    self._cond.wait(min(left, 0.05))
            finally:
                self.polling -= 1
            task.state = "claimed"
            task.lease_id = uuid.uuid4().hex
            task.attempts += 1
            task.worker = body.get("worker")
            task.lease_expires = time.monotonic() + float(body.get("lease", 60))
            claimed = sum(1 for open_task in self._open.values() if open_task.state == "claimed")
            self.max_claimed = max(self.max_claimed, claimed)
            self._cond.notify_all()
            return 200, {
                "task": {
                    "id": task.id,
                    "lease_id": task.lease_id,
                    "cluster_id": task.cluster,
                    "agent_id": task.agent["id"],
                    "iteration": task.iteration,
                    "attempts": task.attempts,
                    "state": "claimed",
                },
                "prompt": task.prompt,
                "metrics": {"total": {"chars": len(task.prompt)}},
                "agent": task.agent,
            }

    def state_of(self, cluster: str) -> str:
        if cluster == self.cluster:
            return self.cluster_state
        return self.cluster_states.get(cluster, "running")

    def _known(self, cluster: str) -> bool:
        return (
            cluster == self.cluster
            or cluster in self.cluster_states
            or any(task.cluster == cluster for task in self.tasks.values())
        )

    def _claimable(self, body: dict[str, Any]) -> FakeTask | None:
        now = time.monotonic()
        for task in self._open.values():
            free = task.state == "queued" or (task.state == "claimed" and task.lease_expires < now)
            if not free or self.state_of(task.cluster) not in ACTIVE:
                continue
            if body.get("cluster") and task.cluster != body["cluster"]:
                continue
            if body.get("agents") and task.agent["id"] not in body["agents"]:
                continue
            if body.get("roles") and task.agent["role"] not in body["roles"]:
                continue
            return task
        return None

    def _current(self, task: FakeTask, body: dict[str, Any]) -> bool:
        return task.state == "claimed" and body.get("lease_id") == task.lease_id

    def _heartbeat(self, task: FakeTask, body: dict[str, Any]) -> tuple[int, Any]:
        if not self._current(task, body):
            return 409, _error("lease_lost")
        task.lease_expires = time.monotonic() + 60
        return 200, {"ok": True}

    def _output(self, task: FakeTask, body: dict[str, Any]) -> tuple[int, Any]:
        if not self._current(task, body):
            return 409, _error("lease_lost")
        task.lines.extend(body["lines"])
        return 200, {"count": len(body["lines"])}

    def _complete(self, task: FakeTask, body: dict[str, Any]) -> tuple[int, Any]:
        if task.state == "completed" and body == task.complete_body:
            return 200, {"messages": []}
        if not self._current(task, body):
            return 409, _error("lease_lost")
        task.state = "completed"
        self._open.pop(task.id, None)
        task.complete_body = body
        task.result = body["result"]
        task.output = body["output"]
        task.usage = body.get("usage")
        self._maybe_end()
        return 200, {"messages": []}

    def _fail(self, task: FakeTask, body: dict[str, Any]) -> tuple[int, Any]:
        if not self._current(task, body):
            return 409, _error("lease_lost")
        task.fails.append(body)
        task.error = body["error"]
        task.retryable = body.get("retryable", False)
        task.lease_id = None
        task.state = "queued" if task.retryable else "failed"
        if task.state == "failed":
            self._open.pop(task.id, None)
        self._maybe_end()
        return 200, {"state": task.state}

    def _maybe_end(self) -> None:
        if self.end_when_idle and not self._open:
            self.cluster_state = "completed"

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._cond:
            for fault in self._faults:
                if fault.times > 0 and fault.method == method and path.endswith(fault.path_suffix):
                    fault.times -= 1
                    return fault
        return None

    def _record(
        self,
        method: str,
        path: str,
        body: Any,
        headers: dict[str, str],
        status: int,
        answer_headers: dict[str, str],
        answer: Any,
    ) -> tuple[int, dict[str, str], Any]:
        with self._cond:
            self.requests.append(Seen(method, path, body, headers, status, time.monotonic()))
            self._cond.notify_all()
        return status, answer_headers, answer


def _error(code: str) -> dict[str, str]:
    return {"code": code, "message": code.replace("_", " ")}


class _QuietServer(ThreadingHTTPServer):
    """A client that went away while its answer was on the way (a runner that exited during a
    long poll) is what the runner's tests do on purpose: not an error worth a traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)
