"""Operator pages for clusters (server-rendered, HTMX partials)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from ledger import selectors
from ledger.models import ClusterState


@require_GET
@login_required
@vary_on_headers("HX-Request")
def cluster_list_page(request: HttpRequest) -> HttpResponse:
    """Every cluster with its state and activity; search by id, filter by state."""
    search = request.GET.get("q", "").strip()
    state = request.GET.get("state", "")
    if state not in ClusterState.values:
        state = ""
    clusters = selectors.cluster_list(search=search, state=state)
    template = "ledger/cluster_list.html"
    if getattr(request, "htmx", False):
        template += "#cluster-rows"
    return render(
        request,
        template,
        {"clusters": clusters, "search": search, "state": state, "states": ClusterState.values},
    )
