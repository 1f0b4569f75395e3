"""Operator pages of the context engine: the inspector, the build diff and the metrics charts.

Function views (STYLE.md rule 7): parse the query string, call one service or selector per
need, shape the result with the pure helpers of ``dashboard.presentation`` / ``dashboard.charts``,
and render the page, or only its region when htmx asks.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from context import selectors
from context.budget import estimate_tokens
from context.services import (
    BuildOutcome,
    agent_trigger_topics,
    context_build,
    included_pack_texts,
)
from context.strategy import agent_max_tokens
from dashboard.charts import STATUS_FRAME, TOKENS_FRAME, cluster_charts, cluster_summary
from dashboard.forms import DiffForm, WhatIfForm
from dashboard.http import HtmxHttpRequest, render_page_or_region
from dashboard.presentation import (
    bar_geometry,
    decision_rows,
    pack_diff,
    prompt_diff,
    time_text,
)
from dashboard.presentation.numbers import packs_on_the_total_scale
from ledger import interfaces as ledger
from ledger.interfaces import ClusterRecord, ServiceError

AS_OF_CHOICES = 200
RECENT_BUILDS = 30
METRICS_BUILDS = 500


def _cluster_or_404(cluster_id: str) -> ClusterRecord:
    try:
        return ledger.cluster_get(cluster_id=cluster_id)
    except ServiceError as exc:
        raise Http404(exc.message) from exc


def _agent_or_404(cluster: ClusterRecord, agent_id: str) -> dict[str, Any]:
    for agent in cluster.agents:
        if agent.get("id") == agent_id:
            return agent
    raise Http404(f"cluster {cluster.id!r} has no agent {agent_id!r}")


def explain_build(outcome: BuildOutcome) -> dict[str, Any]:
    """The inspector's view of one build: decision rows, the bar, the prompt block by block."""
    sizes = {
        pack.id: (
            estimate_tokens(pack.full),
            estimate_tokens(pack.compact) if pack.compact else None,
        )
        for pack in outcome.packs
    }
    trigger = outcome.trigger
    # The engine's own walk explains a build just made (no replay).
    rows = decision_rows(
        outcome.result.decisions,
        max_tokens=outcome.max_tokens,
        sizes=sizes,
        max_chars=settings.CONTEXT_MAX_CHARS,
        visits=outcome.result.visits,
        trigger_sources=outcome.trigger_sources,
        trigger_label=f"{trigger.topic} #{trigger.sequence}" if trigger.sequence else trigger.topic,
        total_tokens=outcome.metrics["total"]["estimatedTokens"],
    )
    by_id = {row.id: row for row in rows}
    total = outcome.metrics["total"]["estimatedTokens"]
    return {
        "rows": rows,
        "bar": bar_geometry(rows, max_tokens=outcome.max_tokens, total_tokens=total),
        "blocks": [(by_id[pack_id], text) for pack_id, text in included_pack_texts(outcome.result)],
        "budget": outcome.metrics["budget"],
        "total": outcome.metrics["total"],
        "truncation": outcome.metrics["truncation"]["maxContextChars"],
        "trigger": outcome.trigger,
        "trigger_fallback": outcome.trigger_fallback,
        "iteration": outcome.iteration,
    }


@require_GET
@login_required
@vary_on_headers("HX-Request")
def inspector_page(request: HtmxHttpRequest, cluster_id: str, agent_id: str) -> HttpResponse:
    """A preview build of one agent: the bar, the decisions, the prompt; the what-if in the URL."""
    cluster = _cluster_or_404(cluster_id)
    agent = _agent_or_404(cluster, agent_id)
    values, errors = WhatIfForm(request.GET).values()
    max_tokens, as_of, trigger = values["max_tokens"], values["as_of"], values["trigger"]
    for name, sequence in (("as_of", as_of), ("trigger", trigger)):
        if sequence is not None and sequence > cluster.last_sequence:
            errors[name] = (
                f"This cluster has no message #{sequence:,}: its sequences run from 1 to "
                f"{cluster.last_sequence:,}."
            )
    if "as_of" in errors:
        as_of = None
    trigger_id = None
    if trigger is not None and "trigger" not in errors:
        try:
            trigger_id = ledger.message_at_sequence(cluster_id=cluster.id, sequence=trigger).id
        except ServiceError as exc:
            errors["trigger"] = exc.message
    if "trigger" in errors:
        trigger = None
    explained: dict[str, Any] | None = None
    build_error = ""
    try:
        outcome = context_build(
            cluster_id=cluster.id,
            agent_id=agent_id,
            max_tokens=max_tokens,
            as_of_sequence=as_of,
            triggering_message_id=trigger_id,
            preview=True,
        )
    except ServiceError as exc:
        build_error = exc.message
    else:
        explained = explain_build(outcome)
    default_budget = agent_max_tokens(agent)
    shown_budget = max_tokens or default_budget or 0
    context: dict[str, Any] = {
        "cluster": cluster,
        "agent": agent,
        "agent_id": agent_id,
        "errors": errors,
        "build_error": build_error,
        "x": explained,
        "max_tokens": max_tokens,
        "as_of": as_of,
        "trigger": trigger,
        "trigger_topics": agent_trigger_topics(agent),
        "raw_max_tokens": request.GET.get("max_tokens", ""),
        "default_budget": default_budget,
        "shown_budget": shown_budget,
        "slider_max": max(2 * (default_budget or 0), shown_budget, 1000),
        "what_if": max_tokens is not None or as_of is not None or trigger is not None,
    }
    return render_page_or_region(
        request,
        "dashboard/inspector.html",
        region="inspector-region",
        context=context,
        # The side panel is outside the region: an htmx re-render does not need it.
        page_context=lambda: {
            "messages": ledger.message_query(
                cluster_id=cluster.id, order="desc", limit=AS_OF_CHOICES
            ),
            "builds": selectors.build_list(
                cluster_id=cluster.id, agent_id=agent_id, limit=RECENT_BUILDS
            ),
        },
    )


