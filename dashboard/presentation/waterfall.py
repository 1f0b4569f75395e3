"""One task as a waterfall: each step of its life on one time axis, from plain records.

The steps come from the task row and the messages it published (SPEC §7.3): ``TASK_STARTED``
opens an attempt (with its runner and lease), ``RETRY_SCHEDULED``, ``TASK_COMPLETED`` or
``AGENT_ERROR`` closes it; an attempt closed by nothing but the next ``TASK_STARTED`` lost its
lease (an expiry publishes no message). Each attempt's build is the agent's build of that
iteration recorded at its claim, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from context.selectors import BuildRecord
from ledger.interfaces import MessageRecord, Topic
from runs.records import TaskRecord

# A step shorter than this share of the axis is drawn this wide, to stay visible.
MIN_WIDTH_PERCENT = 0.6
# Characters of an attempt's output the page shows; the rest is on the timeline.
OUTPUT_CHARS_MAX = 64_000

ENDING_EVENTS = ("RETRY_SCHEDULED", "TASK_COMPLETED")


@dataclass(frozen=True, slots=True)
class Step:
    """One bar of the waterfall: what happened, from when to when (ms), and in words."""

    kind: str  # queued, claimed, build, running, completed, failed, retry, expired, hook, usage
    label: str
    start: int
    end: int | None  # None: a moment, not a span
    detail: str = ""
    attempt: int = 0
    url: str = ""
    link_text: str = ""
    open: bool = False  # still going on
    left: float = 0.0
    width: float = 0.0

    @property
    def duration(self) -> int | None:
        return None if self.end is None else max(0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One claim of the task and what its agent printed under it."""

    number: int
    worker: str
    lease_seconds: int | None
    started: int
    ended: int | None
    outcome: str  # running, completed, failed, retry, expired, cancelled
    output: str
    output_lines: int
    output_cut: bool


@dataclass(frozen=True, slots=True)
class Waterfall:
    """The steps in time order, the attempts, and the axis they are drawn on."""

    steps: tuple[Step, ...]
    attempts: tuple[Attempt, ...]
    start: int
    end: int
    published: tuple[MessageRecord, ...] = field(default=())

    @property
    def span(self) -> int:
        return self.end - self.start


def _data(message: MessageRecord) -> dict[str, object]:
    data = message.data
    return data if isinstance(data, dict) else {}


def _event(message: MessageRecord) -> str:
    if message.topic == Topic.AGENT_ERROR:
        return "AGENT_ERROR"
    if message.topic == Topic.AGENT_LIFECYCLE:
        event = _data(message).get("event")
        return event if isinstance(event, str) else ""
    return ""


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def waterfall(
    *,
    task: TaskRecord,
    messages: Sequence[MessageRecord],
    output: Sequence[MessageRecord],
    builds: Sequence[BuildRecord],
    completion_ids: Sequence[str],
    build_url: str,
    now: int,
) -> Waterfall:
    """The task's steps; ``completion_ids`` are the messages its completion published (its
    hook's among them), ``build_url`` is a build's address with ``{id}`` for its id."""
    end = task.finished_at if task.finished_at is not None else now
    starts = [m for m in messages if _event(m) == "TASK_STARTED"]
    closers = [m for m in messages if _event(m) in (*ENDING_EVENTS, "AGENT_ERROR")]
    attempt_builds = sorted(
        (b for b in builds if b.iteration == task.iteration), key=lambda b: (b.started_at, b.id)
    )
    steps: list[Step] = []
    first_claim = starts[0].timestamp if starts else (task.claimed_at or end)
    steps.append(
        Step(
            kind="queued",
            label="Queued",
            start=task.created_at,
            end=first_claim,
            detail=f"triggered by {task.trigger_topic} #{task.trigger_sequence}",
            open=not starts and task.finished_at is None,
        )
    )
    attempts: list[Attempt] = []
    for i, started in enumerate(starts):
        number = i + 1
        following = starts[i + 1].timestamp if i + 1 < len(starts) else None
        closer = next(
            (
                c
                for c in closers
                if c.sequence > started.sequence
                and (i + 1 >= len(starts) or c.sequence < starts[i + 1].sequence)
            ),
            None,
        )
        data = _data(started)
        worker = _text(data.get("worker")) or (task.worker if following is None else "")
        lease = _int(data.get("leaseSeconds"))
        build = attempt_builds[i] if i < len(attempt_builds) else None
        # The claim comes first, then its build, then TASK_STARTED with the build recorded.
        claimed_at = min(started.timestamp, build.started_at) if build else started.timestamp
        steps.append(
            Step(
                kind="claimed",
                label=f"Claimed · attempt {number}",
                start=claimed_at,
                end=None,
                detail=(f"by {worker}" if worker else "by an unnamed runner")
                + (f" · lease {lease} s" if lease else ""),
                attempt=number,
            )
        )
        if build is not None:
            steps.append(
                Step(
                    kind="build",
                    label="Prompt built",
                    start=build.started_at,
                    end=None,
                    detail=f"{build.final_tokens:,} of {build.max_tokens:,} tokens (estimated)",
                    attempt=number,
                    url=build_url.replace("{id}", str(build.id)),
                    link_text=f"build {build.id}",
                )
            )
        outcome, stop = _outcome(task, closer, following, end)
        lines = [m for m in output if started.timestamp <= m.timestamp <= stop]
        if following is not None:
            lines = [m for m in lines if m.sequence < starts[i + 1].sequence]
        text, cut = _joined(lines)
        steps.append(
            Step(
                kind="running",
                label="Agent running",
                start=started.timestamp,
                end=stop,
                detail=f"{sum(_int(_data(m).get('lines')) or 0 for m in lines):,} output lines",
                attempt=number,
                open=outcome == "running",
            )
        )
        steps.append(_outcome_step(outcome, closer, stop, number, task))
        attempts.append(
            Attempt(
                number=number,
                worker=worker,
                lease_seconds=lease,
                started=started.timestamp,
                ended=None if outcome == "running" else stop,
                outcome=outcome,
                output=text,
                output_lines=sum(_int(_data(m).get("lines")) or 0 for m in lines),
                output_cut=cut,
            )
        )
        if outcome in ("retry", "expired"):
            again = following if following is not None else end
            steps.append(
                Step(
                    kind="queued",
                    label="Waiting to be claimed again",
                    start=stop,
                    end=again,
                    attempt=number,
                    open=following is None and task.finished_at is None,
                )
            )
    if not starts and task.finished_at is not None:
        steps.append(
            Step(
                kind=task.state,
                label=task.state.capitalize(),
                start=end,
                end=None,
                detail=task.error,
            )
        )
    completion = set(completion_ids)
    for message in messages:
        if message.topic == Topic.TOKEN_USAGE:
            steps.append(_usage_step(message))
        elif message.id in completion and message.topic not in (
            Topic.AGENT_LIFECYCLE,
            Topic.AGENT_ERROR,
        ):
            # A schema warning: the result broke the agent's schema and was used (SPEC §7.5).
            warned = message.topic == Topic.AGENT_SCHEMA_WARNING
            steps.append(
                Step(
                    kind="hook",
                    label="Schema warning" if warned else "Hook published",
                    start=message.timestamp,
                    end=None,
                    detail=f"{message.topic} #{message.sequence}",
                )
            )
    axis_end = max([end, *(s.end or s.start for s in steps)])
    return Waterfall(
        steps=tuple(_placed(s, task.created_at, axis_end) for s in steps),
        attempts=tuple(attempts),
        start=task.created_at,
        end=axis_end,
        published=tuple(messages),
    )


