"""Context builds against the ledger: the thin edge around the pure core.

Reads go through ``ledger.interfaces`` with one bounded, index-backed query per distinct source
selection; everything else (strategy, selection finishing, packs, budget, guard, metrics) is the
pure core in this package.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.db import transaction

from context.budget import BudgetResult, Pack, budget_select
from context.metrics import build_metrics, metrics_line
from context.models import ContextBuild
from context.packs import DEFAULT_RULES, build_packs
from context.selection import (
    SelectionQuery,
    SinceAnchors,
    apply_query_result,
    select_messages,
    since_resolve,
    source_queries,
    validator_skip_query,
)
from context.strategy import ContextStrategy, strategy_parse
from ledger import interfaces as ledger
from ledger.records import ClusterRecord, MessageRecord
from zeroshot_web.errors import InvalidInput, NotFound

logger = logging.getLogger(__name__)

TASK_COMPLETED = "TASK_COMPLETED"
VALIDATOR_ROLE = "validator"


@dataclass(frozen=True, slots=True)
class BuildOutcome:
    """A finished build: the prompt, its metrics and what the inspector needs to explain it."""

    context: str
    metrics: dict[str, Any]
    packs: tuple[Pack, ...]
    result: BudgetResult
    trigger: MessageRecord
    iteration: int
    recorded: bool
    build_id: int | None = None
    started_at: int | None = None


@dataclass(frozen=True, slots=True)
class AsOf:
    """The point a build is asked as of (SPEC §3.7): later messages do not exist for it."""

    until: int | None = None
    up_to_sequence: int | None = None


def agent_config_get(*, cluster: ClusterRecord, agent_id: str) -> dict[str, Any]:
    """The agent of the cluster's config, or ``NotFound`` listing the agents there are."""
    for agent in cluster.agents:
        if agent.get("id") == agent_id:
            return agent
    known = ", ".join(str(a.get("id")) for a in cluster.agents) or "none"
    raise NotFound(
        f"cluster {cluster.id!r} has no agent {agent_id!r} (agents: {known})",
        details={"agent_id": agent_id},
    )


def _as_of(*, cluster_id: str, sequence: int | None, timestamp: int | None) -> AsOf:
    if sequence is not None and timestamp is not None:
        raise InvalidInput(
            "give as_of_sequence or as_of_timestamp, not both",
            details={"field": "as_of_sequence"},
        )
    if sequence is not None:
        anchor = ledger.message_at_sequence(cluster_id=cluster_id, sequence=sequence)
        return AsOf(until=anchor.timestamp, up_to_sequence=sequence)
    if timestamp is not None:
        return AsOf(until=timestamp)
    return AsOf()


def _inline_trigger(*, cluster_id: str, raw: Mapping[str, Any]) -> MessageRecord:
    topic, sender = raw.get("topic"), raw.get("sender")
    if not isinstance(topic, str) or not topic or not isinstance(sender, str) or not sender:
        raise InvalidInput(
            "triggering_message needs a topic and a sender",
            details={"field": "triggering_message"},
        )
    content = raw.get("content") or {}
    if not isinstance(content, Mapping):
        raise InvalidInput(
            "triggering_message.content must be an object",
            details={"field": "triggering_message.content"},
        )
    return MessageRecord(
        id=str(raw.get("id") or "inline-trigger"),
        cluster_id=cluster_id,
        sequence=0,
        timestamp=int(raw.get("timestamp") or ledger.now_ms()),
        topic=topic,
        sender=sender,
        receiver=str(raw.get("receiver") or "broadcast"),
        content=dict(content),
        metadata=raw.get("metadata"),
    )


def _trigger(
    *,
    cluster_id: str,
    agent: Mapping[str, Any],
    message_id: str | None,
    inline: Mapping[str, Any] | None,
    as_of: AsOf,
) -> MessageRecord:
    if message_id is not None:
        return ledger.message_get(cluster_id=cluster_id, message_id=message_id)
    if inline is not None:
        return _inline_trigger(cluster_id=cluster_id, raw=inline)
    # Without one, the build answers the newest message this agent triggers on.
    triggers = agent.get("triggers")
    topics = [
        t["topic"]
        for t in (triggers if isinstance(triggers, list) else [])
        if isinstance(t, Mapping) and isinstance(t.get("topic"), str) and "*" not in t["topic"]
    ]
    newest = None
    if topics:
        newest = ledger.message_latest(
            cluster_id=cluster_id,
            topics=topics,
            until=as_of.until,
            up_to_sequence=as_of.up_to_sequence,
        )
    if newest is None:
        newest = ledger.message_latest(
            cluster_id=cluster_id, until=as_of.until, up_to_sequence=as_of.up_to_sequence
        )
    if newest is None:
        raise InvalidInput(
            "the cluster has no message to trigger a build; publish one or pass triggering_message",
            details={"field": "triggering_message_id"},
        )
    return newest


