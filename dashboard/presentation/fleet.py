"""The fleet page's rows as it prints them: each value worked out and escaped once.

A fleet page holds a hundred clusters of several agents each, their links and times: a row is
made of ready values the template only looks up (as ``presentation.timeline`` does for the
timeline), so no filter, tag or ``reverse()`` runs per row or per agent.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import TypedDict

from django.urls import reverse
from django.utils.safestring import SafeString

from dashboard.presentation.labels import moment_iso, moment_of, moment_utc, topic_tone
from dashboard.templatetags.dashboard_ui import elapsed_text
from ledger.interfaces import ClusterGlance
from runs.fleet import ClusterAgents, UsageRow
from runs.records import RunnerRecord
from runs.selectors import ClusterCondition


def _e(text: str) -> SafeString:
    return SafeString(html.escape(text))


def _agent_item(agent_id: str, state: str, queued: int, task_url: str) -> str:
    """One agent of a cluster row as its list item: a dot and its state in words, its name
    linking to the task it runs or waits for (a hundred rows of several agents each: written
    here once rather than by the template engine, tag by tag)."""
    name, word = html.escape(agent_id), html.escape(state)
    waiting = f", {queued} queued" if queued else ""
    label = (
        f'<a class="mono" href="{html.escape(task_url)}">{name}</a>'
        if task_url
        else f'<span class="mono">{name}</span>'
    )
    return (
        f'<li><span class="run-state run-{word}" title="{name}: {word}{waiting}">'
        f'<span class="dot" aria-hidden="true"></span>{label} '
        f'<span class="agent-word">{word}</span></span></li>'
    )


class Moment(TypedDict):
    """A time as a ``<time>`` element needs it."""

    ms: SafeString
    iso: SafeString
    utc: SafeString


class ClusterRow(TypedDict):
    """One running cluster as the fleet page's table shows it."""

    id: SafeString
    url: SafeString
    state: SafeString
    # Why a cluster that can no longer move stands still (``runs.selectors.cluster_conditions``).
    reason: SafeString
    labels: list[SafeString]
    agents_html: SafeString  # the list items of its agents
    oldest_agent: SafeString
    oldest_url: SafeString | None
    oldest: Moment | None
    oldest_for: SafeString
    last_topic: SafeString | None
    last_tone: int
    last_sender: SafeString
    last: Moment | None


def _moment(ms: int | None) -> Moment | None:
    if ms is None:
        return None
    moment = moment_of(ms)
    if moment is None:
        return {"ms": _e(str(ms)), "iso": _e(""), "utc": _e(str(ms))}
    return {"ms": _e(str(ms)), "iso": _e(moment_iso(moment)), "utc": _e(moment_utc(moment))}


def cluster_rows(
    glance: Iterable[ClusterGlance],
    agents: dict[str, ClusterAgents],
    conditions: dict[str, ClusterCondition],
    *,
    now: int,
) -> list[ClusterRow]:
    """The rows of the running clusters, in the order given, each in its condition: a running
    cluster that can no longer move reads ``stalled``, with the reason, as the clusters list
    shows it."""
    cluster_prefix = reverse("dashboard:cluster", kwargs={"cluster_id": "0"}).removesuffix("0/")
    task_prefix = reverse("dashboard:task", kwargs={"task_id": "0"}).removesuffix("0/")
    rows: list[ClusterRow] = []
    for g in glance:
        c = g.cluster
        at = agents[c.id]
        condition = conditions.get(c.id)
        items = "".join(
            _agent_item(
                a.agent_id,
                a.state,
                a.queued,
                f"{task_prefix}{a.current_task_id}/" if a.current_task_id else "",
            )
            for a in at.agents
        )
        rows.append(
            {
                "id": _e(c.id),
                "url": _e(f"{cluster_prefix}{c.id}/"),
                "state": _e(condition.state if condition else c.state),
                "reason": _e(condition.reason if condition else ""),
                "labels": [_e(f"{k}={v}") for k, v in sorted(c.labels.items())],
                "agents_html": SafeString(items),
                "oldest_agent": _e(at.oldest_queued_agent),
                "oldest_url": _e(f"{task_prefix}{at.oldest_queued_task_id}/")
                if at.oldest_queued_task_id
                else None,
                "oldest": _moment(at.oldest_queued_at),
                "oldest_for": _e(elapsed_text(at.oldest_queued_at, now)),
                "last_topic": _e(g.last_topic) if g.last_topic else None,
                "last_tone": topic_tone(g.last_topic) if g.last_topic else 0,
                "last_sender": _e(g.last_sender or ""),
                "last": _moment(c.last_activity),
            }
        )
    return rows


