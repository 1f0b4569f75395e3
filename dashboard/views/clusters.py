"""Operator pages for clusters: the list, one cluster's live timeline, a message as JSON.

Function views (STYLE.md rule 7): read the query string through a form, call the selectors, and
render the page, or only its region when htmx asks (``dashboard.http``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from context.completion import agents_with_completion
from context.selectors import BuildRecord, build_latest_by_agent
from context.services.templates import template_list
from dashboard.activity import agents_context, completion_of, usage_of
from dashboard.forms import ClusterListForm, LaunchForm, TimelineForm
from dashboard.fragments import count_html, snapshot_html, timeline_rows_html
from dashboard.http import HtmxHttpRequest, render_page_or_region
from dashboard.links import reverse_kept
from dashboard.presentation.labels import TOPIC_TONES
from dashboard.presentation.timeline import rows_html
from dashboard.sizes import cluster_sizes
from dashboard.topology import (
    NODE_H,
    NODE_W,
    Topology,
    published_topics,
    topology,
    trigger_topics,
)
from ledger import interfaces as ledger
from ledger.interfaces import (
    ClusterRecord,
    ClusterState,
    MessageRecord,
    NotFound,
    SearchHit,
)
from runs.selectors import cluster_conditions
from snapshots.snapshotter import snapshot_latest

TIMELINE_PAGE = 100


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
    sizes = cluster_sizes(clusters=clusters)
    conditions = cluster_conditions(clusters)
    context = {
        "rows": [
            (c, usage_of(by_cluster.get(c.id, [])), sizes[c.id], conditions[c.id]) for c in clusters
        ],
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
        page_context=lambda: {
            "launch_form": LaunchForm(templates=[t.name for t in template_list()])
        },
    )


FILTER_FIELDS = ("q", "topic", "sender", "since", "until")


def _filter_query(values: dict[str, Any]) -> dict[str, Any]:
    """The filters of the page as they go into links (cursors excluded)."""
    return {k: values[k] for k in FILTER_FIELDS if values[k]}


@dataclass(frozen=True, slots=True)
class _Paging:
    """Links to the pages next to the one shown, and whether it is the live (newest) page."""

    older: str | None
    newer: str | None
    live_url: str | None
    paged: bool


def _paging(
    *, cluster: ClusterRecord, sequences: list[int], more: bool, values: dict[str, Any]
) -> _Paging:
    query = _filter_query(values)
    page_url = reverse_kept("dashboard:cluster", kwargs={"cluster_id": cluster.id})
    before, after = values["before"], values["after"]
    older = newer = None
    if sequences:
        # ``more`` points away from the cursor: older without one or with ``before``, newer with
        # ``after``; the other direction exists exactly when a cursor brought us here.
        has_older = more if after is None else True
        has_newer = before is not None if after is None else more
        if has_older:
            older = page_url + "?" + urlencode({**query, "before": sequences[-1]})
        if has_newer:
            newer = page_url + "?" + urlencode({**query, "after": sequences[0]})
    # Live rows only on the newest page, and only when the filters let new messages in. A search
    # keeps the socket for the header and the snapshot; its rows come from searching again.
    live_url = None
    if before is None and after is None and values["until"] is None:
        live_url = f"/ws/clusters/{quote(cluster.id, safe='')}/timeline/"
        if query:
            live_url += "?" + urlencode(query)
    return _Paging(older, newer, live_url, paged=before is not None or after is not None)


@dataclass(frozen=True, slots=True)
class _Timeline:
    """The rows of one timeline page: messages, or search hits with their snippets."""

    rows: list[tuple[MessageRecord, SearchHit | None]]
    more: bool


def _timeline(
    cluster: ClusterRecord, form: TimelineForm, values: dict[str, Any], *, limit: int
) -> _Timeline:
    where = form.message_filter(values)
    if values["q"]:
        hits, more = ledger.message_search(
            cluster_id=cluster.id,
            where=where,
            before=values["before"],
            after=values["after"],
            limit=limit,
        )
        return _Timeline([(hit.message, hit) for hit in hits], more)
    messages, more = ledger.message_timeline(
        cluster_id=cluster.id,
        where=where,
        before=values["before"],
        after=values["after"],
        limit=limit,
    )
    return _Timeline([(m, None) for m in messages], more)


def _timeline_context(
    cluster: ClusterRecord, values: dict[str, Any], timeline: _Timeline, errors: list[str]
) -> dict[str, Any]:
    """What the timeline region shows: rows, paging, the live socket and the filters."""
    paging = _paging(
        cluster=cluster,
        sequences=[m.sequence for m, _ in timeline.rows],
        more=timeline.more,
        values=values,
    )
    page_url = reverse_kept("dashboard:cluster", kwargs={"cluster_id": cluster.id})
    query = _filter_query(values)
    return {
        "cluster": cluster,
        "rows": rows_html(timeline.rows),
        "filters": values,
        "filtered": bool(query),
        "searching": bool(values["q"]),
        "more_filters": sum(1 for k in ("topic", "sender", "since", "until") if values[k]),
        "errors": errors,
        "older": paging.older,
        "newer": paging.newer,
        "live_url": paging.live_url,
        "page_url": page_url,
        "missed_url": reverse_kept("dashboard:timeline-missed", kwargs={"cluster_id": cluster.id}),
        "paged": paging.paged,
        "newest_url": page_url + ("?" + urlencode(query) if query else ""),
    }


@require_GET
@login_required
@vary_on_headers("HX-Request")
def cluster_page(request: HtmxHttpRequest, cluster_id: str) -> HttpResponse:
    """One cluster: the live timeline with filters and search, its snapshot, agents, topology."""
    cluster = _cluster_or_404(cluster_id)
    form = TimelineForm(request.GET)
    values, errors = form.values()
    if values["before"] is not None:
        values["after"] = None
    timeline = _timeline(cluster, form, values, limit=TIMELINE_PAGE)
    messages = [m for m, _ in timeline.rows]
    return render_page_or_region(
        request,
        "dashboard/cluster_detail.html",
        region="timeline",
        context=_timeline_context(cluster, values, timeline, list(errors.values())),
        page_context=lambda: {
            **_cluster_panels(cluster, messages, picked=request.GET.get("config_version", "")),
            "run_error": request.GET.get("run_error", "")[:300],
        },
    )


def _cluster_or_404(cluster_id: str) -> ClusterRecord:
    try:
        return ledger.cluster_get(cluster_id=cluster_id)
    except NotFound:
        raise Http404("no such cluster") from None


@require_GET
@login_required
def timeline_missed(request: HtmxHttpRequest, cluster_id: str) -> HttpResponse:
    """What a live page missed while its socket was down: the rows after its last sequence.

    Live pushes are hints (SPEC §1.4): a page that reconnects asks here with ``after`` = the
    last sequence it knew of and its filters, and gets the same out-of-band fragments a push
    brings (rows, the header's count, the snapshot). When more than a page was missed, the
    whole timeline region comes back instead (``HX-Retarget``).
    """
    cluster = _cluster_or_404(cluster_id)
    form = TimelineForm(request.GET)
    values, _ = form.values()
    after = values["after"] or 0
    # From an empty page (after=0) everything is missed: the newest page, as a first load.
    values.update(before=None, after=after or None)
    rows: list[MessageRecord] = []
    if not values["q"] and cluster.last_sequence > after:
        timeline = _timeline(cluster, form, values, limit=TIMELINE_PAGE)
        if timeline.more:
            values["after"] = None
            newest = _timeline(cluster, form, values, limit=TIMELINE_PAGE)
            response = render(
                request,
                "dashboard/cluster_detail.html#timeline",
                _timeline_context(cluster, values, newest, []),
            )
            response["HX-Retarget"] = "#timeline"
            response["HX-Reswap"] = "outerHTML"
            return response
        rows = [m for m, _ in timeline.rows]
    fragments = [timeline_rows_html(rows)] if rows else []
    fragments.append(count_html(cluster.id, cluster.last_sequence))
    if cluster.last_sequence > after:
        snapshot = snapshot_latest(cluster_id=cluster.id)
        if snapshot is not None and snapshot.sequence > after:
            fragments.append(snapshot_html(snapshot))
    return HttpResponse("".join(fragments))


def _cluster_panels(
    cluster: ClusterRecord, messages: list[MessageRecord], *, picked: str = ""
) -> dict[str, Any]:
    """What the page shows beside the timeline: snapshot, agents, topology, filter choices.

    ``picked`` is a config version (SPEC §7.7) to show the agents and topology as of: the
    cluster's versions are listed (one query), and an unknown one shows the current config.
    """
    versions = ledger.cluster_config_versions(cluster_id=cluster.id)
    shown = next((v for v in versions if str(v.version) == picked), None)
    if shown is not None and shown.version == cluster.config_version:
        shown = None
    panel = agents_context(cluster, version=shown)
    agents = panel["agents"]
    # Suggestions for the filter inputs, from the config and the page: no scan of the ledger.
    topics = sorted(_config_drawn(cluster).topics | {m.topic for m in messages})
    senders = sorted({a["id"] for a in agents if a["id"]} | {m.sender for m in messages})
    return {
        **panel,
        "snapshot": snapshot_latest(cluster_id=cluster.id),
        **topology_context(cluster, shown, versions),
        "metrics_url": reverse_kept("dashboard:metrics", kwargs={"cluster_id": cluster.id}),
        "topic_choices": topics,
        "sender_choices": senders,
    }


def topology_context(
    cluster: ClusterRecord,
    shown: ledger.ConfigVersionRecord | None,
    versions: list[ledger.ConfigVersionRecord],
) -> dict[str, Any]:
    """The topology panel: the agents as the cluster runs them now (zeroshot's
    completion-detector included when it joins) or as of ``shown``, and the version picker."""
    drawn = _config_drawn(cluster) if shown is None else _drawn(shown.agents)
    return {
        "topology": drawn.topology,
        "completion": drawn.completion,
        "config_versions": [_version_row(cluster, v) for v in versions],
        "config_version": shown.version if shown else cluster.config_version,
        "tones": range(TOPIC_TONES),
        "node_w": NODE_W,
        "node_h": NODE_H,
    }


@dataclass(frozen=True, slots=True)
class _Drawn:
    """What the page draws from a config alone: the agents as the cluster runs them
    (``agents_with_completion``) as a topology and how they end, and the topics the config's
    own agents are triggered by or publish (the filter's suggestions)."""

    topology: Topology
    completion: str
    topics: frozenset[str]


def _drawn(agents: list[dict[str, Any]]) -> _Drawn:
    configured = agents_with_completion(agents)
    return _Drawn(
        topology=topology(configured),
        completion=completion_of(configured),
        topics=frozenset(t for a in agents for t in trigger_topics(a) + published_topics(a)),
    )


def _config_drawn(cluster: ClusterRecord) -> _Drawn:
    """``_drawn`` of the cluster's current agents, kept per config text when the record was
    read from one: a config changes only through a ``CLUSTER_OPERATIONS`` chain, and every load
    of its page drew it anew (docs/decisions/0250)."""
    if cluster.config_text is None:
        return _drawn(cluster.agents)
    return _drawn_of_text(cluster.config_text)


@functools.lru_cache(maxsize=64)
def _drawn_of_text(text: str) -> _Drawn:
    # The record's config is this text parsed (ledger.statements), so are its agents here.
    agents = ClusterRecord(id="", created_at=0, state="", config=json.loads(text)).agents
    return _drawn(agents)


def _version_row(cluster: ClusterRecord, version: ledger.ConfigVersionRecord) -> dict[str, Any]:
    """One config version for the picker: its number, who made it and what it changed."""
    changes = [d for d in version.diff if isinstance(d, dict)]
    signs = {"added": "+", "removed": "-", "changed": "~"}
    what = " ".join(f"{signs.get(str(d.get('change')), '')}{d.get('agent')}" for d in changes)
    return {
        "version": version.version,
        "sender": version.sender,
        "summary": what or "the config it was created with",
        "current": version.version == cluster.config_version,
        "created_at": version.created_at,
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
