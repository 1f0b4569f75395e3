"""OpenTelemetry traces of tasks (issue 21 item 2): one trace per task, off by default.

A task lives in several processes: one server claims it (and builds its context), a runner runs
its agent, another server may complete it. So its spans are written by whichever process saw
each step, with ids derived from the task's id: the trace id from the task, each span id from
the task, the step and the attempt. The pieces meet in the collector as one tree::

    task <agent>                       created → completed or failed for good (its root, last)
    ├── claim                          the claim request (per attempt)
    │   └── context build              pack decisions as events; estimated tokens, model
    ├── invoke_agent <agent>           claim → completion (or fail) request, per attempt: the
    │                                  agent's run, the GenAI attributes (model, billed
    │                                  input/output tokens, estimate); an error when it failed
    └── completion                     the completion request
        ├── hook                       the agent's hook and its scripts
        └── publish                    one event per message published (topic, id, sequence)

Spans carry ids, names, numbers and topics, never tenant text: the prompt is exported only with
``OPERATIONS_OTEL_PROMPTS`` (an event on the build's span), and results, outputs and message
contents never are. Export is the SDK's batch processor over OTLP/HTTP
(``OPERATIONS_OTEL_ENDPOINT``): a background thread, never the request's, and a collector that
is down costs dropped spans, not slow requests.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from context.models import ContextBuild

logger = logging.getLogger(__name__)

SCOPE = InstrumentationScope("zeroshot_web.operations.tracing", "1")
# A prompt exported on request is cut here (a collector's request limit is a few MB).
PROMPT_MAX_CHARS = 256_000
# Pack decisions exported as events of one build, at most (a build of thousands of packs keeps
# its first ones; the span says how many there were).
PACK_EVENTS_MAX = 200
# Messages listed as events of one completion's publish span, at most.
PUBLISH_EVENTS_MAX = 100

_state = threading.local()
_processor: SpanProcessor | None = None
_resource: Resource | None = None


def tracing_configure() -> None:
    """Export traces when ``OPERATIONS_OTEL_ENABLED`` is set (``OperationsConfig.ready``)."""
    if not settings.OPERATIONS_OTEL_ENABLED:
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=settings.OPERATIONS_OTEL_ENDPOINT, timeout=10)
    processor = BatchSpanProcessor(exporter)
    atexit.register(processor.shutdown)
    tracing_use(processor)


def tracing_flush(timeout_ms: int = 10_000) -> bool:
    """Export the spans still queued (the server's lifespan shutdown calls it); True when done.

    The exit hook (``atexit``) shuts the processor down too, but a server stopped by a signal
    may end before it runs; the ASGI lifespan's shutdown comes first, while the loop still runs.
    """
    processor = _processor
    if processor is None:
        return True
    try:
        return bool(processor.force_flush(timeout_ms))
    except Exception:  # a trace is never worth a failed shutdown
        logger.exception("the queued spans were not exported at shutdown")
        return False


def tracing_use(processor: SpanProcessor | None) -> None:
    """Send the spans to ``processor`` from now on (None: stop tracing); connects the receivers."""
    global _processor, _resource
    from context.signals import build_done
    from runs.observe import task_claimed, task_completed, task_failed

    _processor = processor
    _resource = Resource.create({"service.name": settings.OPERATIONS_OTEL_SERVICE_NAME})
    build_done.connect(_on_build, dispatch_uid="operations.tracing.build")
    task_claimed.connect(_on_claim, dispatch_uid="operations.tracing.claim")
    task_completed.connect(_on_completion, dispatch_uid="operations.tracing.completion")
    task_failed.connect(_on_failure, dispatch_uid="operations.tracing.failure")


def trace_id_of(task_id: str) -> int:
    """The trace id of a task: the same in every process."""
    return _digest(f"trace:{task_id}", 16)


def span_id_of(task_id: str, step: str, attempt: int = 0) -> int:
    """The span id of one step of one attempt of a task: the same in every process."""
    return _digest(f"span:{task_id}:{step}:{attempt}", 8)


def _digest(text: str, size: int) -> int:
    value = int.from_bytes(hashlib.sha256(text.encode()).digest()[:size], "big")
    return value or 1  # an id is never 0


# --- the receivers -------------------------------------------------------------------------------


def _on_build(*, outcome: Any, started_ns: int, ended_ns: int, **_: Any) -> None:
    """Keep the latest recorded build of this thread: the claim that made it sends its span."""
    if _processor is not None and outcome.recorded:
        _state.build = (outcome.build_id, started_ns, ended_ns, outcome)


def _on_claim(*, claim: Any, started_ns: int, ended_ns: int, **_: Any) -> None:
    if _processor is None:
        return
    try:
        _claim_spans(claim, started_ns, ended_ns)
    except Exception:  # a trace is never worth a failed claim
        logger.exception("the claim's spans of task %s were not exported", claim.task.id)


def _on_completion(
    *,
    completion: Any,
    started_ns: int,
    ended_ns: int,
    hook_ns: tuple[int, int] | None,
    **_: Any,
) -> None:
    if _processor is None:
        return
    try:
        _completion_spans(completion, started_ns, ended_ns, hook_ns)
    except Exception:  # a trace is never worth a failed completion
        logger.exception("the completion's spans of task %s were not exported", completion.task.id)


def _on_failure(*, task: Any, ended_ns: int, **_: Any) -> None:
    if _processor is None:
        return
    try:
        _failure_spans(task, ended_ns)
    except Exception:  # a trace is never worth a failed fail call
        logger.exception("the failure's spans of task %s were not exported", task.id)


# --- the spans -----------------------------------------------------------------------------------


def _claim_spans(claim: Any, started_ns: int, ended_ns: int) -> None:
    task = claim.task
    attempt = int(task.attempts)
    claim_id = span_id_of(task.id, "claim", attempt)
    common = _task_attributes(task)
    _emit(
        task.id,
        "claim",
        claim_id,
        parent=span_id_of(task.id, "task"),
        start=started_ns,
        end=ended_ns,
        attributes={**common, "zeroshot.task.attempt": attempt, "zeroshot.runner": task.worker},
        kind=SpanKind.SERVER,
    )
    build = getattr(_state, "build", None)
    _state.build = None
    build_start, build_end = started_ns, ended_ns
    if build is not None and build[0] == task.build_id:
        build_start, build_end = build[1], build[2]
    metrics = claim.metrics if isinstance(claim.metrics, Mapping) else {}
    budget = metrics.get("budget") or {}
    packs = metrics.get("packs") or []
    events = [
        Event(
            "zeroshot.context.pack",
            _clean(
                {
                    "zeroshot.pack.id": pack.get("id"),
                    "zeroshot.pack.section": pack.get("section"),
                    "zeroshot.pack.status": pack.get("status"),
                    "zeroshot.pack.priority": pack.get("priority"),
                    "zeroshot.pack.variant": pack.get("variant"),
                    "zeroshot.pack.reason": pack.get("reason"),
                    "zeroshot.pack.chars": pack.get("chars"),
                    "zeroshot.pack.estimated_tokens": pack.get("estimatedTokens"),
                    "zeroshot.pack.truncated": pack.get("truncated"),
                }
            ),
            timestamp=build_end,
        )
        for pack in packs[:PACK_EVENTS_MAX]
        if isinstance(pack, Mapping)
    ]
    if settings.OPERATIONS_OTEL_PROMPTS:
        events.append(
            Event(
                "gen_ai.content.prompt",
                {"gen_ai.prompt": str(claim.prompt)[:PROMPT_MAX_CHARS]},
                timestamp=build_end,
            )
        )
    model = claim.agent.get("model") if isinstance(claim.agent, Mapping) else None
    _emit(
        task.id,
        "context build",
        span_id_of(task.id, "build", attempt),
        parent=claim_id,
        start=build_start,
        end=build_end,
        attributes=_clean(
            {
                **common,
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": model,
                "zeroshot.build.id": task.build_id,
                "zeroshot.context.estimated_tokens": budget.get("finalTokens"),
                "zeroshot.context.max_tokens": budget.get("maxTokens"),
                "zeroshot.context.packs": len(packs),
            }
        ),
        events=events,
    )


def _completion_spans(
    completion: Any, started_ns: int, ended_ns: int, hook_ns: tuple[int, int] | None
) -> None:
    task = completion.task
    attempt = int(task.attempts)
    common = _task_attributes(task)
    root = span_id_of(task.id, "task")
    usage = task.usage if isinstance(task.usage, Mapping) else {}
    build = (
        ContextBuild.objects.filter(pk=task.build_id).values("final_tokens", "metrics").first()
        if task.build_id is not None
        else None
    )
    estimated = build["final_tokens"] if build else None
    if task.claimed_at is not None:
        _emit(
            task.id,
            f"invoke_agent {task.agent_id}",
            span_id_of(task.id, "agent", attempt),
            parent=root,
            start=task.claimed_at * 1_000_000,
            end=max(started_ns, task.claimed_at * 1_000_000),
            attributes=_clean(
                {
                    **common,
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": task.agent_id,
                    "gen_ai.request.model": usage.get("model"),
                    "gen_ai.response.model": usage.get("model"),
                    "gen_ai.usage.input_tokens": usage.get("inputTokens"),
                    "gen_ai.usage.output_tokens": usage.get("outputTokens"),
                    "zeroshot.context.estimated_tokens": estimated,
                    "zeroshot.usage.cost_usd": usage.get("costUsd"),
                    "zeroshot.runner": task.worker,
                    "zeroshot.task.attempt": attempt,
                }
            ),
            kind=SpanKind.CLIENT,
        )
    completion_id = span_id_of(task.id, "completion", attempt)
    _emit(
        task.id,
        "completion",
        completion_id,
        parent=root,
        start=started_ns,
        end=ended_ns,
        attributes={**common, "zeroshot.task.attempt": attempt},
        kind=SpanKind.SERVER,
    )
    publish_start = started_ns
    if hook_ns is not None:
        _emit(
            task.id,
            "hook",
            span_id_of(task.id, "hook", attempt),
            parent=completion_id,
            start=hook_ns[0],
            end=hook_ns[1],
            attributes=common,
        )
        publish_start = hook_ns[1]
    messages: Sequence[Any] = completion.messages
    _emit(
        task.id,
        "publish",
        span_id_of(task.id, "publish", attempt),
        parent=completion_id,
        start=publish_start,
        end=ended_ns,
        attributes={**common, "zeroshot.messages": len(messages)},
        events=[
            Event(
                "zeroshot.message.published",
                {
                    "zeroshot.message.topic": str(m.topic),
                    "zeroshot.message.id": m.id,
                    "zeroshot.message.sequence": m.sequence,
                },
                timestamp=m.timestamp * 1_000_000,
            )
            for m in messages[:PUBLISH_EVENTS_MAX]
        ],
        kind=SpanKind.PRODUCER,
    )
    _emit(
        task.id,
        f"task {task.agent_id}",
        root,
        parent=None,
        start=task.created_at * 1_000_000,
        end=ended_ns,
        attributes=_clean(
            {
                **common,
                "zeroshot.task.state": task.state,
                "zeroshot.task.attempts": attempt,
                "zeroshot.task.iteration": task.iteration,
                "zeroshot.trigger.topic": str(task.trigger_topic),
                "zeroshot.trigger.message_id": task.trigger_message_id,
            }
        ),
        status=Status(StatusCode.OK),
    )


def _failure_spans(task: Any, ended_ns: int) -> None:
    """A runner's fail call: the attempt's run ends in an error; a task that failed for good
    ends its trace too. The error's text is the agent's and stays out (its length goes)."""
    attempt = int(task.attempts)
    common = _task_attributes(task)
    root = span_id_of(task.id, "task")
    error = Status(StatusCode.ERROR, "the agent's run failed")
    if task.claimed_at is not None:
        _emit(
            task.id,
            f"invoke_agent {task.agent_id}",
            span_id_of(task.id, "agent", attempt),
            parent=root,
            start=task.claimed_at * 1_000_000,
            end=ended_ns,
            attributes={
                **common,
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": task.agent_id,
                "zeroshot.task.attempt": attempt,
                "zeroshot.task.state": task.state,
                "zeroshot.error.chars": len(task.error or ""),
                "zeroshot.runner": task.worker,
            },
            kind=SpanKind.CLIENT,
            status=error,
        )
    if task.state == "failed":
        _emit(
            task.id,
            f"task {task.agent_id}",
            root,
            parent=None,
            start=task.created_at * 1_000_000,
            end=ended_ns,
            attributes={
                **common,
                "zeroshot.task.state": task.state,
                "zeroshot.task.attempts": attempt,
                "zeroshot.task.iteration": task.iteration,
                "zeroshot.trigger.topic": str(task.trigger_topic),
            },
            status=error,
        )


def _task_attributes(task: Any) -> dict[str, Any]:
    return {
        "zeroshot.task.id": task.id,
        "zeroshot.cluster.id": task.cluster_id,
        "zeroshot.agent.id": task.agent_id,
    }


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes that have a value OpenTelemetry takes (no None, no nested objects)."""
    return {
        key: value
        for key, value in attributes.items()
        if isinstance(value, str | bool | int | float)
    }


def _emit(
    task_id: str,
    name: str,
    span_id: int,
    *,
    parent: int | None,
    start: int,
    end: int,
    attributes: Mapping[str, Any],
    events: Sequence[Event] = (),
    kind: SpanKind = SpanKind.INTERNAL,
    status: Status | None = None,
) -> None:
    processor = _processor
    if processor is None:
        return
    trace_id = trace_id_of(task_id)
    flags = TraceFlags(TraceFlags.SAMPLED)
    span = ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags),
        parent=(
            SpanContext(trace_id, parent, is_remote=True, trace_flags=flags)
            if parent is not None
            else None
        ),
        resource=_resource,
        attributes=attributes,
        events=events,
        kind=kind,
        status=status or Status(StatusCode.UNSET),
        start_time=start,
        end_time=max(start, end),
        instrumentation_scope=SCOPE,
    )
    processor.on_end(span)