class UsageCells(TypedDict):
    """One row of the usage table, its numbers written with thousands separators."""

    day: SafeString
    day_iso: SafeString
    model: SafeString
    agent: SafeString
    tasks: SafeString
    inputs: SafeString
    outputs: SafeString
    cost: SafeString | None


def day_text(ms: int) -> str:
    """A UTC day as "Thu 2026-12-03": with its year, as every dated text of the pages."""
    moment = moment_of(ms)
    return moment.strftime("%a %Y-%m-%d") if moment is not None else str(ms)


def usage_rows(rows: Iterable[UsageRow]) -> list[UsageCells]:
    """The usage table's rows, newest day first as given."""
    days: dict[int, tuple[SafeString, SafeString]] = {}
    cells: list[UsageCells] = []
    for r in rows:
        if r.day not in days:
            moment = moment_of(r.day_ms)
            days[r.day] = (
                _e(day_text(r.day_ms)),
                _e(moment_iso(moment)[:10] if moment else ""),
            )
        day, iso = days[r.day]
        cells.append(
            {
                "day": day,
                "day_iso": iso,
                "model": _e(r.model),
                "agent": _e(r.agent_id),
                "tasks": _e(f"{r.tasks:,}"),
                "inputs": _e(f"{r.input_tokens:,}"),
                "outputs": _e(f"{r.output_tokens:,}"),
                "cost": _e(f"${r.cost_usd:,.4f}") if r.cost_usd is not None else None,
            }
        )
    return cells


class DayTotal(TypedDict):
    """One day's billed tokens and cost over every model and agent."""

    day: SafeString
    day_iso: SafeString
    inputs: SafeString
    outputs: SafeString
    cost: SafeString | None


def day_totals(totals: Iterable[tuple[int, int, int, float | None]]) -> list[DayTotal]:
    """Each day's totals (``UsageByDay.totals``), written out."""
    return [
        {
            "day": _e(day_text(ms)),
            "day_iso": _e(moment_iso(m)[:10] if (m := moment_of(ms)) else ""),
            "inputs": _e(f"{inputs:,}"),
            "outputs": _e(f"{outputs:,}"),
            "cost": _e(f"${cost:,.2f}") if cost is not None else None,
        }
        for ms, inputs, outputs, cost in totals
    ]


class RunnerRow(TypedDict):
    """One runner as the fleet page's table shows it."""

    name: SafeString
    serves: list[tuple[SafeString, bool]]  # (label or provider, is a provider)
    holding: SafeString
    last_seen: Moment | None
    completed: SafeString
    failed: SafeString
    any_failed: bool


def runner_rows(runners: Iterable[RunnerRecord]) -> list[RunnerRow]:
    """The runners' rows, in the order given."""
    return [
        {
            "name": _e(r.name),
            "serves": [(_e(f"{k}={v}"), False) for k, v in sorted(r.labels.items())]
            + [(_e(p), True) for p in r.providers],
            "holding": _e(f"{r.holding:,}"),
            "last_seen": _moment(r.last_seen_at),
            "completed": _e(f"{r.completed:,}"),
            "failed": _e(f"{r.failed:,}"),
            "any_failed": r.failed > 0,
        }
        for r in runners
    ]
