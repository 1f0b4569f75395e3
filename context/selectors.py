"""Reads of recorded context builds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection

from context.budget import PackDecision
from context.models import ContextBuild
from ledger.interfaces import statement_rows

DEFAULT_PAGE = 50


@dataclass(frozen=True, slots=True)
class BuildRecord:
    """A recorded build, detached from the ORM."""

    id: int
    cluster_id: str
    agent_id: str
    role: str
    iteration: int
    started_at: int
    trigger_message_id: str
    trigger_topic: str
    max_tokens: int
    final_tokens: int
    metrics: dict[str, Any]
    pack_texts: list[list[str]] | None = None
    reported_usage: dict[str, Any] | None = None
    # The cluster's config version the build was made under (SPEC §2.2, §7.7).
    config_version: int = 1

    @property
    def reported_input_tokens(self) -> int | None:
        """The input tokens the model billed for this prompt, when its task reported usage."""
        value = (self.reported_usage or {}).get("inputTokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def decisions(self) -> list[PackDecision]:
        """The pack decisions of the build (SPEC §3.6), typed."""
        packs = self.metrics.get("packs") if isinstance(self.metrics, dict) else None
        if not isinstance(packs, list):
            return []
        return [
            PackDecision.from_dict(raw, position=i)
            for i, raw in enumerate(packs)
            if isinstance(raw, dict)
        ]

    @property
    def prompt(self) -> str:
        return "".join(text for _, text in self.pack_texts or [])


def _record(build: ContextBuild, *, with_texts: bool) -> BuildRecord:
    return BuildRecord(
        id=build.pk,
        cluster_id=build.cluster_id,
        agent_id=build.agent_id,
        role=build.role,
        iteration=build.iteration,
        started_at=build.started_at,
        trigger_message_id=build.trigger_message_id,
        trigger_topic=build.trigger_topic,
        max_tokens=build.max_tokens,
        final_tokens=build.final_tokens,
        metrics=build.metrics,
        pack_texts=build.pack_texts if with_texts else None,
        reported_usage=build.reported_usage,
        config_version=build.config_version,
    )


def build_list(
    *,
    cluster_id: str,
    agent_id: str | None = None,
    before_id: int | None = None,
    limit: int = DEFAULT_PAGE,
) -> list[BuildRecord]:
    """Recorded builds, newest first, without their texts (one query)."""
    builds = ContextBuild.objects.filter(cluster_id=cluster_id).defer("pack_texts")
    if agent_id is not None:
        builds = builds.filter(agent_id=agent_id)
    if before_id is not None:
        builds = builds.filter(pk__lt=before_id)
    return [_record(b, with_texts=False) for b in builds.order_by("-started_at", "-id")[:limit]]


def build_get(*, cluster_id: str, build_id: int) -> BuildRecord | None:
    """One recorded build with its pack texts."""
    build = ContextBuild.objects.filter(cluster_id=cluster_id, pk=build_id).first()
    return _record(build, with_texts=True) if build is not None else None


def build_tokens(*, cluster_id: str, build_ids: list[int]) -> dict[int, int]:
    """The estimated prompt tokens (``final_tokens``) of some builds, by id; one query."""
    if not build_ids:
        return {}
    rows = ContextBuild.objects.filter(cluster_id=cluster_id, pk__in=build_ids)
    return dict(rows.values_list("pk", "final_tokens"))


# What ``build_latest_by_agent`` reads of a build: ``BuildRecord`` without its texts.
_LATEST_FIELDS = (
    "id",
    "cluster",
    "agent_id",
    "role",
    "iteration",
    "started_at",
    "trigger_message_id",
    "trigger_topic",
    "max_tokens",
    "final_tokens",
    "metrics",
    "reported_usage",
    "config_version",
)


@cache
def _latest_sql(vendor: str, clusters: int) -> str:
    """The newest build of each agent of ``clusters`` clusters: the database picks the newest
    id per (cluster, agent) on ``build_agent_recent``, and only those rows leave it."""
    del vendor  # part of the cache key only: the quoting is the connection's
    q = connection.ops.quote_name
    columns = {f.name: q(f.column) for f in ContextBuild._meta.concrete_fields}
    table = q(ContextBuild._meta.db_table)
    among = ", ".join(["%s"] * clusters)
    newest = (
        f"SELECT MAX({columns['id']}) FROM {table} WHERE {columns['cluster']} IN ({among}) "
        f"GROUP BY {columns['cluster']}, {columns['agent_id']}"
    )
    selected = ", ".join(columns[name] for name in _LATEST_FIELDS)
    return f"SELECT {selected} FROM {table} WHERE {columns['id']} IN ({newest})"


def _json(value: Any) -> Any:
    """A JSON column's value as ``JSONField`` reads it (both backends hand over the text)."""
    return json.loads(value) if isinstance(value, str) else value


