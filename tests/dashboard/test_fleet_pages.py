"""The fleet page (running clusters, queue, runners, usage) and the task page (a waterfall)."""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard.presentation.waterfall import waterfall
from ledger.interfaces import (
    MessageDraft,
    MessageRecord,
    cluster_create,
    message_publish,
    now_ms,
)
from runs.fleet import usage_by_day
from runs.models import Task, UsageDay
from runs.records import TaskRecord
from runs.services import task_claim, task_complete, task_fail, task_output
from runs.services.tasks import tasks_expire

pytestmark = pytest.mark.django_db(transaction=True)

HX = {"HX-Request": "true"}
XSS = "<script>window.__xss=1</script>"


@pytest.fixture
def operator() -> Client:
    user = get_user_model().objects.create_user("op", password="pw-for-tests-1", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def agent(agent_id: str, topic: str, *, hook: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "id": agent_id,
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": topic}],
        "contextStrategy": {"sources": [{"topic": topic}]},
    }
    if hook:
        config["hooks"] = {
            "onComplete": {
                "action": "publish_message",
                "config": {"topic": hook, "content": {"text": "{{result.summary}}"}},
            }
        }
    return config


def running(cluster_id: str, *agents: dict[str, Any], labels: dict[str, str] | None = None) -> str:
    return cluster_create(
        cluster_id=cluster_id,
        config={"agents": list(agents)},
        state="running",
        labels=labels or {},
    ).id


def publish(cluster_id: str, topic: str, text: str = "go") -> None:
    message_publish(
        cluster_id=cluster_id,
        draft=MessageDraft(topic=topic, sender="system", content={"text": text}),
    )


def claim(worker: str, **kw: Any) -> Any:
    claimed = task_claim(worker=worker, **kw)
    assert claimed is not None
    return claimed.task


# --- the fleet page ----------------------------------------------------------------------------


def test_the_fleet_page_shows_clusters_queue_runners_and_usage(operator: Client) -> None:
    # given two running clusters in two pools: one worker done with usage, one running,
    # one waiting; a stopped cluster that is not shown
    a = running("alpha-1", agent("worker", "GO", hook="DONE"), labels={"pool": "demo"})
    b = running(
        "beta-2", agent("worker", "GO"), agent("reviewer", "REVIEW"), labels={"pool": "gpu"}
    )
    cluster_create(cluster_id="gone-3", config={"agents": []}, state="stopped")
    publish(a, "GO")
    done = claim("box-1", labels=[("pool", "demo")], providers=["claude"])
    task_complete(
        task_id=done.id,
        lease_id=done.lease_id,
        result={"summary": "ok"},
        usage={"inputTokens": 1200, "outputTokens": 300, "model": "sonnet-x", "costUsd": 0.25},
    )
    publish(b, "GO")
    publish(b, "REVIEW")
    busy = claim("box-2", cluster_id=b, agents=["worker"])
    # when the operator opens the fleet page
    html = operator.get("/fleet/").content.decode()
    # then every running cluster is there with its agents' states and its last message
    assert "alpha-1" in html
    assert "beta-2" in html
    assert "gone-3" not in html
    beta = html[html.index('href="/clusters/beta-2/"') :]
    beta = beta[: beta.index("</tr>")]
    assert "run-running" in beta
    assert f'href="/tasks/{busy.id}/"' in beta
    assert "run-queued" in beta
    assert "reviewer" in beta
    assert "AGENT_LIFECYCLE" in beta  # the newest message: the worker's TASK_STARTED
    # the queue: the reviewer waits in pool gpu, the worker runs there
    queue = section(html, "fleet-queue")
    assert re.search(r"pool=gpu</span>.*?reviewer.*?>1</td>", queue, re.S)
    # the runners: what they serve, what they hold, what they did
    runners = section(html, "fleet-runners")
    assert "box-1" in runners
    assert "pool=demo" in runners
    assert "claude" in runners
    box2 = runners[runners.index("box-2") :]
    assert 'data-label="Holds">1<' in box2
    # usage: today, by model and agent, billed tokens and cost
    usage = section(html, "fleet-usage")
    assert "sonnet-x" in usage
    assert "1,200" in usage
    assert "300" in usage
    assert "$0.2500" in usage
    # the page keeps itself live: it polls its region
    assert 'hx-get="/fleet/" hx-trigger="every 5000ms"' in html
    region = operator.get("/fleet/", headers=HX).content.decode()
    assert region.startswith('\n<div id="fleet-region"') or region.lstrip().startswith(
        '<div id="fleet-region"'
    )
    assert "<html" not in region


def section(html: str, heading_id: str) -> str:
    start = html.index(f'id="{heading_id}"')
    end = html.find("</section>", start)
    return html[start:end]


def test_the_fleet_page_is_in_the_nav_and_escapes_what_agents_report(operator: Client) -> None:
    # given a cluster whose runner reports a hostile model name and a hostile runner name
    cid = running("x-1", agent("worker", "GO"))
    publish(cid, "GO")
    task = claim(XSS)
    task_complete(
        task_id=task.id,
        lease_id=task.lease_id,
        result={"summary": "ok"},
        usage={"inputTokens": 1, "outputTokens": 1, "model": XSS},
    )
    home = operator.get("/").content.decode()
    html = operator.get("/fleet/").content.decode()
    assert 'href="/fleet/"' in home
    assert XSS not in html
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html


def fleet_of(count: int, first: int = 0) -> None:
    for i in range(first, first + count):
        cid = running(
            f"c-{i}", agent("worker", "GO"), agent("reviewer", "REVIEW"), labels={"pool": f"p{i}"}
        )
        publish(cid, "GO")
        publish(cid, "REVIEW")
    for i in range(first, first + count):
        task = claim(f"runner-{i}")
        task_complete(
            task_id=task.id,
            lease_id=task.lease_id,
            result={"summary": "ok"},
            usage={"inputTokens": 10, "outputTokens": 5, "model": "m"},
        )


def test_the_fleet_page_query_count_is_pinned(
    operator: Client, django_assert_num_queries: Any
) -> None:
    # session, user, running clusters (with their newest message), agents' tasks grouped, their
    # open tasks, the queue (with its pools), runners, what runners hold, usage
    fleet_of(2)
    with django_assert_num_queries(9):
        operator.get("/fleet/")
    # and it does not grow with the fleet
    fleet_of(6, first=2)
    with django_assert_num_queries(9):
        operator.get("/fleet/")


def test_the_fleet_page_says_what_to_do_when_empty(operator: Client) -> None:
    html = operator.get("/fleet/").content.decode()
    assert "No cluster is running" in html
    assert "No runner has claimed a task yet" in html
    assert "No usage reported" in html


def test_usage_per_day_sums_every_cluster_by_model_and_agent() -> None:
    # given two clusters whose workers complete on the same model, one with a cost, one
    # without, and a reviewer on another model
    for cid in ("u-1", "u-2"):
        running(cid, agent("worker", "GO"), agent("reviewer", "REVIEW"))
        publish(cid, "GO")
    for cost in (0.5, None):
        task = claim("box")
        usage: dict[str, Any] = {"inputTokens": 100, "outputTokens": 10, "model": "m-1"}
        if cost is not None:
            usage["costUsd"] = cost
        task_complete(task_id=task.id, lease_id=task.lease_id, result={}, usage=usage)
    publish("u-1", "REVIEW")
    task = claim("box", agents=["reviewer"])
    task_complete(
        task_id=task.id, lease_id=task.lease_id, result={}, usage={"inputTokens": 7, "model": "m-2"}
    )
    # when the fleet reads the usage of the last days
    rows = {(r.model, r.agent_id): r for r in usage_by_day(now=now_ms()).rows}
    # then the workers' two tasks are one row, the cost of the one that reported it kept
    worker = rows[("m-1", "worker")]
    assert (worker.tasks, worker.input_tokens, worker.output_tokens) == (2, 200, 20)
    assert worker.cost_usd == 0.5
    reviewer = rows[("m-2", "reviewer")]
    assert (reviewer.tasks, reviewer.input_tokens, reviewer.cost_usd) == (1, 7, None)
    assert len(rows) == 2


def test_the_migration_sums_the_usage_of_tasks_completed_before_it() -> None:
    # given completed tasks with usage, and the per-day rows lost (as before the migration)
    for cid in ("m-1", "m-2"):
        running(cid, agent("worker", "GO"))
        publish(cid, "GO")
        task = claim("box")
        task_complete(
            task_id=task.id,
            lease_id=task.lease_id,
            result={},
            usage={"inputTokens": 50, "outputTokens": 5, "model": "m", "costUsd": 0.25},
        )
    before = usage_by_day(now=now_ms()).rows
    UsageDay.objects.all().delete()
    # when the migration's backfill runs
    importlib.import_module("runs.migrations.0005_usage_day").backfill(django_apps, None)
    # then the page reads the same sums the completions wrote
    assert usage_by_day(now=now_ms()).rows == before
    assert before[0].tasks == 2
    assert before[0].cost_usd == 0.5


# --- the task page -----------------------------------------------------------------------------


def test_the_task_page_is_a_waterfall_of_one_task(operator: Client) -> None:
    # given a task queued, claimed by box-1, that streamed output and completed with usage and
    # a hook
    cid = running("w-1", agent("worker", "GO", hook="DONE"))
    publish(cid, "GO")
    task = claim("box-1", lease_seconds=90)
    task_output(task_id=task.id, lease_id=task.lease_id, lines=["reading the code", XSS])
    task_complete(
        task_id=task.id,
        lease_id=task.lease_id,
        # zeroshot's default schema asks for both (SPEC §7.5): no AGENT_SCHEMA_WARNING step
        result={"summary": "fixed it", "result": "the bug is gone"},
        usage={"inputTokens": 900, "outputTokens": 40, "model": "sonnet-x"},
    )
    build_id = Task.objects.get(pk=task.id).build_id
    # when the operator opens it
    html = operator.get(f"/tasks/{task.id}/").content.decode()
    # then each step is there, in order, with its runner, lease, build, output and end
    labels = re.findall(r'<span class="step-label">(.*?)</span>\s*<span class="step-track"', html)
    assert labels == [
        "Queued",
        "Claimed · attempt 1",
        "Prompt built",
        "Agent running",
        "Completed",
        "Usage reported",
        "Hook published",
    ]
    assert "by box-1 · lease 90 s" in html
    assert f'href="/clusters/{cid}/builds/{build_id}/"' in html
    assert "reading the code" in html
    assert XSS not in html
    assert "900 in / 40 out tokens (billed)" in html
    assert "DONE #" in html
    published = section(html, "published-title")
    for topic in ("AGENT_LIFECYCLE", "TOKEN_USAGE", "DONE"):
        assert topic in published
    assert "AGENT_OUTPUT" not in published  # output is shown above, not as messages
    # bars sit on the axis
    for x, width in re.findall(r'<rect class="step-bar" x="([\d.]+)" y="1" width="([\d.]+)"', html):
        assert float(x) >= 0
        assert float(x) + float(width) <= 100.01


def test_the_task_page_shows_retries_and_lost_leases(operator: Client, settings: Any) -> None:
    # given a task failed once (retried), then claimed by box-2 whose lease ran out, then
    # completed by box-3
    settings.RUNS_RETRY_BASE_SECONDS = 0
    cid = running("r-1", agent("worker", "GO"))
    publish(cid, "GO")
    first = claim("box-1")
    task_fail(task_id=first.id, lease_id=first.lease_id, error="model timed out")
    claim("box-2", lease_seconds=5)
    tasks_expire(now=now_ms() + 10_000)
    third = claim("box-3")
    task_complete(task_id=third.id, lease_id=third.lease_id, result={"summary": "ok"})
    # when the operator opens it
    html = operator.get(f"/tasks/{first.id}/").content.decode()
    # then the three attempts are there with their runners and how each ended
    assert "by box-1" in html
    assert "by box-2 · lease 5 s" in html
    assert "by box-3" in html
    assert "Failed · retry scheduled" in html
    assert "model timed out" in html
    assert "Lease ran out" in html
    assert html.count('class="step step-completed') == 1
    assert "Output of attempt 3" in html


def test_an_open_task_page_refreshes_itself_and_a_finished_one_does_not(
    operator: Client,
) -> None:
    cid = running("o-1", agent("worker", "GO"))
    publish(cid, "GO")
    queued = Task.objects.get(cluster_id=cid)
    html = operator.get(f"/tasks/{queued.id}/").content.decode()
    assert f'hx-get="/tasks/{queued.id}/" hx-trigger="every 2500ms"' in html
    assert "Queued" in html
    task = claim("box-1")
    task_complete(task_id=task.id, lease_id=task.lease_id, result={"summary": "ok"})
    region = operator.get(f"/tasks/{queued.id}/", headers=HX).content.decode()
    assert "<html" not in region
    assert "hx-trigger" not in region


def test_the_task_page_query_count_is_pinned(
    operator: Client, django_assert_num_queries: Any
) -> None:
    cid = running("q-1", agent("worker", "GO", hook="DONE"))
    publish(cid, "GO")
    task = claim("box-1")
    for i in range(5):
        task_output(task_id=task.id, lease_id=task.lease_id, lines=[f"line {i}"], offset=i)
    task_complete(task_id=task.id, lease_id=task.lease_id, result={"summary": "ok"})
    # session, user, task, cluster, its messages, its output, its builds
    with django_assert_num_queries(7):
        response = operator.get(f"/tasks/{task.id}/")
    assert response.status_code == 200


def test_the_task_page_reads_and_shows_a_bounded_part_of_a_huge_output(operator: Client) -> None:
    # given a task whose agent streamed five batches of one 30,000-character line each
    cid = running("big-1", agent("worker", "GO"))
    publish(cid, "GO")
    task = claim("box-1")
    for i in range(5):
        task_output(task_id=task.id, lease_id=task.lease_id, lines=[str(i) * 30_000], offset=i)
    # when the operator opens the task
    html = operator.get(f"/tasks/{task.id}/").content.decode()
    # then each batch was read cut to 16,000 characters and the attempt's output to 64,000
    output = html[html.index('<pre class="task-output">') : html.index("</pre>")]
    assert output.count("0" * 16_000) == 1
    assert "0" * 16_001 not in output
    assert len(output) < 64_100
    assert "The output is cut here" in html


@pytest.mark.parametrize("task_id", ["task_" + "0" * 32, "task_" + "0" * 40, "x" * 300])
def test_an_unknown_task_is_404(operator: Client, task_id: str) -> None:
    assert operator.get(f"/tasks/{task_id}/").status_code == 404


def test_a_task_is_reachable_from_the_tasks_tab_the_timeline_and_the_agents_panel(
    operator: Client,
) -> None:
    cid = running("l-1", agent("worker", "GO"))
    publish(cid, "GO")
    task = claim("box-1")
    tasks_tab = operator.get(f"/clusters/{cid}/tasks/").content.decode()
    timeline = operator.get(f"/clusters/{cid}/").content.decode()
    assert f'href="/tasks/{task.id}/"' in tasks_tab
    # the TASK_STARTED row of the timeline links to its task, as the agents panel does
    assert timeline.count(f'href="/tasks/{task.id}/"') == 2


@pytest.mark.parametrize("path", ["/fleet/", "/tasks/task_" + "0" * 32 + "/"])
def test_the_pages_send_anonymous_visitors_to_sign_in(path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


# --- the waterfall, from plain records ---------------------------------------------------------


def record(**kw: Any) -> TaskRecord:
    base: dict[str, Any] = {
        "id": "task_1",
        "cluster_id": "c",
        "agent_id": "worker",
        "role": "",
        "iteration": 1,
        "state": "claimed",
        "trigger_message_id": "m",
        "trigger_topic": "GO",
        "trigger_sequence": 1,
        "build_id": None,
        "attempts": 1,
        "lease_id": "l",
        "lease_expires_at": 9_000,
        "worker": "box",
        "created_at": 1_000,
        "available_at": 1_000,
        "claimed_at": 2_000,
        "finished_at": None,
        "result": None,
        "error": "",
        "usage": None,
    }
    return TaskRecord(**{**base, **kw})


def started(sequence: int, at: int, worker: str) -> MessageRecord:
    return MessageRecord(
        id=f"m{sequence}",
        cluster_id="c",
        sequence=sequence,
        timestamp=at,
        topic="AGENT_LIFECYCLE",
        sender="worker",
        content={"data": {"event": "TASK_STARTED", "taskId": "task_1", "worker": worker}},
    )


def test_a_running_task_runs_until_now_and_its_bars_fit_the_axis() -> None:
    # given a task queued at 1 s, claimed at 2 s, still running at 5 s
    shown = waterfall(
        task=record(),
        messages=[started(2, 2_000, "box")],
        output=[],
        builds=[],
        completion_ids=[],
        build_url="/b/{id}/",
        now=5_000,
    )
    # then it waited 1 s, has run 3 s so far, and the axis spans the 4 s
    queued, claimed, run, still = shown.steps
    assert (queued.kind, queued.duration) == ("queued", 1_000)
    assert claimed.detail == "by box"
    assert (run.kind, run.duration, run.open) == ("running", 3_000, True)
    assert still.label == "Still running"
    assert shown.span == 4_000
    assert (queued.left, queued.width) == (0.0, 25.0)
    assert (run.left, run.width) == (25.0, 75.0)
    # a moment at the very end is drawn inside the axis
    assert still.left + still.width <= 100.0


def stalled(cluster_id: str) -> str:
    """A running cluster whose agents have sat idle for an hour with nothing open."""
    return cluster_create(
        cluster_id=cluster_id,
        config={"agents": [agent("worker", "GO")]},
        state="running",
        created_at=now_ms() - 3_600_000,
    ).id


def test_the_fleet_page_shows_a_stalled_cluster_as_stalled_with_its_reason(
    operator: Client, django_assert_num_queries: Any
) -> None:
    # given a cluster that can no longer move and one with work queued
    stalled("s-0")
    moving = running("m-0", agent("worker", "GO"))
    publish(moving, "GO")
    # when the operator opens the fleet page
    html = operator.get("/fleet/").content.decode()
    # then the stalled one says so, and why, as the clusters list does (runs.selectors)
    row = re.search(r"<tr>\s*<th[^>]*><a[^>]*>s-0</a>.*?</tr>", html, re.S)
    assert row is not None
    assert 'class="state state-stalled"' in row.group(0)
    assert "sat idle for 60 min with nothing queued" in row.group(0)
    other = re.search(r"<tr>\s*<th[^>]*><a[^>]*>m-0</a>.*?</tr>", html, re.S)
    assert other is not None
    assert 'class="state state-running"' in other.group(0)
    assert "state-reason" not in other.group(0)
    # and the conditions cost one query (the quiet clusters' open tasks), whatever their number
    # (this fleet has no runner yet: no query for what runners hold)
    with django_assert_num_queries(9):
        operator.get("/fleet/")
    for n in range(1, 6):
        stalled(f"s-{n}")
    with django_assert_num_queries(9):
        operator.get("/fleet/")