def _build_or_error(
    cluster_id: str, agent_id: str, build_id: int | None, name: str, errors: dict[str, str]
) -> selectors.BuildRecord | None:
    if build_id is None:
        return None
    build = selectors.build_get(cluster_id=cluster_id, build_id=build_id)
    if build is None or build.agent_id != agent_id:
        errors[name] = f"Build {build_id:,} is not a recorded build of {agent_id} in this cluster."
        return None
    return build


def _recorded_view(build: selectors.BuildRecord) -> dict[str, Any]:
    rows = decision_rows(
        build.decisions, max_tokens=build.max_tokens, total_tokens=build.final_tokens
    )
    return {
        "build": build,
        "bar": bar_geometry(rows, max_tokens=build.max_tokens, total_tokens=build.final_tokens),
        "when": time_text(build.started_at),
    }


@require_GET
@login_required
@vary_on_headers("HX-Request")
def build_diff_page(request: HtmxHttpRequest, cluster_id: str, agent_id: str) -> HttpResponse:
    """Two recorded builds of one agent side by side: packs added / dropped / changed, then text."""
    cluster = _cluster_or_404(cluster_id)
    agent = _agent_or_404(cluster, agent_id)
    values, errors = DiffForm(request.GET).values()
    a = _build_or_error(cluster.id, agent_id, values["a"], "a", errors)
    b = _build_or_error(cluster.id, agent_id, values["b"], "b", errors)
    context: dict[str, Any] = {
        "cluster": cluster,
        "agent": agent,
        "agent_id": agent_id,
        "errors": errors,
        "a": _recorded_view(a) if a else None,
        "b": _recorded_view(b) if b else None,
        "selected_a": a.id if a else None,
        "selected_b": b.id if b else None,
    }
    if a is not None and b is not None:
        # Each pack's tokens as the builds' rows show them: what it adds to its build's total.
        changes = pack_diff(
            packs_on_the_total_scale(
                a.metrics.get("packs") or [], max_tokens=a.max_tokens, total_tokens=a.final_tokens
            ),
            dict(a.pack_texts or []),
            packs_on_the_total_scale(
                b.metrics.get("packs") or [], max_tokens=b.max_tokens, total_tokens=b.final_tokens
            ),
            dict(b.pack_texts or []),
        )
        context["changes"] = changes
        context["counts"] = {
            kind: sum(1 for c in changes if c.kind == kind)
            for kind in ("added", "dropped", "changed", "unchanged")
        }
        context["lines"] = prompt_diff(
            a.prompt,
            b.prompt,
            a_name=f"build {a.id} (iteration {a.iteration})",
            b_name=f"build {b.id} (iteration {b.iteration})",
        )
    return render_page_or_region(
        request,
        "dashboard/build_diff.html",
        region="diff-region",
        context=context,
        page_context=lambda: {
            "builds": selectors.build_list(
                cluster_id=cluster.id, agent_id=agent_id, limit=RECENT_BUILDS
            )
        },
    )


@require_GET
@login_required
def metrics_page(request: HtmxHttpRequest, cluster_id: str) -> HttpResponse:
    """The cluster's recorded builds summed up, then small multiples per agent."""
    cluster = _cluster_or_404(cluster_id)
    builds = selectors.build_list(cluster_id=cluster.id, limit=METRICS_BUILDS)
    roles = {str(a.get("id")): str(a.get("role") or "") for a in cluster.agents}
    charts = cluster_charts(builds, roles=roles)
    charted = {chart.agent_id for chart in charts}
    return render(
        request,
        "dashboard/metrics.html",
        {
            "cluster": cluster,
            "charts": charts,
            "summary": cluster_summary(charts),
            "tokens_frame": TOKENS_FRAME,
            "status_frame": STATUS_FRAME,
            "build_count": len(builds),
            "capped": len(builds) == METRICS_BUILDS,
            "idle_agents": [a for a in cluster.agents if a.get("id") not in charted],
        },
    )
