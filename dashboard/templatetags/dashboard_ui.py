"""Template filters of the operator pages: topic colours, times, JSON, budget bars.

Every filter returns plain text; the template engine escapes it. None marks anything safe. The
one tag that returns markup, ``topology_panel``, escapes every text it prints itself.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from django import template
from django.urls import NoReverseMatch
from django.utils.safestring import SafeString

from dashboard.links import reverse_kept
from dashboard.presentation.labels import (
    first_line,
    moment_iso,
    moment_of,
    moment_stamp,
    moment_utc,
    pretty_json,
    time_text,
    topic_tone,
)
from dashboard.presentation.topology_panel import topology_panel_html

register = template.Library()
register.filter("topic_tone", topic_tone)
register.filter("first_line", first_line)
register.filter("pretty_json", pretty_json)


@register.filter
def has_more_lines(text: str | None) -> bool:
    """Whether a text holds more than its first line (then the row has something to expand)."""
    return len((text or "").strip().splitlines()) > 1 or len(first_line(text)) < len(
        (text or "").strip()
    )


@register.filter
def iso_ms(ms: int | str | None) -> str:
    """An epoch-milliseconds value as an ISO 8601 UTC instant (for ``<time datetime>``)."""
    moment = moment_of(ms)
    return moment_iso(moment) if moment is not None else ""


@register.filter
def utc_text(ms: int | str | None) -> str:
    """The readable UTC time shown until the page's script converts it to local time."""
    moment = moment_of(ms)
    if moment is None:
        return "" if ms is None else str(ms)
    return moment_utc(moment)


@register.filter
def stamp_text(ms: int | str | None) -> str:
    """A timeline row's time in UTC, with its day; the page's script writes it in local time
    (the clock time alone for today's rows)."""
    moment = moment_of(ms)
    return moment_stamp(moment) if moment is not None else str(ms or "")


@register.filter
def input_utc(ms: int | str | None) -> str:
    """A time filter's value in UTC; the page's script shows it in local time."""
    moment = moment_of(ms)
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment is not None else ""


@register.simple_tag
def inspector_url(cluster_id: str, agent_id: Any) -> str:
    """The inspector of one agent, for any id a stored config may hold.

    Agent ids are checked against SPEC §4 when a config is saved, but a config stored before
    may hold one that no route takes (a ``/`` in it): it gets a quoted link that answers 404
    instead of failing the whole page.
    """
    try:
        return reverse_kept(
            "dashboard:inspector", kwargs={"cluster_id": cluster_id, "agent_id": agent_id}
        )
    except NoReverseMatch:
        return (
            f"/clusters/{quote(str(cluster_id), safe='')}/agents/{quote(str(agent_id), safe='')}/"
        )


@register.filter
def percent_of(value: int | None, whole: int | None) -> int:
    """``value`` as a whole percentage of ``whole``, clamped to 0-100 (for a bar's width)."""
    if not value or not whole or whole <= 0:
        return 0
    return max(0, min(100, round(100 * int(value) / int(whole))))


@register.filter
def ms_time(value: int | None) -> str:
    """Milliseconds since the epoch as readable UTC text (the fallback inside ``<time>``)."""
    return time_text(value) if isinstance(value, int) else ""


@register.filter
def elapsed_text(since_ms: int | None, now_ms: int) -> str:
    """How long since a moment, as the page's script writes it: "42s", "3m 05s", "1h 02m"."""
    if since_ms is None:
        return ""
    seconds = max(0, (now_ms - since_ms) // 1000)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds // 60 % 60:02d}m"


@register.filter
def duration_text(ms: int | None) -> str:
    """A duration in milliseconds as "850 ms", "12.4 s" or "3m 05s"; "—" when unknown."""
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return elapsed_text(0, ms)


@register.simple_tag(takes_context=True)
def topology_panel(context: template.Context) -> SafeString:
    """The topology panel of the cluster page and of the agents panel's refresh, written in
    Python (``dashboard.presentation.topology_panel``); needs the names the panel's template
    names."""
    return topology_panel_html(
        topology=context.get("topology"),
        tones=context.get("tones") or (),
        node_h=context.get("node_h") or 0,
        completion=context.get("completion") or "",
        config_versions=context.get("config_versions") or [],
        # No version is picked when none is named (versions count from 1).
        config_version=context.get("config_version") or 0,
        oob=bool(context.get("oob")),
    )
