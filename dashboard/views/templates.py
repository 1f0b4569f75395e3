"""The admin's template preview: each agent of a template being edited, built against a cluster.

The template editor (``context.admin``, ``static/js/admin-template.js``) loads the panel here and
posts the body as it stands, unsaved; every agent gets a preview build (never recorded) with
the same bar and reasons as the inspector.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from context.services import context_build
from context.services.templates import template_check, template_preview_agents
from dashboard.http import HtmxHttpRequest
from dashboard.templatetags.dashboard_ui import inspector_url
from dashboard.views.builds import explain_build
from ledger import interfaces as ledger
from ledger.interfaces import ServiceError

PAGE = "dashboard/template_preview.html"
CLUSTER_CHOICES = 50
MAX_BODY_CHARS = 1_000_000
SHOWN_PROBLEMS = 10


class TemplatePreviewForm(forms.Form):
    body = forms.CharField(max_length=MAX_BODY_CHARS, strip=False)
    cluster = forms.CharField(max_length=128)


def _agent_preview(cluster_id: str, agent: dict[str, Any], known: set[str]) -> dict[str, Any]:
    agent_id = str(agent.get("id") or "")
    shown: dict[str, Any] = {"id": agent_id, "role": str(agent.get("role") or "")}
    try:
        outcome = context_build(cluster_id=cluster_id, agent_id=agent_id, agent=agent, preview=True)
    except ServiceError as exc:
        return {**shown, "error": exc.message}
    return {
        **shown,
        "x": explain_build(outcome),
        # The saved config of the cluster, when it has this agent: the inspector shows that one.
        "inspector": inspector_url(cluster_id, agent_id) if agent_id in known else "",
    }


@require_http_methods(["GET", "POST"])
@staff_member_required
def template_preview(request: HtmxHttpRequest) -> HttpResponse:
    """GET: the panel with the clusters to try on. POST: the preview of every agent."""
    if request.method == "GET":
        clusters = ledger.cluster_list(limit=CLUSTER_CHOICES)
        return render(request, f"{PAGE}#panel", {"clusters": clusters})
    form = TemplatePreviewForm(request.POST)
    context: dict[str, Any] = {"problems": [], "agents": []}
    if not form.is_valid():
        context["problems"] = [str(e) for errors in form.errors.values() for e in errors]
        return render(request, f"{PAGE}#results", context)
    try:
        body = json.loads(form.cleaned_data["body"])
    except ValueError as exc:
        context["problems"] = [f"The template is not valid JSON: {exc}."]
        return render(request, f"{PAGE}#results", context)
    check = template_check(body)
    if check.errors:
        context["problems"] = [str(p.get("message", "")) for p in check.errors[:SHOWN_PROBLEMS]]
        context["more_problems"] = max(0, len(check.errors) - SHOWN_PROBLEMS)
        return render(request, f"{PAGE}#results", context)
    try:
        cluster = ledger.cluster_get(cluster_id=form.cleaned_data["cluster"])
        agents = template_preview_agents(body=body, params=cluster.params)
    except ServiceError as exc:
        context["problems"] = [exc.message]
        return render(request, f"{PAGE}#results", context)
    known = {str(a.get("id")) for a in cluster.agents}
    context.update(
        cluster=cluster,
        agents=[_agent_preview(cluster.id, agent, known) for agent in agents],
    )
    return render(request, f"{PAGE}#results", context)
