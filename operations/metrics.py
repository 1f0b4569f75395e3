"""``/metrics``: the server in Prometheus text format (issue 21), multi-process aware.

Two kinds of families, so that N server processes add up to the truth:

- read from the database at scrape time (``LedgerCollector``), the same for whichever process
  is scraped: messages by cluster state, tasks by state, queue depth and oldest queued age by
  agent, expired leases, retries pending, pipeline lag, runners seen lately. Every query is
  bounded and index-backed (the task indexes lead with ``state``; lag reads live clusters only).
- measured in each process (``prometheus_client`` metrics): messages published by topic family,
  publish latency, websocket connections, context builds (latency, estimated tokens), the tokens
  the agents' models billed, sandbox evaluations (latency) and the sandbox pool. With
  ``PROMETHEUS_MULTIPROC_DIR`` set (as ``prometheus_client`` asks, before the process starts) a
  scrape adds up every process's files.

Labels stay low-cardinality: a topic *family* from a fixed list, task states, agent ids (a
template's handful). A cluster id appears only with ``OPERATIONS_METRICS_CLUSTER_LABELS``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.db.models import Count, Min, Sum, TextField, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from ledger.interfaces import MessageRecord, bus, now_ms
from ledger.models import Cluster
from operations.lag import pipeline_lagging
from runs.logic.engine import sandbox_observe, sandbox_pool_stats
from runs.models import OPEN_STATES, BufferedTrigger, Task, TaskState
from runs.selectors import runners_seen_count

# zeroshot's topic vocabulary by its first word; anything else is "other".
TOPIC_FAMILIES = frozenset(
    {
        "AGENT",
        "CLUSTER",
        "CONTEXT",
        "HOOK",
        "IMPLEMENTATION",
        "ISSUE",
        "PLAN",
        "STATE",
        "TASK",
        "VALIDATION",
        "WORKER",
    }
)
LAG_CLUSTERS_READ = 1000
# A runner long-polls its claims (10 s by default): one not seen for two minutes is gone.
RUNNERS_RECENT_MS = 120_000


def topic_family(topic: str) -> str:
    """The low-cardinality family of a topic: its first word when it is zeroshot's, else other."""
    first = topic.split("_", 1)[0].upper()
    return first.lower() if first in TOPIC_FAMILIES else "other"


