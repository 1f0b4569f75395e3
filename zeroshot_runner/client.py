"""The work API (SPEC §7.4) over HTTP: claim, heartbeat, output, complete, fail.

Transient failures (connection errors, 429, 502, 503, 504) are retried with backoff; each retry
sends the very same bytes, so a retried ``complete`` stays idempotent on the server. A 409 means
the lease is no longer ours: it raises ``LeaseLost`` and is never retried.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from zeroshot_runner import __version__
from zeroshot_runner.backoff import Backoff, is_transient, retry_after_seconds, sleep
from zeroshot_runner.records import JSON, Claim, Completed, ProtocolError, claim_from_wire

log = logging.getLogger(__name__)

# A long poll may take `wait` seconds before the server answers; this much more is allowed
# for the answer itself before the read counts as failed.
_POLL_MARGIN = 15.0
_ERROR_BODY_CHARS = 500
# The raw output sent with `complete` keeps its last this many characters: the end of an
# agent's output says most, and a server refuses big bodies.
MAX_OUTPUT_CHARS = 1_000_000


class ApiError(Exception):
    """The server refused a call for good (4xx other than 409, or 500)."""

    def __init__(self, message: str, *, status: int, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


class LeaseLost(ApiError):
    """409: the task's lease is no longer ours (expired, re-claimed, cancelled or finished)."""


class Unavailable(Exception):
    """The server stayed unreachable or busy through every retry."""