def _run_query(
    *, cluster_id: str, query: SelectionQuery, as_of: AsOf, exclude_id: str
) -> list[MessageRecord]:
    rows = ledger.message_select(
        cluster_id=cluster_id,
        topic=query.topic,
        sender=query.sender,
        since=query.since_ms,
        until=as_of.until,
        up_to_sequence=as_of.up_to_sequence,
        replayable_only=query.replayable_only,
        newest_first=query.newest_first,
        limit=query.fetch_limit,
    )
    return apply_query_result(rows, query, exclude_id=exclude_id)


def _rules_text(*, agent: Mapping[str, Any], cluster: ClusterRecord) -> str:
    """The header's rules: the agent's ``contextRules``, else its template's, else ours."""
    for rules in (agent.get("contextRules"), cluster.config.get("contextRules")):
        if isinstance(rules, str) and rules.strip():
            return rules
    return DEFAULT_RULES


def _contains(full: SelectionQuery, compact: SelectionQuery) -> bool:
    """Whether the rows of ``full`` hold every row that ``compact`` selects."""
    same_filters = (full.topic, full.sender, full.since_ms, full.replayable_only) == (
        compact.topic,
        compact.sender,
        compact.since_ms,
        compact.replayable_only,
    )
    if not same_filters:
        return False
    if full.limit is None:
        return True
    return (
        full.newest_first == compact.newest_first
        and compact.limit is not None
        and compact.limit <= full.limit
    )


def _previous_build(*, cluster_id: str, agent_id: str, as_of: AsOf) -> ContextBuild | None:
    builds = ContextBuild.objects.filter(cluster_id=cluster_id, agent_id=agent_id)
    if as_of.until is not None:
        builds = builds.filter(started_at__lte=as_of.until)
    return builds.order_by("-started_at", "-id").only("started_at", "iteration").first()