MESSAGES_PUBLISHED = Counter(
    "zeroshot_messages_published",
    "Messages committed by this server (imports excluded), by topic family.",
    ["topic_family"],
)
PUBLISH_SECONDS = Histogram(
    "zeroshot_publish_seconds",
    "Time to answer a publish request (POST …/messages and …/messages/batch).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0),
)
WEBSOCKETS = Gauge(
    "zeroshot_websocket_connections",
    "Websocket connections open (agents' and the dashboard's).",
    multiprocess_mode="livesum",
)
CONTEXT_BUILD_SECONDS = Histogram(
    "zeroshot_context_build_seconds",
    "Time to build an agent's context, by kind (recorded for a task or an API call, preview).",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
CONTEXT_BUILD_TOKENS = Histogram(
    "zeroshot_context_build_tokens",
    "Estimated tokens of each context built, by kind.",
    ["kind"],
    buckets=(256, 1024, 4096, 16384, 32768, 65536, 131072, 262144),
)
MODEL_TOKENS = Counter(
    "zeroshot_model_tokens",
    "Tokens the agents' models billed, as their tasks' completions reported (input, output).",
    ["direction"],
)
SANDBOX_SECONDS = Histogram(
    "zeroshot_sandbox_evaluation_seconds",
    "Time of one script evaluation in a sandbox process (triggers, hooks, transforms).",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
SANDBOX_POOL = Gauge(
    "zeroshot_sandbox_pool",
    "Sandbox processes: the pool's bound (size), those alive (processes) and those busy.",
    ["kind"],
    multiprocess_mode="livesum",
)
PROCESS_FAMILIES = (
    MESSAGES_PUBLISHED,
    PUBLISH_SECONDS,
    WEBSOCKETS,
    CONTEXT_BUILD_SECONDS,
    CONTEXT_BUILD_TOKENS,
    MODEL_TOKENS,
    SANDBOX_SECONDS,
    SANDBOX_POOL,
)


# The counter's child per topic family (a handful): ``labels`` takes a lock and checks its
# arguments on every call, once per published message.
_PUBLISHED_BY_FAMILY: dict[str, Any] = {}


def count_published(batch: Sequence[MessageRecord]) -> None:
    """A bus batch subscriber: the messages of every committed publish of this process, one
    increment per topic family of the batch rather than one per message (a batch's messages
    mostly share a topic; docs/decisions/0286)."""
    by_topic: dict[str, int] = {}
    for message in batch:
        by_topic[message.topic] = by_topic.get(message.topic, 0) + 1
    by_family: dict[str, int] = {}
    for topic, count in by_topic.items():
        family = topic_family(topic)
        by_family[family] = by_family.get(family, 0) + count
    for family, count in by_family.items():
        child = _PUBLISHED_BY_FAMILY.get(family)
        if child is None:
            child = _PUBLISHED_BY_FAMILY[family] = MESSAGES_PUBLISHED.labels(topic_family=family)
        child.inc(count)


def count_build(*, outcome: Any, started_ns: int, ended_ns: int, **_: Any) -> None:
    """A ``context.signals.build_done`` receiver: the build's latency and estimated tokens."""
    kind = "recorded" if outcome.recorded else "preview"
    CONTEXT_BUILD_SECONDS.labels(kind=kind).observe(max(0, ended_ns - started_ns) / 1e9)
    CONTEXT_BUILD_TOKENS.labels(kind=kind).observe(outcome.result.budget.final_tokens)


def count_billed(*, completion: Any, **_: Any) -> None:
    """A ``runs.observe.task_completed`` receiver: the tokens the agent's model billed."""
    usage = completion.task.usage or {}
    for direction, key in (("input", "inputTokens"), ("output", "outputTokens")):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            MODEL_TOKENS.labels(direction=direction).inc(value)


def count_evaluation(seconds: float) -> None:
    """A sandbox observer: one evaluation's latency, and the pool as it is now."""
    SANDBOX_SECONDS.observe(seconds)
    sandbox_pool_read()


def sandbox_pool_read() -> None:
    """Set the pool gauges of this process from the pool itself."""
    pool = sandbox_pool_stats()
    SANDBOX_POOL.labels(kind="size").set(pool.size)
    SANDBOX_POOL.labels(kind="processes").set(pool.processes)
    SANDBOX_POOL.labels(kind="busy").set(pool.busy)


def subscribe() -> None:
    """Measure from now on (``OperationsConfig.ready``): published messages, builds, billed
    tokens, sandbox evaluations."""
    from context.signals import build_done
    from runs.observe import task_completed

    bus.subscribe_batches(count_published)
    build_done.connect(count_build, dispatch_uid="operations.metrics.count_build")
    task_completed.connect(count_billed, dispatch_uid="operations.metrics.count_billed")
    sandbox_observe(count_evaluation)
    sandbox_pool_read()


class LedgerCollector(Collector):
    """The families read from the database at each scrape."""

    def collect(self) -> Iterator[Metric]:
        yield self._messages_by_state()
        yield from self._tasks()
        yield from self._lag()

    def _messages_by_state(self) -> Metric:
        family = GaugeMetricFamily(
            "zeroshot_ledger_messages",
            "Messages stored, by the state of their cluster.",
            labels=["cluster_state"],
        )
        rows = Cluster.objects.values_list("state").annotate(n=Sum("last_sequence")).order_by()
        for state, n in rows:
            family.add_metric([state], float(n or 0))
        return family

    def _tasks(self) -> Iterator[Metric]:
        by_state = GaugeMetricFamily("zeroshot_tasks", "Tasks, by state.", labels=["state"])
        counts = dict(Task.objects.values_list("state").annotate(n=Count("pk")).order_by())
        for state in TaskState.values:
            by_state.add_metric([state], float(counts.get(state, 0)))
        yield by_state

        now = now_ms()
        depth = GaugeMetricFamily(
            "zeroshot_queue_depth", "Queued tasks, by agent and pool.", labels=["agent", "pool"]
        )
        oldest = GaugeMetricFamily(
            "zeroshot_queue_oldest_age_seconds",
            "Age of the oldest queued task, by agent and pool.",
            labels=["agent", "pool"],
        )
        queued = (
            Task.objects.filter(state=TaskState.QUEUED)
            .annotate(pool=_cluster_pool())
            .values_list("agent_id", "pool")
            .annotate(n=Count("pk"), first=Min("created_at"))
            .order_by()
        )
        for agent, pool, n, first in queued:
            depth.add_metric([agent, pool], float(n))
            oldest.add_metric([agent, pool], max(0.0, (now - int(first)) / 1000))
        yield depth
        yield oldest

        # What queued tasks behind a running one used to count: triggers a busy agent keeps.
        waiting = GaugeMetricFamily(
            "zeroshot_triggers_waiting",
            "Trigger-matching messages waiting for a busy agent (its buffer), by agent and pool.",
            labels=["agent", "pool"],
        )
        kept = (
            BufferedTrigger.objects.filter(dropped=False)
            .annotate(pool=_cluster_pool())
            .values_list("agent_id", "pool")
            .annotate(n=Count("pk"))
            .order_by()
        )
        for agent, pool, n in kept:
            waiting.add_metric([agent, pool], float(n))
        yield waiting

        open_tasks = Task.objects.filter(state__in=OPEN_STATES)
        expired = GaugeMetricFamily(
            "zeroshot_task_leases_expired",
            "Claimed tasks whose lease has run out and that no one has taken back yet.",
        )
        expired.add_metric(
            [],
            float(Task.objects.filter(state=TaskState.CLAIMED, lease_expires_at__lt=now).count()),
        )
        yield expired
        retries = GaugeMetricFamily(
            "zeroshot_task_retries_open",
            "Attempts beyond the first of the open (queued or claimed) tasks.",
        )
        attempts = open_tasks.filter(attempts__gt=1).aggregate(n=Sum("attempts"), tasks=Count("pk"))
        retries.add_metric([], float((attempts["n"] or 0) - (attempts["tasks"] or 0)))
        yield retries
        runners = GaugeMetricFamily(
            "zeroshot_runners_seen",
            f"Runners that claimed in the last {RUNNERS_RECENT_MS // 1000} seconds "
            "(the runner registry).",
        )
        runners.add_metric([], float(runners_seen_count(since=now - RUNNERS_RECENT_MS)))
        yield runners

    def _lag(self) -> Iterator[Metric]:
        lagging = pipeline_lagging(limit=LAG_CLUSTERS_READ)
        total = GaugeMetricFamily(
            "zeroshot_pipeline_lag_messages",
            "Messages not yet offered to the pipeline's stages (dispatch), over every cluster.",
        )
        total.add_metric([], float(sum(c.messages for c in lagging)))
        yield total
        count = GaugeMetricFamily(
            "zeroshot_pipeline_lagging_clusters", "Clusters whose pipeline cursor lags."
        )
        count.add_metric([], float(len(lagging)))
        yield count
        age = GaugeMetricFamily(
            "zeroshot_pipeline_oldest_undispatched_age_seconds",
            "How long the oldest message not yet offered to the pipeline has waited.",
        )
        age.add_metric([], max((c.oldest_age_ms for c in lagging), default=0) / 1000)
        yield age
        if settings.OPERATIONS_METRICS_CLUSTER_LABELS:
            per_cluster = GaugeMetricFamily(
                "zeroshot_pipeline_lag_messages_by_cluster",
                "Messages not yet offered to the pipeline, per lagging cluster.",
                labels=["cluster"],
            )
            for lag in lagging:
                per_cluster.add_metric([lag.cluster_id], float(lag.messages))
            yield per_cluster


def metrics_exposition() -> bytes:
    """One scrape: this process's (or every process's) measured families and the ledger's."""
    sandbox_pool_read()
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        for metric in PROCESS_FAMILIES:
            registry.register(metric)
    registry.register(LedgerCollector())
    return generate_latest(registry)


class PublishTimer:
    """Django middleware: times the publish requests (sync and async alike)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if iscoroutinefunction(self):
            return self._acall(request)
        if not _is_publish(request):
            return self.get_response(request)
        started = time.perf_counter()
        try:
            return self.get_response(request)
        finally:
            PUBLISH_SECONDS.observe(time.perf_counter() - started)

    async def _acall(self, request: HttpRequest) -> Any:
        if not _is_publish(request):
            return await self.get_response(request)
        started = time.perf_counter()
        try:
            return await self.get_response(request)
        finally:
            PUBLISH_SECONDS.observe(time.perf_counter() - started)


class WebsocketCounter:
    """ASGI middleware: counts the websockets accepted and not yet closed."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        accepted = False

        async def counting_send(message: Any) -> None:
            nonlocal accepted
            if message.get("type") == "websocket.accept" and not accepted:
                accepted = True
                WEBSOCKETS.inc()
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            if accepted:
                WEBSOCKETS.dec()


def _is_publish(request: HttpRequest) -> bool:
    path = request.path
    return (
        request.method == "POST"
        and path.startswith("/api/v1/clusters/")
        and (path.endswith("/messages") or path.endswith("/messages/batch"))
    )


def _cluster_pool() -> Coalesce:
    """The pool of a row's cluster: its ``pool`` label (runner pools, SPEC §7.4), else "default"."""
    return Coalesce(
        KeyTextTransform("pool", "cluster__labels"), Value("default"), output_field=TextField()
    )