class WorkClient:
    """One runner's connection to the work API; safe to share between threads."""

    def __init__(
        self,
        *,
        url: str,
        key: str,
        backoff: Backoff | None = None,
        finish_backoff: Backoff | None = None,
        timeout: float = 30.0,
        sleeper: Callable[[float], None] = sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = api_base_url(url)
        self.backoff = backoff or Backoff()
        # Completing or failing a task is what makes the work count: it is tried for longer.
        self.finish_backoff = finish_backoff or Backoff(attempts=8)
        self._sleeper = sleeper
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={
                "Authorization": f"Bearer {key}",
                "Accept": "application/json",
                "User-Agent": f"zeroshot-runner/{__version__}",
            },
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            # httpx writes a request's headers and body separately: without TCP_NODELAY the
            # body can wait for the server's delayed ACK.
            transport=transport
            or httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]),
        )

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def claim(
        self,
        *,
        worker: str,
        wait: float,
        lease: float,
        cluster: str | None = None,
        agents: Sequence[str] = (),
        roles: Sequence[str] = (),
        labels: Mapping[str, str] | None = None,
        providers: Sequence[str] = (),
        interrupt: threading.Event | None = None,
    ) -> Claim | None:
        """Claim one task, long-polling up to ``wait`` seconds; ``None`` when there is none.

        ``labels`` and ``providers`` (runner pools) go only when given: a server that does not
        filter on them refuses the fields.
        """
        body: dict[str, JSON] = {"worker": worker, "wait": wait, "lease": lease}
        if cluster is not None:
            body["cluster"] = cluster
        if agents:
            body["agents"] = list(agents)
        if roles:
            body["roles"] = list(roles)
        if labels:
            body["labels"] = dict(labels)
        if providers:
            body["providers"] = list(providers)
        response = self._send(
            "POST", "/tasks/claim", body, timeout=wait + _POLL_MARGIN, interrupt=interrupt
        )
        if response.status_code == 204:
            return None
        return claim_from_wire(_json_body(response))

    def heartbeat(self, task_id: str, *, lease_id: str) -> None:
        """Extend the task's lease."""
        self._send("POST", f"/tasks/{_segment(task_id)}/heartbeat", {"lease_id": lease_id})

    def output(self, task_id: str, *, lease_id: str, lines: Sequence[str], offset: int) -> None:
        """Send a batch of output lines; ``offset`` counts the lines sent before this batch."""
        self._send(
            "POST",
            f"/tasks/{_segment(task_id)}/output",
            {"lease_id": lease_id, "lines": list(lines), "offset": offset},
        )

    def complete(self, task_id: str, *, lease_id: str, completed: Completed) -> None:
        """Hand back the task's result."""
        body: dict[str, JSON] = {
            "lease_id": lease_id,
            "result": completed.result,
            "output": _tail(completed.output, MAX_OUTPUT_CHARS),
        }
        if completed.usage is not None:
            body["usage"] = completed.usage.to_wire()
        self._send(
            "POST", f"/tasks/{_segment(task_id)}/complete", body, backoff=self.finish_backoff
        )

    def fail(self, task_id: str, *, lease_id: str, error: str, retryable: bool) -> None:
        """Report that the task did not finish."""
        self._send(
            "POST",
            f"/tasks/{_segment(task_id)}/fail",
            {"lease_id": lease_id, "error": error, "retryable": retryable},
            backoff=self.finish_backoff,
        )

    def publish(self, cluster_id: str, message: Mapping[str, JSON]) -> None:
        """Publish one message on the cluster's ledger (``POST /clusters/{id}/messages``).

        Give it an ``idempotency_key``: a retry after a lost answer then stores nothing twice.
        """
        self._send(
            "POST",
            f"/clusters/{_segment(cluster_id)}/messages",
            dict(message),
            backoff=self.finish_backoff,
        )

    def cluster_state(self, cluster_id: str) -> str:
        """The cluster's state (``GET /clusters/{id}``)."""
        body = _json_body(self._send("GET", f"/clusters/{_segment(cluster_id)}"))
        state = body.get("state") if isinstance(body, dict) else None
        if not isinstance(state, str):
            raise ProtocolError("cluster answer has no state")
        return state

    def _send(
        self,
        method: str,
        path: str,
        body: JSON = None,
        *,
        backoff: Backoff | None = None,
        timeout: float | None = None,
        interrupt: threading.Event | None = None,
    ) -> httpx.Response:
        policy = backoff or self.backoff
        content = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json"} if content is not None else {}
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        attempt = 0
        while True:
            retry_after = None
            try:
                response = self._http.request(
                    method, path, content=content, headers=headers, **extra
                )
            except httpx.TransportError as error:
                problem = f"{type(error).__name__}: {error}"
            else:
                if response.is_success:
                    return response
                if not is_transient(response):
                    raise _api_error(method, path, response)
                problem = f"HTTP {response.status_code}"
                retry_after = retry_after_seconds(response)
            attempt += 1
            if attempt >= policy.attempts:
                raise Unavailable(f"{method} {path}: {problem} (after {attempt} attempts)")
            delay = policy.delay(attempt - 1, retry_after=retry_after)
            log.debug("%s %s: %s; retrying in %.2f s", method, path, problem, delay)
            if interrupt is None:
                self._sleeper(delay)
            elif interrupt.wait(delay):
                raise Unavailable(f"{method} {path}: {problem} (stopped while retrying)")


def api_base_url(url: str) -> str:
    """The work API's root for a server URL given with or without ``/api/v1``."""
    root = url.rstrip("/")
    return root if root.endswith("/api/v1") else f"{root}/api/v1"


def _tail(text: str, size: int) -> str:
    if len(text) <= size:
        return text
    return f"[{len(text) - size} characters cut]\n{text[-size:]}"


def _segment(value: str) -> str:
    return quote(value, safe="")


def _json_body(response: httpx.Response) -> JSON:
    try:
        return response.json()
    except ValueError as error:
        raise ProtocolError(f"{response.request.url.path}: answer is not JSON") from error


def _api_error(method: str, path: str, response: httpx.Response) -> ApiError:
    code = None
    message = response.text[:_ERROR_BODY_CHARS]
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        code = body.get("code") if isinstance(body.get("code"), str) else None
        if isinstance(body.get("message"), str):
            message = body["message"]
    kind = LeaseLost if response.status_code == 409 else ApiError
    text = f"{method} {path}: HTTP {response.status_code}" + (f": {message}" if message else "")
    return kind(text, status=response.status_code, code=code)
