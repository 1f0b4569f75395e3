"""The fleet page (every running cluster, the queue, the runners, tokens and cost) and the task
page (one task as a waterfall).

The fleet page is one region that polls itself, as the agents panel and the Tasks tab do: what
it shows comes from tasks and runner rows, which no message push carries
(docs/decisions/0140-fleet-page.md).
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from context import selectors as builds
from dashboard.http import HtmxHttpRequest, render_page_or_region
from dashboard.presentation.fleet import cluster_rows, day_totals, runner_rows, usage_rows
from dashboard.presentation.waterfall import waterfall
from ledger import interfaces as ledger
from ledger.interfaces import ClusterState, NotFound, text_problem
from runs import fleet
from runs.models import OPEN_STATES
from runs.selectors import cluster_conditions, runners_seen

# The fleet page looks again this often (ms): a fleet moves slower than one cluster's agents.
FLEET_REFRESH_MS = 5000
# Running clusters listed at most, newest first; the page says how many more there are.
FLEET_CLUSTERS = 100
# Runners listed at most, most recently seen first.
FLEET_RUNNERS = 100
ACTIVE_STATES = (ClusterState.RUNNING, ClusterState.STOPPING)
# A task id is "task_" and 32 hex digits; the address takes no more than the column holds.
TASK_ID_MAX = 40


@require_GET
@login_required
@vary_on_headers("HX-Request")
def fleet_page(request: HtmxHttpRequest) -> HttpResponse:
    """Every running cluster at a glance, the task queue by pool and agent, the runners, and
    the tokens and cost reported per day: one region that refreshes itself."""
    now = ledger.now_ms()
    glance, running_total = ledger.cluster_glance(states=ACTIVE_STATES, limit=FLEET_CLUSTERS)
    agents = fleet.agents_at_a_glance(
        agents_by_cluster={
            g.cluster.id: [str(a.get("id", "")) for a in g.cluster.agents] for g in glance
        }
    )
    usage = fleet.usage_by_day(now=now)
    context = {
        "clusters": cluster_rows(
            glance, agents, cluster_conditions([g.cluster for g in glance], now=now), now=now
        ),
        "running_total": running_total,
        "queue": fleet.task_queue(),
        "runners": runner_rows(runners_seen(limit=FLEET_RUNNERS)),
        "usage": usage_rows(usage.rows),
        "usage_left_out": usage.left_out,
        "day_totals": day_totals(usage.totals()),
        "now_ms": now,
        "usage_days": fleet.USAGE_DAYS,
        "refresh_ms": FLEET_REFRESH_MS,
        "refresh_seconds": FLEET_REFRESH_MS // 1000,
    }
    return render_page_or_region(
        request, "dashboard/fleet.html", region="fleet-region", context=context, page_context=dict
    )


@require_GET
@login_required
@vary_on_headers("HX-Request")
def task_page(request: HtmxHttpRequest, task_id: str) -> HttpResponse:
    """One task as a waterfall: queued, claimed (by which runner, under which lease), prompt
    built, agent running with its output, its end, its hook and what it published."""
    if len(task_id) > TASK_ID_MAX or text_problem(task_id) is not None:
        raise Http404("no such task")
    trace = fleet.task_trace_get(task_id=task_id)
    if trace is None:
        raise Http404("no such task")
    task = trace.task
    try:
        cluster = ledger.cluster_get(cluster_id=task.cluster_id)
    except NotFound:
        raise Http404("no such cluster") from None
    now = ledger.now_ms()
    found = ledger.task_messages(
        cluster_id=task.cluster_id,
        agent_id=task.agent_id,
        task_id=task.id,
        since=task.created_at,
        until=task.finished_at,
        message_ids=trace.completion_ids,
    )
    # The builds of its attempts: the agent's newest builds up to the task's own, one per claim.
    attempt_builds = (
        builds.build_list(
            cluster_id=task.cluster_id,
            agent_id=task.agent_id,
            before_id=task.build_id + 1,
            limit=max(1, task.attempts),
        )
        if task.build_id is not None
        else []
    )
    build_url = reverse("dashboard:build", kwargs={"cluster_id": cluster.id, "build_id": 0})
    shown = waterfall(
        task=task,
        messages=found.messages,
        output=found.output,
        builds=attempt_builds,
        completion_ids=trace.completion_ids,
        build_url=build_url.removesuffix("0/") + "{id}/",
        now=now,
    )
    live = task.state in OPEN_STATES
    return render_page_or_region(
        request,
        "dashboard/task.html",
        region="task-region",
        context={
            "cluster": cluster,
            "task": task,
            "w": shown,
            "more_output": found.more_output,
            "live": live,
            "refresh_ms": FLEET_REFRESH_MS // 2,
            "now_ms": now,
        },
        page_context=dict,
    )
