"""OpenTelemetry traces: one per task, its tree, the GenAI attributes, no prompt text by default.

Two ways in: the SDK's in-memory exporter (the spans as the SDK hands them to an exporter), and a
real OTLP/HTTP receiver on a free port that decodes each export with the opentelemetry-proto
classes (the bytes a collector such as Langfuse or Phoenix would get).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.test import override_settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from context.models import ContextBuild
from context.services.templates import cluster_create_from_template, templates_load_builtin
from ledger.interfaces import cluster_get, message_get
from operations import tracing
from runs.models import Task
from tests.conftest import ApiClient
from tests.runs.conftest import ScriptedWorker

pytestmark = pytest.mark.django_db(transaction=True)

# A phrase of the issue: it is in every prompt, so it must be in no export unless asked for.
ISSUE = "Add a login button to the frobnicator page"
TASK_STEPS = {"claim", "context build", "completion", "hook", "publish"}


@pytest.fixture(autouse=True)
def _templates(db: None) -> Iterator[None]:
    templates_load_builtin()
    yield
    tracing.tracing_use(None)


def run_cluster(api: ApiClient) -> str:
    """A worker-validator cluster to completion: worker, validator (approves)."""
    cluster_id = cluster_create_from_template(template_name="worker-validator", params={}).id
    response = api.post(f"/api/v1/clusters/{cluster_id}/start", {"issue": {"text": ISSUE}})
    assert response.status_code == 200, response.content
    worker = ScriptedWorker(
        api,
        {
            "worker": [{"summary": "done", "completionStatus": {"canValidate": True}}],
            "validator": [{"approved": True, "summary": "ok", "errors": [], "criteriaResults": []}],
        },
    )
    claims = worker.run()
    assert [c["task"]["agent_id"] for c in claims] == ["worker", "validator"]
    assert all(ISSUE in c["prompt"] for c in claims)
    assert cluster_get(cluster_id=cluster_id).state == "completed"
    return cluster_id


def values(span: ReadableSpan) -> list[Any]:
    """Every attribute value of a span and of its events."""
    found = list((span.attributes or {}).values())
    for event in span.events:
        found.extend((event.attributes or {}).values())
    return found


def test_each_task_is_one_trace_with_its_steps_and_the_genai_attributes(api: ApiClient) -> None:
    # given traces going to the SDK's in-memory exporter
    exporter = InMemorySpanExporter()
    tracing.tracing_use(SimpleSpanProcessor(exporter))

    # when a cluster runs to completion
    cluster_id = run_cluster(api)

    # then each task is one trace: its root and its steps, every step under the root
    spans = exporter.get_finished_spans()
    for task in Task.objects.filter(cluster_id=cluster_id):
        trace = [s for s in spans if s.context.trace_id == tracing.trace_id_of(task.id)]
        by_name = {s.name: s for s in trace}
        assert set(by_name) == {
            f"task {task.agent_id}",
            f"invoke_agent {task.agent_id}",
            *TASK_STEPS,
        }
        root = by_name[f"task {task.agent_id}"]
        assert root.parent is None
        assert root.attributes["zeroshot.task.id"] == task.id
        assert root.attributes["zeroshot.trigger.topic"] == task.trigger_topic
        parents = {name: s.parent.span_id for name, s in by_name.items() if s.parent}
        root_id = root.context.span_id
        assert parents == {
            "claim": root_id,
            "context build": by_name["claim"].context.span_id,
            f"invoke_agent {task.agent_id}": root_id,
            "completion": root_id,
            "hook": by_name["completion"].context.span_id,
            "publish": by_name["completion"].context.span_id,
        }
        # the times nest: created → claimed → built → run → completed
        assert root.start_time == task.created_at * 1_000_000
        claim, build = by_name["claim"], by_name["context build"]
        assert root.start_time <= claim.start_time <= build.start_time
        assert build.end_time <= claim.end_time
        run = by_name[f"invoke_agent {task.agent_id}"]
        assert run.start_time == task.claimed_at * 1_000_000
        assert run.end_time <= by_name["completion"].start_time
        assert by_name["hook"].end_time <= by_name["completion"].end_time <= root.end_time

        # the build: its pack decisions as events, its estimate
        row = ContextBuild.objects.get(pk=task.build_id)
        packs = [e for e in build.events if e.name == "zeroshot.context.pack"]
        assert [e.attributes["zeroshot.pack.id"] for e in packs] == [
            p["id"] for p in row.metrics["packs"]
        ]
        assert [e.attributes["zeroshot.pack.status"] for e in packs] == [
            p["status"] for p in row.metrics["packs"]
        ]
        assert build.attributes["zeroshot.context.estimated_tokens"] == row.final_tokens
        # the agent's run: GenAI semantic conventions, billed next to the estimate
        assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert run.attributes["gen_ai.agent.name"] == task.agent_id
        assert run.attributes["gen_ai.request.model"] == "test-model"
        assert run.attributes["gen_ai.usage.input_tokens"] == 1200
        assert run.attributes["gen_ai.usage.output_tokens"] == 300
        assert run.attributes["zeroshot.context.estimated_tokens"] == row.final_tokens
        # what the completion published, in order
        published = [e.attributes["zeroshot.message.topic"] for e in by_name["publish"].events]
        assert published == [
            message_get(cluster_id=cluster_id, message_id=m).topic for m in task.completion_messages
        ]
        assert published[:2] == ["TOKEN_USAGE", "AGENT_LIFECYCLE"]
        # and no prompt text anywhere
        assert not [v for s in trace for v in values(s) if isinstance(v, str) and ISSUE in v]


@override_settings(OPERATIONS_OTEL_PROMPTS=True)
def test_the_prompt_is_exported_when_a_setting_asks_for_it(api: ApiClient) -> None:
    exporter = InMemorySpanExporter()
    tracing.tracing_use(SimpleSpanProcessor(exporter))
    run_cluster(api)
    builds = [s for s in exporter.get_finished_spans() if s.name == "context build"]
    assert len(builds) == 2
    for build in builds:
        (prompt,) = [e for e in build.events if e.name == "gen_ai.content.prompt"]
        assert ISSUE in prompt.attributes["gen_ai.prompt"]


class OtlpReceiver:
    """An OTLP/HTTP traces endpoint on a free port: keeps each decoded export and its bytes."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.bodies: list[bytes] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                assert self.path == "/v1/traces"
                assert self.headers["Content-Type"] == "application/x-protobuf"
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.bodies.append(body)
                receiver.requests.append(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def spans(self) -> list[tuple[str, Any]]:
        """(service name, span) of every span received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}[
                    "service.name"
                ]
                for scope_spans in resource_spans.scope_spans:
                    found.extend((service, span) for span in scope_spans.spans)
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    try:
        yield server
    finally:
        server.close()


def test_a_completed_cluster_s_traces_reach_an_otlp_http_receiver(
    api: ApiClient, receiver: OtlpReceiver
) -> None:
    # given the setting on, pointing at a receiver (as an operator configures it)
    with override_settings(OPERATIONS_OTEL_ENABLED=True, OPERATIONS_OTEL_ENDPOINT=receiver.url):
        tracing.tracing_configure()
    processor = tracing._processor
    assert processor is not None

    # when a cluster runs to completion and the batch is flushed
    cluster_id = run_cluster(api)
    assert processor.force_flush(10_000)

    # then the receiver decoded one trace per task, rooted at the task, the steps under it
    received = receiver.spans()
    assert {service for service, _ in received} == {"zeroshot-web"}
    tasks = list(Task.objects.filter(cluster_id=cluster_id))
    assert len(tasks) == 2
    for task in tasks:
        trace_id = tracing.trace_id_of(task.id).to_bytes(16, "big")
        trace = {span.name: span for _, span in received if span.trace_id == trace_id}
        root = trace.pop(f"task {task.agent_id}")
        assert root.parent_span_id == b""
        assert set(trace) == {f"invoke_agent {task.agent_id}", *TASK_STEPS}
        ids = {name: span.span_id for name, span in trace.items()}
        assert trace["claim"].parent_span_id == root.span_id
        assert trace["context build"].parent_span_id == ids["claim"]
        assert trace["completion"].parent_span_id == root.span_id
        assert trace["hook"].parent_span_id == ids["completion"]
        assert trace["publish"].parent_span_id == ids["completion"]
        run = trace[f"invoke_agent {task.agent_id}"]
        attributes = {a.key: a.value for a in run.attributes}
        assert attributes["gen_ai.usage.input_tokens"].int_value == 1200
        assert attributes["gen_ai.usage.output_tokens"].int_value == 300
        assert attributes["gen_ai.request.model"].string_value == "test-model"
        estimated = ContextBuild.objects.get(pk=task.build_id).final_tokens
        assert attributes["zeroshot.context.estimated_tokens"].int_value == estimated
        assert len(trace["context build"].events) == len(
            ContextBuild.objects.get(pk=task.build_id).metrics["packs"]
        )
    # and no byte of the prompt's text went over the wire
    assert receiver.bodies
    assert not [body for body in receiver.bodies if ISSUE.encode() in body]
    processor.shutdown()


def test_tracing_is_off_by_default(api: ApiClient) -> None:
    tracing.tracing_configure()  # as the app does at start, with the default settings
    assert tracing._processor is None
    run_cluster(api)  # and a cluster runs with nothing listening


@override_settings(RUNS_RETRY_BASE_SECONDS=0)
def test_a_failed_attempt_is_an_error_span_and_a_task_failed_for_good_ends_its_trace(
    api: ApiClient,
) -> None:
    # given traces going to the in-memory exporter, and a started cluster
    exporter = InMemorySpanExporter()
    tracing.tracing_use(SimpleSpanProcessor(exporter))
    cluster_id = cluster_create_from_template(template_name="worker-validator", params={}).id
    started = api.post(f"/api/v1/clusters/{cluster_id}/start", {"issue": {"text": ISSUE}})
    assert started.status_code == 200, started.content

    def claim() -> dict[str, Any]:
        response = api.post("/api/v1/tasks/claim", {"wait": 0, "worker": "r1"})
        assert response.status_code == 200, response.content
        return dict(response.json()["task"])

    def fail(task: dict[str, Any], retryable: bool) -> None:
        body = {"lease_id": task["lease_id"], "error": f"{ISSUE}: boom", "retryable": retryable}
        response = api.post(f"/api/v1/tasks/{task['id']}/fail", body)
        assert response.status_code == 200, response.content

    # when the worker's first attempt fails and may be retried, and its second fails for good
    first = claim()
    fail(first, retryable=True)
    second = claim()
    assert second["id"] == first["id"]
    fail(second, retryable=False)

    # then its trace holds both attempts' claims and runs, each run an error, under a root
    # that failed
    trace = [
        s
        for s in exporter.get_finished_spans()
        if s.context.trace_id == tracing.trace_id_of(first["id"])
    ]
    runs = [s for s in trace if s.name == "invoke_agent worker"]
    assert sorted(s.attributes["zeroshot.task.attempt"] for s in runs) == [1, 2]
    assert {s.status.status_code for s in runs} == {StatusCode.ERROR}
    assert len([s for s in trace if s.name == "claim"]) == 2
    (root,) = [s for s in trace if s.name == "task worker"]
    assert root.status.status_code == StatusCode.ERROR
    assert root.attributes["zeroshot.task.state"] == "failed"
    assert {s.parent.span_id for s in runs} == {root.context.span_id}
    # and the agent's error text is not exported (its length is)
    assert not [v for s in trace for v in values(s) if isinstance(v, str) and ISSUE in v]
    assert runs[0].attributes["zeroshot.error.chars"] == len(f"{ISSUE}: boom")
