"""Operator pages of running clusters: agents at work, tasks, recorded builds, start and stop.

The agents panel is a region of the cluster page that refreshes itself while the cluster runs,
so each agent's state (idle, queued, running, failed) follows its tasks without a reload.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from context import selectors as builds
from context.services.templates import template_list
from dashboard.activity import AGENTS_REFRESH_MS, agents_context
from dashboard.forms import GuidanceForm, IssueForm, LaunchForm, TaskListForm
from dashboard.http import HtmxHttpRequest, render_page_or_region, wants_region
from dashboard.presentation import bar_geometry, decision_rows, time_text
from dashboard.templatetags.dashboard_ui import inspector_url
from dashboard.views.clusters import topology_context
from ledger import interfaces as ledger
from ledger.interfaces import ClusterRecord, ClusterState, NotFound, ServiceError
from runs import selectors as tasks
from runs import services as runs
from runs.models import OPEN_STATES, TaskState
from runs.services import GUIDANCE_TEXT_MAX

TASK_PAGE = 50


def _cluster_or_404(cluster_id: str) -> ClusterRecord:
    try:
        return ledger.cluster_get(cluster_id=cluster_id)
    except NotFound:
        raise Http404("no such cluster") from None


@require_GET
@login_required
def agents_panel(request: HtmxHttpRequest, cluster_id: str) -> HttpResponse:
    """The agents panel alone, with the cluster's state and controls out of band.

    A region, not a page: opened directly (a bookmark, a new tab) it leads to the cluster page.
    """
    if not wants_region(request):
        return HttpResponseRedirect(reverse("dashboard:cluster", kwargs={"cluster_id": cluster_id}))
    cluster = _cluster_or_404(cluster_id)
    context = {**agents_context(cluster), "oob": True}
    if request.GET.get("v", "") != str(cluster.config_version):
        # A CLUSTER_OPERATIONS chain changed the config since the page was drawn: the
        # topology and the version picker come along (SPEC §7.7).
        versions = ledger.cluster_config_versions(cluster_id=cluster.id)
        context |= topology_context(cluster, None, versions)
    return render(request, "dashboard/_agents_panel.html", context)


@require_POST
@login_required
def cluster_start(request: HtmxHttpRequest, cluster_id: str) -> HttpResponse:
    """Start a cluster that has not run yet with the operator's issue."""
    cluster = _cluster_or_404(cluster_id)
    form = IssueForm(request.POST)
    error = ""
    if form.is_valid():
        try:
            runs.cluster_start(cluster_id=cluster.id, issue=form.cleaned_data)
        except ServiceError as exc:
            error = exc.message
    else:
        error = " ".join(str(e) for errs in form.errors.values() for e in errs)
    return _back_to_cluster(cluster.id, error)


@require_POST
@login_required
def cluster_stop(request: HtmxHttpRequest, cluster_id: str) -> HttpResponse:
    """Stop a running cluster: its open tasks are cancelled and nothing triggers any more."""
    cluster = _cluster_or_404(cluster_id)
    error = ""
    try:
        runs.cluster_stop(cluster_id=cluster.id, reason=f"stopped by {request.user}")
    except ServiceError as exc:
        error = exc.message
    return _back_to_cluster(cluster.id, error)


@require_POST
@login_required
def cluster_guidance(request: HtmxHttpRequest, cluster_id: str) -> HttpResponse:
    """Send guidance to one agent of a running cluster or to all (SPEC §7.8).

    From htmx, the box comes back in place: emptied with what was sent, or with the text kept
    and the error under it. Without JavaScript, back to the cluster page.
    """
    cluster = _cluster_or_404(cluster_id)
    form = GuidanceForm(request.POST)
    guidance: dict[str, object] = {
        "text": request.POST.get("text", "")[:GUIDANCE_TEXT_MAX],
        "agent": request.POST.get("agent", ""),
    }
    if form.is_valid():
        agent = form.cleaned_data["agent"] or None
        try:
            message = runs.guidance_send(
                cluster_id=cluster.id,
                text=form.cleaned_data["text"],
                agent=agent,
                source="dashboard",
                by=request.user.get_username(),
            )
        except ServiceError as exc:
            guidance["error"] = exc.message
        else:
            guidance = {"agent": agent or "", "message": message}
    else:
        guidance["error"] = " ".join(str(e) for errs in form.errors.values() for e in errs)
    if not wants_region(request):
        return _back_to_cluster(cluster.id, str(guidance.get("error", "")))
    return render(
        request,
        "dashboard/_guidance_form.html",
        {"cluster": cluster, "guidance": guidance},
    )


def _back_to_cluster(cluster_id: str, error: str) -> HttpResponse:
    url = reverse("dashboard:cluster", kwargs={"cluster_id": cluster_id})
    if error:
        url += "?" + urlencode({"run_error": error[:300]})
    return HttpResponseRedirect(url)


