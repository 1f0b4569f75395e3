"""One claimed task on the runner's side: its output batches, its heartbeat, its one report.

A pump thread per task sends the output lines the provider emits (a batch half a second after
its first line, or at once when ``batch_lines`` wait) and heartbeats every third of the lease.
``finish`` reports the outcome exactly once, whoever calls it first; after a 409 nothing more
is sent and the provider is told to stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from zeroshot_runner.client import ApiError, LeaseLost, Unavailable, WorkClient
from zeroshot_runner.records import Claim, Completed, Failed, Outcome

log = logging.getLogger(__name__)

# One output line longer than this is cut: the full text still goes with `complete`.
MAX_LINE_CHARS = 16_384
# One output request carries at most this many lines and characters, however many wait: a
# server refuses big bodies (Django's default limit is 2.5 MB).
_MAX_BATCH_LINES = 500
_MAX_BATCH_CHARS = 512 * 1024


class TaskRun:
    """One claimed task: its output buffer, its heartbeat, and its one final report."""

    def __init__(
        self,
        claim: Claim,
        *,
        client: WorkClient,
        lease: float,
        batch_interval: float,
        batch_lines: int,
    ) -> None:
        self.claim = claim
        self.client = client
        self.stop = threading.Event()
        self._batch_interval = batch_interval
        self._batch_lines = batch_lines
        # The server may grant another lease than the one asked for.
        self._beat_every = (claim.lease_seconds or lease) / 3
        self._cond = threading.Condition()
        self._pending: list[str] = []
        self._pending_since: float | None = None
        self._sent = 0
        self._flush_lock = threading.Lock()
        self._finish_lock = threading.Lock()
        self._status: str | None = None
        # The error text of the `fail` call, once one was made.
        self.error_sent: str | None = None
        self._finishing = False
        self._lost = False

    @property
    def reported(self) -> bool:
        """Whether the outcome was sent (or given up on)."""
        return self._status is not None

    def start_pump(self) -> None:
        """Start heartbeating and sending output in the background."""
        threading.Thread(target=self._pump, name=f"pump-{self.claim.task_id}", daemon=True).start()

    def emit(self, line: str) -> None:
        """Queue one output line (called from the provider's threads)."""
        if len(line) > MAX_LINE_CHARS:
            line = f"{line[:MAX_LINE_CHARS]}… [{len(line) - MAX_LINE_CHARS} more characters]"
        with self._cond:
            self._pending.append(line)
            # The pump sleeps until its next heartbeat when nothing waits: the first line
            # wakes it to set the batch's deadline, a full batch to send it now.
            if self._pending_since is None:
                self._pending_since = time.monotonic()
                self._cond.notify_all()
            elif len(self._pending) >= self._batch_lines:
                self._cond.notify_all()

    def finish(self, outcome: Outcome) -> str:
        """Report the outcome once: ``completed``, ``failed``, ``lost`` or ``unreported``."""
        # The first caller reports; a later one (the main thread giving up on a slow agent, or
        # the slot once its agent ends after all) waits for that report and gets its status.
        with self._finish_lock:
            if self._status is None:
                self._status = self._send_outcome(outcome)
            return self._status

    def finish_unless_busy(self, outcome: Outcome) -> None:
        """Report the outcome unless that is done or under way (by the slot, say)."""
        if not self._finish_lock.acquire(blocking=False):
            return
        try:
            if self._status is None:
                self._status = self._send_outcome(outcome)
        finally:
            self._finish_lock.release()

    def _send_outcome(self, outcome: Outcome) -> str:
        with self._cond:
            self._finishing = True
            self._cond.notify_all()
        if not self._lost:
            self._flush()
        if self._lost:
            return "lost"
        task_id, lease_id = self.claim.task_id, self.claim.lease_id
        try:
            if isinstance(outcome, Completed):
                try:
                    self.client.complete(task_id, lease_id=lease_id, completed=outcome)
                    return "completed"
                except ApiError as error:
                    if isinstance(error, LeaseLost):
                        raise
                    # A result the server will not take must not sit there until the lease
                    # runs out: the task is failed instead, and another run may do better.
                    log.warning("task %s: result refused: %s", task_id, error)
                    outcome = Failed(
                        error=f"the server refused the result: {error}", retryable=True
                    )
            self.error_sent = outcome.error
            self.client.fail(
                task_id, lease_id=lease_id, error=outcome.error, retryable=outcome.retryable
            )
            return "failed"
        except LeaseLost:
            log.warning("task %s: the lease was no longer ours when reporting", task_id)
            return "lost"
        except (ApiError, Unavailable) as error:
            log.error(
                "task %s: could not report (%s); the server re-queues it when its lease ends",
                task_id,
                error,
            )
            return "unreported"

    def _pump(self) -> None:
        next_beat = time.monotonic() + self._beat_every
        while True:
            with self._cond:
                while True:
                    if self._finishing:
                        return
                    now = time.monotonic()
                    if len(self._pending) >= self._batch_lines:
                        flush_at = now
                    elif self._pending_since is not None:
                        flush_at = self._pending_since + self._batch_interval
                    else:
                        flush_at = float("inf")
                    if now >= min(flush_at, next_beat):
                        break
                    self._cond.wait(min(flush_at, next_beat) - now)
            if time.monotonic() >= flush_at:
                self._flush()
            if time.monotonic() >= next_beat:
                beat_ok = self._heartbeat()
                # A missed beat is tried again soon, well inside the lease.
                next_beat = time.monotonic() + (
                    self._beat_every if beat_ok else min(self._beat_every, 1.0)
                )

    def _heartbeat(self) -> bool:
        try:
            self.client.heartbeat(self.claim.task_id, lease_id=self.claim.lease_id)
        except LeaseLost as error:
            self._lose(error)
        except (ApiError, Unavailable) as error:
            log.warning("task %s: heartbeat failed: %s", self.claim.task_id, error)
            return False
        return True

    def _flush(self) -> None:
        # One flush at a time keeps the lines in order across the pump and finish(). A flush
        # sends what was waiting when it began, so a chatty agent cannot hold the pump (and
        # with it the heartbeat) in here.
        with self._flush_lock:
            with self._cond:
                waiting, self._pending = self._pending, []
                self._pending_since = None
            start = 0
            for batch in _batches(waiting):
                try:
                    self.client.output(
                        self.claim.task_id,
                        lease_id=self.claim.lease_id,
                        lines=batch,
                        offset=self._sent,
                    )
                except LeaseLost as error:
                    self._lose(error)
                    return
                except Unavailable as error:
                    # Kept for the next flush: the log of a task is worth a later try.
                    log.warning("task %s: output not sent yet: %s", self.claim.task_id, error)
                    with self._cond:
                        self._pending[:0] = waiting[start:]
                        self._pending_since = time.monotonic()
                    return
                except ApiError as error:
                    log.warning("task %s: output refused: %s", self.claim.task_id, error)
                start += len(batch)
                self._sent += len(batch)

    def _lose(self, error: LeaseLost) -> None:
        if self._finishing:
            # Once the final report is under way, its own answer tells whether the lease holds;
            # a heartbeat answered after the report went through says nothing.
            return
        self._lost = True
        self.stop.set()
        log.warning(
            "task %s: lease lost (%s); its agent is stopped and nothing more is sent",
            self.claim.task_id,
            error,
        )


def _batches(lines: list[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for line in lines:
        if batch and (len(batch) >= _MAX_BATCH_LINES or size + len(line) > _MAX_BATCH_CHARS):
            yield batch
            batch, size = [], 0
        batch.append(line)
        size += len(line)
    if batch:
        yield batch