def build_latest_by_agent(*, cluster_ids: list[str]) -> dict[tuple[str, str], BuildRecord]:
    """The newest build of each agent of some clusters, keyed by (cluster, agent); one
    prebuilt statement (the cluster page and the list read it on every load).

    The database picks the newest id per (cluster, agent) (ids grow with ``started_at``, which
    a cluster's clock keeps increasing), so only one row per agent leaves it.
    """
    if not cluster_ids:
        return {}
    latest = {}
    rows = statement_rows(_latest_sql(connection.vendor, len(cluster_ids)), list(cluster_ids))
    for row in rows:
        (id_, cluster_id, agent_id, role, iteration, started_at, message_id, topic) = row[:8]
        max_tokens, final_tokens, metrics, usage, version = row[8:]
        latest[(cluster_id, agent_id)] = BuildRecord(
            id=id_,
            cluster_id=cluster_id,
            agent_id=agent_id,
            role=role,
            iteration=iteration,
            started_at=started_at,
            trigger_message_id=message_id,
            trigger_topic=topic,
            max_tokens=max_tokens,
            final_tokens=final_tokens,
            metrics=_json(metrics),
            reported_usage=_json(usage),
            config_version=version,
        )
    return latest


@dataclass(frozen=True, slots=True)
class PreviousBuild:
    """What the next build of an agent needs of its previous ones (SPEC §2.2, §7.8)."""

    started_at: int
    iteration: int
    # The guidance mailbox's cursor: the newest guidance sequence a delivered build carried.
    guidance_delivered_through: int | None = None


@cache
def _previous_sql(vendor: str, *, until: bool) -> str:
    """The newest build of an agent, latest id on a tie: one seek on ``build_agent_recent`` for
    its ``started_at``, then the builds of that moment (the index ends with no id to order by,
    so ``ORDER BY started_at DESC, id DESC`` would sort)."""
    del vendor  # part of the cache key only: the quoting is the connection's
    q = connection.ops.quote_name
    columns = {f.name: q(f.column) for f in ContextBuild._meta.concrete_fields}
    table = q(ContextBuild._meta.db_table)
    agent = f"{columns['cluster']} = %s AND {columns['agent_id']} = %s"
    bound = f" AND {columns['started_at']} <= %s" if until else ""
    newest = f"SELECT MAX({columns['started_at']}) FROM {table} WHERE {agent}{bound}"
    delivered = (
        f"SELECT MAX({columns['guidance_through']}) FROM {table} "
        f"WHERE {agent}{bound} AND {columns['guidance_delivered']} = %s"
    )
    return (
        f"SELECT {columns['started_at']}, {columns['iteration']}, ({delivered}) FROM {table} "
        f"WHERE {agent} AND {columns['started_at']} = ({newest}) "
        f"ORDER BY {columns['id']} DESC LIMIT 1"
    )


def build_previous(*, cluster_id: str, agent_id: str, until: int | None) -> PreviousBuild | None:
    """The agent's newest recorded build that started by ``until`` (any, without one), with
    the newest guidance sequence its delivered builds carried (the mailbox's cursor).

    A prebuilt statement, as the ledger's reads on a build's path are (``ledger.statements``).
    """
    bound: list[Any] = [until] if until is not None else []
    params: list[Any] = [
        *(cluster_id, agent_id, *bound, True),
        *(cluster_id, agent_id, cluster_id, agent_id, *bound),
    ]
    rows = statement_rows(
        _previous_sql(connection.vendor, until=until is not None), params, prepare=True
    )
    if not rows:
        return None
    row = rows[0]
    return PreviousBuild(started_at=row[0], iteration=row[1], guidance_delivered_through=row[2])