@require_http_methods(["GET", "POST"])
@login_required
def cluster_launch(request: HtmxHttpRequest) -> HttpResponse:
    """Create a cluster from a template and start it with an issue; then watch it run.

    A GET (the address a form error leaves in the bar, reloaded) goes to the clusters page,
    where the launch form is.
    """
    if request.method != "POST":
        return HttpResponseRedirect(reverse("dashboard:clusters") + "#launch-form")
    names = [t.name for t in template_list()]
    form = LaunchForm(request.POST, templates=names)
    if form.is_valid():
        issue = {"title": form.cleaned_data["title"], "text": form.cleaned_data["text"]}
        try:
            cluster = runs.cluster_launch(
                template_name=form.cleaned_data["template"],
                issue=issue,
                labels=form.cleaned_data["labels"],
            )
        except ServiceError as exc:
            form.add_error(None, exc.message)
        else:
            return HttpResponseRedirect(
                reverse("dashboard:cluster", kwargs={"cluster_id": cluster.id})
            )
    return render(request, "dashboard/launch.html", {"form": form}, status=422)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def tasks_page(request: HtmxHttpRequest, cluster_id: str) -> HttpResponse:
    """A cluster's tasks, newest first: who ran, when, how long, how often, with which build.

    The table is a region that refreshes itself while the cluster runs or a task it shows is
    open, and brings the cluster's state with it, as the agents panel does.
    """
    cluster = _cluster_or_404(cluster_id)
    values, errors = TaskListForm(request.GET).values()
    page = tasks.task_list(
        cluster_id=cluster.id,
        agent_id=values["agent"] or None,
        state=values["state"] or None,
        before=values["before"] or None,
        limit=TASK_PAGE,
    )
    estimates = builds.build_tokens(
        cluster_id=cluster.id, build_ids=[t.build_id for t in page if t.build_id is not None]
    )
    rows = [
        {
            "task": task,
            "estimate": estimates.get(task.build_id) if task.build_id is not None else None,
            "wait_ms": (task.claimed_at - task.created_at) if task.claimed_at else None,
            "run_ms": (task.finished_at - task.claimed_at)
            if task.finished_at and task.claimed_at
            else None,
        }
        for task in page
    ]
    # Triggers waiting for a busy agent are what queued tasks behind a running one were.
    waiting = (
        tasks.triggers_waiting(cluster_id=cluster.id, agent_id=values["agent"] or None)
        if values["state"] in ("", TaskState.QUEUED) and not values["before"]
        else []
    )
    query = {k: v for k, v in (("agent", values["agent"]), ("state", values["state"])) if v}
    older = None
    if len(page) == TASK_PAGE:
        older = "?" + urlencode({**query, "before": page[-1].id})
    live = cluster.state in (ClusterState.RUNNING, ClusterState.STOPPING) or any(
        task.state in OPEN_STATES for task in page
    )
    return render_page_or_region(
        request,
        "dashboard/tasks.html",
        region="tasks-region",
        context={
            "cluster": cluster,
            "condition": tasks.cluster_conditions([cluster])[cluster.id],
            "rows": rows,
            "waiting": waiting,
            "filters": values,
            "older": older,
            "live": live,
            "refresh_ms": AGENTS_REFRESH_MS,
            "region_url": request.get_full_path(),
            "oob": wants_region(request),
        },
        page_context=lambda: {
            "errors": errors,
            "agent_ids": [str(a.get("id")) for a in cluster.agents],
            "states": TaskState.values,
        },
    )


@require_GET
@login_required
def build_page(request: HtmxHttpRequest, cluster_id: str, build_id: int) -> HttpResponse:
    """One recorded build as its agent received it, and what the model billed for it."""
    cluster = _cluster_or_404(cluster_id)
    build = builds.build_get(cluster_id=cluster.id, build_id=build_id)
    if build is None:
        raise Http404("no such build")
    rows = decision_rows(
        build.decisions, max_tokens=build.max_tokens, total_tokens=build.final_tokens
    )
    by_id = {row.id: row for row in rows}
    total = build.metrics.get("total") or {"chars": len(build.prompt), "estimatedTokens": 0}
    reported = build.reported_input_tokens
    return render(
        request,
        "dashboard/build.html",
        {
            "cluster": cluster,
            "build": build,
            "agent_id": build.agent_id,
            "when": time_text(build.started_at),
            "x": {
                "rows": rows,
                "bar": bar_geometry(
                    rows, max_tokens=build.max_tokens, total_tokens=build.final_tokens
                ),
                "blocks": [
                    (by_id[pack_id], text)
                    for pack_id, text in build.pack_texts or []
                    if pack_id in by_id
                ],
                "total": total,
            },
            "reported": reported,
            "ratio": (reported / build.final_tokens) if reported and build.final_tokens else None,
            "usage": build.reported_usage,
            "inspector": inspector_url(cluster.id, build.agent_id),
        },
    )
