"""Operator pages for clusters (server-rendered, HTMX partials).

Each page is one template whose ``{% partialdef %}`` regions are rendered alone for htmx
requests (``page.html#region``); a history-restore request gets the whole page again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from context.selectors import BuildRecord, build_latest_by_agent
from dashboard.templatetags.dashboard_ui import TOPIC_TONES
from dashboard.topology import NODE_H, NODE_W, published_topics, topology, trigger_topics
from ledger import interfaces as ledger
from ledger.interfaces import ClusterState, MessageFilter, NotFound

SNAPSHOT_TOPIC = "STATE_SNAPSHOT"


def _partial(request: HttpRequest, page: str, region: str) -> str:
    """``page#region`` for an htmx swap, the whole page otherwise (history restores included)."""
    htmx = getattr(request, "htmx", None)
    if htmx and not htmx.history_restore_request:
        return f"{page}#{region}"
    return page


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
def cluster_list_page(request: HttpRequest) -> HttpResponse:
    """Every cluster with its state, activity and last builds; search by id, filter by state."""
    search = request.GET.get("q", "").strip()
    state = request.GET.get("state", "")
    if state not in ClusterState.values:
        state = ""
    clusters = ledger.cluster_list(search=search, state=state)
    latest = build_latest_by_agent(cluster_ids=[c.id for c in clusters])
    by_cluster: dict[str, list[BuildRecord]] = {}
    for (cluster_id, _), build in sorted(latest.items()):
        by_cluster.setdefault(cluster_id, []).append(build)
    rows = [(c, _usage(by_cluster.get(c.id, []))) for c in clusters]
    return render(
        request,
        _partial(request, "dashboard/cluster_list.html", "cluster-rows"),
        {"rows": rows, "search": search, "state": state, "states": ClusterState.values},
    )


def _ms(value: str) -> int | None:
    """A time filter: epoch milliseconds, or an ISO 8601 date-time (UTC unless it says)."""
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(value) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _cursor(value: str) -> int | None:
    return int(value) if value.strip().isdigit() else None


def inspector_url(cluster_id: str, agent_id: str) -> str:
    """The context inspector of one agent (``context:inspector``, or its path until it exists)."""
    try:
        return reverse(
            "dashboard:inspector", kwargs={"cluster_id": cluster_id, "agent_id": agent_id}
        )
    except NoReverseMatch:
        return f"/clusters/{quote(cluster_id, safe='')}/agents/{quote(agent_id, safe='')}/"


def metrics_url(cluster_id: str) -> str | None:
    """The cluster's metrics page (``context:metrics``), when that app provides one."""
    try:
        return reverse("dashboard:metrics", kwargs={"cluster_id": cluster_id})
    except NoReverseMatch:
        return None


def _timeline_filters(request: HttpRequest) -> tuple[dict[str, Any], list[str]]:
    errors: list[str] = []
    times: dict[str, int | None] = {}
    for name in ("since", "until"):
        try:
            times[name] = _ms(request.GET.get(name, ""))
        except ValueError:
            times[name] = None
            errors.append(f"“{name}” is not a date and time; it was ignored.")
    return {
        "topic": request.GET.get("topic", "").strip(),
        "sender": request.GET.get("sender", "").strip(),
        "since": times["since"],
        "until": times["until"],
    }, errors


@require_GET
@login_required
@vary_on_headers("HX-Request")
def cluster_page(request: HttpRequest, cluster_id: str) -> HttpResponse:
    """One cluster: the live timeline with filters, its snapshot, agents and topology."""
    try:
        cluster = ledger.cluster_get(cluster_id=cluster_id)
    except NotFound:
        raise Http404("no such cluster") from None
    filters, errors = _timeline_filters(request)
    before = _cursor(request.GET.get("before", ""))
    after = _cursor(request.GET.get("after", "")) if before is None else None
    messages, more = ledger.message_timeline(
        cluster_id=cluster.id,
        where=MessageFilter(
            topic=filters["topic"] or None,
            sender=filters["sender"] or None,
            since=filters["since"],
            until=filters["until"],
        ),
        before=before,
        after=after,
    )
    query = {k: v for k, v in filters.items() if v not in (None, "")}
    page_url = reverse("dashboard:cluster", kwargs={"cluster_id": cluster.id})
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
    live = before is None and after is None and filters["until"] is None
    live_url = None
    if live:
        live_url = f"/ws/clusters/{quote(cluster.id, safe='')}/timeline/"
        if query:
            live_url += "?" + urlencode(query)
    context: dict[str, Any] = {
        "cluster": cluster,
        "messages": messages,
        "filters": filters,
        "filtered": bool(query),
        "errors": errors,
        "older": older,
        "newer": newer,
        "live_url": live_url,
        "page_url": page_url,
        "paged": before is not None or after is not None,
        "newest_url": page_url + ("?" + urlencode(query) if query else ""),
    }
    template = _partial(request, "dashboard/cluster_detail.html", "timeline")
    if template.endswith("#timeline"):
        return render(request, template, context)
    latest = build_latest_by_agent(cluster_ids=[cluster.id])
    agents = []
    for agent in cluster.agents:
        agent_id = str(agent.get("id", ""))
        strategy = agent.get("contextStrategy")
        build = latest.get((cluster.id, agent_id))
        agents.append(
            {
                "id": agent_id,
                "role": agent.get("role", ""),
                "max_tokens": strategy.get("maxTokens") if isinstance(strategy, dict) else None,
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
    context.update(
        {
            "snapshot": ledger.message_latest(cluster_id=cluster.id, topics=[SNAPSHOT_TOPIC]),
            "agents": agents,
            "topology": topology(cluster.agents),
            "metrics_url": metrics_url(cluster.id),
            "tones": range(TOPIC_TONES),
            "node_w": NODE_W,
            "node_h": NODE_H,
            "topic_choices": topics,
            "sender_choices": senders,
        }
    )
    return render(request, template, context)


@require_GET
@login_required
def message_json(request: HttpRequest, cluster_id: str, sequence: int) -> HttpResponse:
    """One message in its wire shape (SPEC §1.1), for the operator's browser."""
    try:
        message = ledger.message_at_sequence(cluster_id=cluster_id, sequence=sequence)
    except NotFound:
        raise Http404("no such message") from None
    return JsonResponse(message.to_wire(), json_dumps_params={"indent": 2, "ensure_ascii": False})