def context_build(
    *,
    cluster_id: str,
    agent_id: str,
    agent: Mapping[str, Any] | None = None,
    strategy: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
    iteration: int | None = None,
    triggering_message_id: str | None = None,
    triggering_message: Mapping[str, Any] | None = None,
    as_of_sequence: int | None = None,
    as_of_timestamp: int | None = None,
    preview: bool = False,
) -> BuildOutcome:
    """Assemble an agent's prompt from the ledger (SPEC §2-3); record it unless a preview.

    A build as of a past point is always a preview: it replays what the agent saw then.
    """
    if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
        raise InvalidInput("max_tokens must be a positive integer", details={"field": "max_tokens"})
    if iteration is not None and iteration < 1:
        raise InvalidInput("iteration must be a positive integer", details={"field": "iteration"})
    cluster = ledger.cluster_get(cluster_id=cluster_id)
    agent_config = (
        dict(agent) if agent is not None else agent_config_get(cluster=cluster, agent_id=agent_id)
    )
    agent_config.setdefault("id", agent_id)
    raw_strategy = strategy if strategy is not None else agent_config.get("contextStrategy")
    if raw_strategy is not None and not isinstance(raw_strategy, Mapping):
        raise InvalidInput("contextStrategy must be an object", details={"field": "strategy"})
    parsed: ContextStrategy = strategy_parse(raw_strategy, agent_id=agent_id)
    budget_tokens = max_tokens or parsed.max_tokens

    as_of = _as_of(cluster_id=cluster_id, sequence=as_of_sequence, timestamp=as_of_timestamp)
    preview = preview or as_of.until is not None
    trigger = _trigger(
        cluster_id=cluster_id,
        agent=agent_config,
        message_id=triggering_message_id,
        inline=triggering_message,
        as_of=as_of,
    )
    previous = _previous_build(cluster_id=cluster_id, agent_id=agent_id, as_of=as_of)
    needs_task_end = any(s.since == "last_task_end" for s in parsed.sources)
    task_end = (
        ledger.lifecycle_event_latest(
            cluster_id=cluster_id, agent_id=agent_id, event=TASK_COMPLETED, until=as_of.until
        )
        if needs_task_end
        else None
    )
    anchors = SinceAnchors(
        cluster_start=cluster.created_at,
        last_task_end=task_end.timestamp if task_end is not None else None,
        last_agent_start=previous.started_at if previous is not None else None,
    )

    # One query per source: the compact selection is cut from the full one in memory whenever
    # the full rows contain it (the same `latest 1` twice, `latest 3` then `latest 1`, or `all`).
    selections = []
    for source in parsed.sources:
        since_ms = since_resolve(source.since, topic=source.topic, anchors=anchors)
        full_query, compact_query = source_queries(source, since_ms)
        full = _run_query(
            cluster_id=cluster_id, query=full_query, as_of=as_of, exclude_id=trigger.id
        )
        if _contains(full_query, compact_query):
            compact = select_messages(full, compact_query, exclude_id=trigger.id)
        else:
            compact = _run_query(
                cluster_id=cluster_id, query=compact_query, as_of=as_of, exclude_id=trigger.id
            )
        selections.append((full, compact))
    role = str(agent_config.get("role") or "")
    validation_results = (
        _run_query(
            cluster_id=cluster_id,
            query=validator_skip_query(cluster_start=cluster.created_at),
            as_of=as_of,
            exclude_id=trigger.id,
        )
        if role == VALIDATOR_ROLE
        else []
    )
    build_iteration = iteration or ((previous.iteration + 1) if previous is not None else 1)
    packs = build_packs(
        agent=agent_config,
        iteration=build_iteration,
        strategy=parsed,
        source_messages=selections,
        trigger=trigger,
        validation_results=validation_results,
        rules_text=_rules_text(agent=agent_config, cluster=cluster),
    )
    result = budget_select(packs, max_tokens=budget_tokens, max_chars=settings.CONTEXT_MAX_CHARS)
    metrics = build_metrics(
        cluster_id=cluster_id,
        agent_id=agent_id,
        role=role or None,
        iteration=build_iteration,
        triggered_by=trigger.topic,
        trigger_from=trigger.sender,
        max_tokens=budget_tokens,
        sources_count=len(parsed.sources),
        result=result,
    )
    if settings.CONTEXT_METRICS_STDOUT:
        print(metrics_line(metrics), flush=True)
    outcome = BuildOutcome(
        context=result.context,
        metrics=metrics,
        packs=tuple(packs),
        result=result,
        trigger=trigger,
        iteration=build_iteration,
        recorded=False,
    )
    if preview:
        return outcome
    build = _record(
        cluster=cluster,
        agent_id=agent_id,
        role=role,
        iteration=build_iteration,
        trigger=trigger,
        max_tokens=budget_tokens,
        result=result,
        metrics=metrics,
    )
    return replace(outcome, recorded=True, build_id=build.pk, started_at=build.started_at)


def included_pack_texts(result: BudgetResult) -> list[list[str]]:
    """The final text of each included pack, in prompt order (after budget and guard)."""
    texts: list[list[str]] = []
    position = 0
    for decision in result.decisions:
        if decision.status == "included":
            texts.append([decision.id, result.context[position : position + decision.chars]])
            position += decision.chars
    return texts


def _record(
    *,
    cluster: ClusterRecord,
    agent_id: str,
    role: str,
    iteration: int,
    trigger: MessageRecord,
    max_tokens: int,
    result: BudgetResult,
    metrics: dict[str, Any],
) -> ContextBuild:
    with transaction.atomic():
        build = ContextBuild.objects.create(
            cluster_id=cluster.id,
            agent_id=agent_id,
            role=role,
            iteration=iteration,
            # Strictly after everything the agent could have seen (SPEC §2.2).
            started_at=max(ledger.now_ms(), (cluster.last_activity or 0) + 1),
            trigger_message_id=trigger.id if trigger.sequence else "",
            trigger_topic=trigger.topic,
            max_tokens=max_tokens,
            final_tokens=result.budget.final_tokens,
            metrics=metrics,
            pack_texts=included_pack_texts(result),
        )
        ledger.cluster_clock_advance(cluster_id=cluster.id, to=build.started_at)
        if settings.CONTEXT_METRICS_LEDGER:
            ledger.message_publish(
                cluster_id=cluster.id,
                draft=ledger.MessageDraft(
                    topic="CONTEXT_METRICS",
                    sender=agent_id,
                    receiver="system",
                    content={"data": metrics},
                ),
            )
    return build