def _outcome(
    task: TaskRecord, closer: MessageRecord | None, following: int | None, end: int
) -> tuple[str, int]:
    """How an attempt ended and when."""
    if closer is not None:
        event = _event(closer)
        kind = {"TASK_COMPLETED": "completed", "RETRY_SCHEDULED": "retry"}.get(event, "failed")
        return kind, closer.timestamp
    if following is not None:
        return "expired", following
    if task.finished_at is None:
        return "running", end
    return task.state, task.finished_at


def _outcome_step(
    outcome: str, closer: MessageRecord | None, stop: int, number: int, task: TaskRecord
) -> Step:
    data = _data(closer) if closer is not None else {}
    error = _text(data.get("error"))
    if outcome == "running":
        lease = f"lease until {task.lease_expires_at}" if task.lease_expires_at is not None else ""
        return Step(
            kind="running",
            label="Still running",
            start=stop,
            end=None,
            detail=lease,
            attempt=number,
            open=True,
        )
    labels = {
        "completed": "Completed",
        "failed": "Failed",
        "retry": "Failed · retry scheduled",
        "expired": "Lease ran out",
        "cancelled": "Cancelled",
    }
    detail = error
    if outcome == "retry":
        delay = _int(data.get("delayMs"))
        detail = (f"retry in {delay:,} ms · " if delay is not None else "") + error
    elif outcome == "expired":
        detail = "no heartbeat before its lease ended; claimed again"
    elif outcome == "cancelled":
        detail = task.error or "its cluster ended"
    return Step(
        kind=outcome,
        label=labels.get(outcome, outcome.capitalize()),
        start=stop,
        end=None,
        detail=detail,
        attempt=number,
    )


def _usage_step(message: MessageRecord) -> Step:
    data = _data(message)
    inputs, outputs = _int(data.get("inputTokens")) or 0, _int(data.get("outputTokens")) or 0
    model = _text(data.get("model"))
    cost = data.get("costUsd")
    words = [f"{inputs:,} in / {outputs:,} out tokens (billed)"]
    if model:
        words.append(model)
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        words.append(f"${cost:,.4f}")
    return Step(
        kind="usage",
        label="Usage reported",
        start=message.timestamp,
        end=None,
        detail=" · ".join(words),
    )


def _joined(lines: Sequence[MessageRecord]) -> tuple[str, bool]:
    """The attempt's output as one text, cut to ``OUTPUT_CHARS_MAX``."""
    parts: list[str] = []
    size = 0
    for message in lines:
        text = message.text or ""
        if size + len(text) > OUTPUT_CHARS_MAX:
            parts.append(text[: OUTPUT_CHARS_MAX - size])
            return "\n".join(parts), True
        parts.append(text)
        size += len(text) + 1
    return "\n".join(parts), False


def _placed(step: Step, start: int, end: int) -> Step:
    """The step with its bar's left edge and width, in percent of the axis."""
    span = max(1, end - start)
    left = min(100.0, max(0.0, 100 * (step.start - start) / span))
    width = 100 * (step.duration or 0) / span
    width = max(MIN_WIDTH_PERCENT, min(width, 100.0 - left))
    left = min(left, 100.0 - width)
    return Step(
        kind=step.kind,
        label=step.label,
        start=step.start,
        end=step.end,
        detail=step.detail,
        attempt=step.attempt,
        url=step.url,
        link_text=step.link_text,
        open=step.open,
        left=round(left, 2),
        width=round(width, 2),
    )
