"""Operator pages for clusters: the list, one cluster's live timeline, a message as JSON.

Function views (STYLE.md rule 7): read the query string through a form, call the selectors, and
render the page, or only its region when htmx asks (``dashboard.http``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from context.selectors import BuildRecord, build_latest_by_agent
from context.strategy import agent_max_tokens
from dashboard.forms import ClusterListForm, TimelineForm
from dashboard.http import HtmxHttpRequest, render_page_or_region
from dashboard.templatetags.dashboard_ui import TOPIC_TONES, inspector_url
from dashboard.topology import NODE_H, NODE_W, published_topics, topology, trigger_topics
from ledger import interfaces as ledger
from ledger.interfaces import ClusterRecord, ClusterState, MessageRecord, NotFound
from snapshots.snapshotter import snapshot_latest


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of an agent's (or a cluster's) last builds against their budget."""

    tokens: int
    budget: int
    detail: str

    @property
    def over(self) -> bool:
        return self.tokens > self.budget


def _usage(builds: list[BuildRecord]) -> Usage | None:
    if not builds:
        return None
    detail = "; ".join(f"{b.agent_id}: {b.final_tokens:,} / {b.max_tokens:,}" for b in builds)
    return Usage(
        tokens=sum(b.final_tokens for b in builds),
        budget=sum(b.max_tokens for b in builds),
        detail=detail,
    )


@require_GET
@login_required
@vary_on_headers("HX-Request")
def cluster_list_page(request: HtmxHttpRequest) -> HttpResponse:
    """Every cluster with its state, activity and last builds; search by id, filter by state."""
    values, errors = ClusterListForm(request.GET).values()
    search, state = (values["q"] or "").strip(), values["state"] or ""
    clusters = ledger.cluster_list(search=search, state=state)
    latest = build_latest_by_agent(cluster_ids=[c.id for c in clusters])
    by_cluster: dict[str, list[BuildRecord]] = {}
    for (cluster_id, _), build in sorted(latest.items()):
        by_cluster.setdefault(cluster_id, []).append(build)
    context = {
        "rows": [(c, _usage(by_cluster.get(c.id, []))) for c in clusters],
        "search": search,
        "state": state,
        "states": ClusterState.values,
        "errors": errors,
    }
    return render_page_or_region(
        request,
        "dashboard/cluster_list.html",
        region="cluster-rows",
        context=context,
        page_context=dict,
    )


@dataclass(frozen=True, slots=True)
class _Paging:
    """Links to the pages next to the one shown, and whether it is the live (newest) page."""

    older: str | None
    newer: str | None
    live_url: str | None
    paged: bool


def _paging(
    *, cluster: ClusterRecord, messages: list[MessageRecord], more: bool, values: dict[str, Any]
) -> _Paging:
    query = {k: values[k] for k in ("topic", "sender", "since", "until") if values[k]}
    page_url = reverse("dashboard:cluster", kwargs={"cluster_id": cluster.id})
    before, after = values["before"], values["after"]
    older = newer = None
    if messages:
        # ``more`` points away from the cursor: older without one or with ``before``, newer with
        # ``after``; the other direction exists exactly when a cursor brought us here.
        has_older = more if after is None else True
        has_newer = before is not None if after is None else more
        if has_older:
            older = page_url + "?" + urlencode({**query, "before": messages[-1].sequence})
        if has_newer:
            newer = page_url + "?" + urlencode({**query, "after": messages[0].sequence})
    # Live rows only on the newest page, and only when the filters let new messages in.
    live_url = None
    if before is None and after is None and values["until"] is None:
        live_url = f"/ws/clusters/{quote(cluster.id, safe='')}/timeline/"
        if query:
            live_url += "?" + urlencode(query)
    return _Paging(older, newer, live_url, paged=before is not None or after is not None)


@require_GET
@login_required
@vary_on_headers("HX-Request")
def cluster_page(request: HtmxHttpRequest, cluster_id: str) -> HttpResponse:
    """One cluster: the live timeline with filters, its snapshot, agents and topology."""
    try:
        cluster = ledger.cluster_get(cluster_id=cluster_id)
    except NotFound:
        raise Http404("no such cluster") from None
    form = TimelineForm(request.GET)
    values, errors = form.values()
    if values["before"] is not None:
        values["after"] = None
    messages, more = ledger.message_timeline(
        cluster_id=cluster.id,
        where=form.message_filter(values),
        before=values["before"],
        after=values["after"],
    )
    paging = _paging(cluster=cluster, messages=messages, more=more, values=values)
    page_url = reverse("dashboard:cluster", kwargs={"cluster_id": cluster.id})
    query = {k: values[k] for k in ("topic", "sender", "since", "until") if values[k]}
    context: dict[str, Any] = {
        "cluster": cluster,
        "messages": messages,
        "filters": values,
        "filtered": bool(query),
        "errors": list(errors.values()),
        "older": paging.older,
        "newer": paging.newer,
        "live_url": paging.live_url,
        "page_url": page_url,
        "paged": paging.paged,
        "newest_url": page_url + ("?" + urlencode(query) if query else ""),
    }
    return render_page_or_region(
        request,
        "dashboard/cluster_detail.html",
        region="timeline",
        context=context,
        page_context=lambda: _cluster_panels(cluster, messages),
    )


def _cluster_panels(cluster: ClusterRecord, messages: list[MessageRecord]) -> dict[str, Any]:
    """What the page shows beside the timeline: snapshot, agents, topology, filter choices."""
    latest = build_latest_by_agent(cluster_ids=[cluster.id])
    agents = []
    for agent in cluster.agents:
        agent_id = str(agent.get("id", ""))
        build = latest.get((cluster.id, agent_id))
        agents.append(
            {
                "id": agent_id,
                "role": agent.get("role", ""),
                "max_tokens": agent_max_tokens(agent),
                "usage": _usage([build] if build else []),
                "inspector": inspector_url(cluster.id, agent_id),
            }
        )
    # Suggestions for the filter inputs, from the config and the page: no scan of the ledger.
    topics = sorted(
        {t for a in cluster.agents for t in trigger_topics(a) + published_topics(a)}
        | {m.topic for m in messages}
    )
    senders = sorted({a["id"] for a in agents if a["id"]} | {m.sender for m in messages})
    return {
        "snapshot": snapshot_latest(cluster_id=cluster.id),
        "agents": agents,
        "topology": topology(cluster.agents),
        "metrics_url": reverse("dashboard:metrics", kwargs={"cluster_id": cluster.id}),
        "tones": range(TOPIC_TONES),
        "node_w": NODE_W,
        "node_h": NODE_H,
        "topic_choices": topics,
        "sender_choices": senders,
    }


@require_GET
@login_required
def message_json(request: HtmxHttpRequest, cluster_id: str, sequence: int) -> HttpResponse:
    """One message in its wire shape (SPEC §1.1), for the operator's browser."""
    try:
        message = ledger.message_at_sequence(cluster_id=cluster_id, sequence=sequence)
    except NotFound:
        raise Http404("no such message") from None
    return JsonResponse(message.to_wire(), json_dumps_params={"indent": 2, "ensure_ascii": False})
