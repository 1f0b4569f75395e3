"""Context builds against the ledger: the thin edge around the pure core.

Reads go through ``ledger.interfaces`` with one bounded, index-backed query per distinct source
selection; everything else (strategy, selection finishing, packs, budget, guard, metrics) is the
pure core in this package.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings

from context.agents import AgentConfigError, AgentSpec, agent_parse
from context.budget import BudgetResult, Pack, budget_select
from context.guidance import GUIDANCE_PER_BUILD, guidance_block
from context.metrics import build_metrics, metrics_line
from context.models import ContextBuild
from context.packs import DEFAULT_RULES, build_packs
from context.selection import (
    SelectionQuery,
    SinceAnchors,
    apply_query_result,
    query_matches,
    select_messages,
    since_resolve,
    source_queries,
    validator_skip_query,
)
from context.selectors import PreviousBuild, build_previous
from context.services.recording import build_guidance_mark, build_insert
from context.services.triggers import as_of_filter, trigger_choose, trigger_matches
from context.signals import build_done
from context.strategy import ContextStrategy, strategy_parse
from ledger import interfaces as ledger
from ledger.interfaces import (
    INT32_MAX,
    INT64_MAX,
    ClusterRecord,
    ClusterWriter,
    InvalidInput,
    MessageFilter,
    MessageRecord,
    NotFound,
    Topic,
    integer_check,
    text_check,
    timestamp_check,
)

# ``ZEROSHOT_CONTEXT_METRICS=1`` routes this logger to stdout, one line per build (SPEC §6.2).
metrics_logger = logging.getLogger("zeroshot.context_metrics")

TASK_COMPLETED = "TASK_COMPLETED"
# Writes that commit with a recorded build: the ledger's writer and the new build's id.
RecordHook = Callable[[ClusterWriter, int], None]
VALIDATOR_ROLE = "validator"
# The widths of the build's columns (context.models.ContextBuild).
AGENT_ID_MAX = 128
ROLE_MAX = 128


@dataclass(frozen=True, slots=True)
class BuildOutcome:
    """A finished build: the prompt, its metrics and what the inspector needs to explain it."""

    context: str
    metrics: dict[str, Any]
    packs: tuple[Pack, ...]
    result: BudgetResult
    trigger: MessageRecord
    iteration: int
    # The budget of this build: the caller's what-if, else the strategy's maxTokens.
    max_tokens: int
    recorded: bool
    build_id: int | None = None
    started_at: int | None = None
    # Nothing named the trigger and no message of the agent's trigger topics exists (as of the
    # build's point): the newest message of any topic stood in for one.
    trigger_fallback: bool = False
    # Sources whose filters the triggering message passes: it is left out of them (it has a
    # pack of its own), so an empty one among these had no other message.
    trigger_sources: frozenset[str] = frozenset()


def agent_spec_get(*, cluster: ClusterRecord, agent_id: str) -> AgentSpec:
    """The agent of the cluster's config, parsed (``context.agents``); ``NotFound`` when the
    config has no such agent, ``InvalidInput`` when its config cannot be read."""
    raw = agent_config_get(cluster=cluster, agent_id=agent_id)
    try:
        return _agent_parsed(json.dumps(raw, separators=(",", ":")), agent_id)
    except AgentConfigError as error:
        raise InvalidInput(error.message, details={"field": error.field}) from None


@functools.lru_cache(maxsize=256)
def _agent_parsed(text: str, agent_id: str) -> AgentSpec:
    """An agent's config parsed, kept per config text: a claim, its completion and every lease
    check ask for the same agent of a config that rarely changes (pure work)."""
    return agent_parse(json.loads(text), where=f"agent {agent_id!r}")


def agent_config_get(*, cluster: ClusterRecord, agent_id: str) -> dict[str, Any]:
    """The agent of the cluster's config, or ``NotFound`` listing the agents there are."""
    config = cluster.config
    agents = config.get("agents") if isinstance(config, dict) else None
    if isinstance(agents, list):  # ``cluster.agents`` without building its list
        for agent in agents:
            if isinstance(agent, dict) and agent.get("id") == agent_id:
                return agent
    known = ", ".join(str(a.get("id")) for a in cluster.agents) or "none"
    raise NotFound(
        f"cluster {cluster.id!r} has no agent {agent_id!r} (agents: {known})",
        details={"agent_id": agent_id},
    )


def _run_query(plan: _Plan, query: SelectionQuery) -> list[MessageRecord]:
    where = replace(
        plan.as_of,
        topic=query.topic,
        sender=query.sender,
        since=query.since_ms,
        replayable_only=query.replayable_only,
    )
    rows = ledger.message_select(
        cluster_id=plan.cluster.id,
        where=where,
        newest_first=query.newest_first,
        limit=query.fetch_limit,
    )
    return apply_query_result(rows, query, exclude_id=plan.trigger.id)


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


@dataclass(frozen=True, slots=True)
class _Plan:
    """Everything a build has settled before it reads sources: who, as of when, on what."""

    cluster: ClusterRecord
    agent_id: str
    agent: dict[str, Any]
    strategy: ContextStrategy
    max_tokens: int
    as_of: MessageFilter
    preview: bool
    trigger: MessageRecord
    anchors: SinceAnchors
    iteration: int
    # The guidance this build carries (SPEC §7.8), oldest first.
    guidance: tuple[MessageRecord, ...] = ()


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
    record_with: RecordHook | None = None,
    guidance_on_completion: bool = False,
    cluster: ClusterRecord | None = None,
) -> BuildOutcome:
    """Assemble an agent's prompt from the ledger (SPEC §2-3); record it unless a preview.

    The parameters are the body of ``POST /clusters/{id}/context`` (SPEC §6.1). A build as of
    a past point is always a preview: it replays what the agent saw then. ``record_with`` adds
    writes of the caller's to the transaction that records the build (a task's claim).

    The prompt carries the agent's queued guidance (SPEC §7.8). A recorded build delivers it
    at once, unless ``guidance_on_completion``: a task's build delivers it when the task
    completes (``build_guidance_delivered``), so a prompt that never reached its agent, or whose
    task failed, leaves it queued for the next one. ``cluster``: the cluster's record as the
    caller just read it (a claim), not read again.
    """
    started_ns = time.time_ns()
    _check_numbers(
        max_tokens=max_tokens,
        iteration=iteration,
        as_of_sequence=as_of_sequence,
        as_of_timestamp=as_of_timestamp,
    )
    text_check(agent_id, field="agent_id")
    if not 1 <= len(agent_id) <= AGENT_ID_MAX:
        raise InvalidInput(
            f"agent_id must be 1-{AGENT_ID_MAX} characters", details={"field": "agent_id"}
        )
    if cluster is None or cluster.id != cluster_id:
        cluster = ledger.cluster_get(cluster_id=cluster_id)
    config = agent_config_resolve(cluster=cluster, agent_id=agent_id, inline=agent)
    parsed = _strategy(config, override=strategy, agent_id=agent_id)
    as_of = as_of_filter(cluster_id=cluster_id, sequence=as_of_sequence, timestamp=as_of_timestamp)
    previous = build_previous(cluster_id=cluster_id, agent_id=agent_id, until=as_of.until)
    wheres = _guidance_wheres(
        agent_id=agent_id,
        as_of=as_of,
        after=previous.guidance_delivered_through if previous is not None else None,
    )
    if triggering_message_id is not None:
        # A task's trigger and its agent's guidance: one statement.
        trigger, found = ledger.message_get_with_each(
            cluster_id=cluster_id,
            message_id=triggering_message_id,
            wheres=wheres,
            limit=GUIDANCE_PER_BUILD,
        )
    else:
        trigger = trigger_choose(
            cluster_id=cluster_id,
            agent=config,
            message_id=None,
            inline=triggering_message,
            as_of=as_of,
        )
        found = ledger.message_select_each(
            cluster_id=cluster_id, wheres=wheres, limit=GUIDANCE_PER_BUILD
        )
    plan = _Plan(
        cluster=cluster,
        agent_id=agent_id,
        agent=config,
        strategy=parsed,
        max_tokens=max_tokens or parsed.max_tokens,
        as_of=as_of,
        preview=preview or as_of.until is not None,
        trigger=trigger,
        anchors=_anchors(
            cluster=cluster, agent_id=agent_id, strategy=parsed, as_of=as_of, previous=previous
        ),
        iteration=iteration or ((previous.iteration + 1) if previous is not None else 1),
        guidance=tuple(sorted(found, key=lambda m: m.sequence)[:GUIDANCE_PER_BUILD]),
    )
    outcome = _assemble(plan, selections=_select_sources(plan))
    outcome = replace(
        outcome,
        trigger_fallback=triggering_message_id is None
        and triggering_message is None
        and not trigger_matches(config, trigger.topic),
        trigger_sources=_sources_holding_trigger(plan),
    )
    if settings.CONTEXT_METRICS_STDOUT:
        metrics_logger.info(metrics_line(outcome.metrics))
    if not plan.preview:
        build_id, started_at = _record(
            plan, outcome, record_with=record_with, guidance_delivered=not guidance_on_completion
        )
        outcome = replace(outcome, recorded=True, build_id=build_id, started_at=started_at)
    build_done.send(None, outcome=outcome, started_ns=started_ns, ended_ns=time.time_ns())
    return outcome


def _guidance_wheres(
    *, agent_id: str, as_of: MessageFilter, after: int | None
) -> list[MessageFilter]:
    """The agent's mailbox after its cursor (zeroshot's ``queryGuidanceMailbox``): every
    ``USER_GUIDANCE_CLUSTER`` and the ``USER_GUIDANCE_AGENT`` addressed to it; of what they
    find, the build carries the oldest ``GUIDANCE_PER_BUILD`` in sequence order. Two index
    seeks in one statement (with a task's trigger, three)."""
    return [
        replace(as_of, topic=str(topic), receiver=receiver, after=after)
        for topic, receiver in (
            (Topic.USER_GUIDANCE_CLUSTER, None),
            (Topic.USER_GUIDANCE_AGENT, agent_id),
        )
    ]


def _check_numbers(
    *,
    max_tokens: int | None,
    iteration: int | None,
    as_of_sequence: int | None,
    as_of_timestamp: int | None,
) -> None:
    """The numbers of a build within what their columns hold (int32 for the recorded ones)."""
    for name, value in (("max_tokens", max_tokens), ("iteration", iteration)):
        if value is not None:
            integer_check(value, field=name, minimum=1, maximum=INT32_MAX)
    if as_of_sequence is not None:
        integer_check(as_of_sequence, field="as_of_sequence", minimum=1, maximum=INT64_MAX)
    if as_of_timestamp is not None:
        timestamp_check(as_of_timestamp, field="as_of_timestamp")


def agent_config_resolve(
    *, cluster: ClusterRecord, agent_id: str, inline: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The agent's config: given inline, else the cluster's (``NotFound`` when it has none)."""
    config = dict(
        inline if inline is not None else agent_config_get(cluster=cluster, agent_id=agent_id)
    )
    config.setdefault("id", agent_id)
    return config


def _strategy(
    agent: Mapping[str, Any], *, override: Mapping[str, Any] | None, agent_id: str
) -> ContextStrategy:
    raw = override if override is not None else agent.get("contextStrategy")
    if raw is not None and not isinstance(raw, Mapping):
        raise InvalidInput("contextStrategy must be an object", details={"field": "strategy"})
    return strategy_parse(raw, agent_id=agent_id)


def _anchors(
    *,
    cluster: ClusterRecord,
    agent_id: str,
    strategy: ContextStrategy,
    as_of: MessageFilter,
    previous: PreviousBuild | None,
) -> SinceAnchors:
    """The moments the sources' keyword ``since`` values refer to (SPEC §2.2)."""
    task_end = None
    if any(s.since == "last_task_end" for s in strategy.sources):
        task_end = ledger.lifecycle_event_latest(
            cluster_id=cluster.id, agent_id=agent_id, event=TASK_COMPLETED, until=as_of.until
        )
    return SinceAnchors(
        cluster_start=cluster.created_at,
        last_task_end=task_end.timestamp if task_end is not None else None,
        last_agent_start=previous.started_at if previous is not None else None,
    )


def _sources_holding_trigger(plan: _Plan) -> frozenset[str]:
    """The pack ids of the sources that would select the triggering message (pure)."""
    held = set()
    for source in plan.strategy.sources:
        since_ms = since_resolve(source.since, topic=source.topic, anchors=plan.anchors)
        full_query, _ = source_queries(source, since_ms)
        if query_matches(full_query, plan.trigger):
            held.add(source.pack_id)
    return frozenset(held)


def _select_sources(plan: _Plan) -> list[tuple[list[MessageRecord], list[MessageRecord]]]:
    """The full and compact messages of every source, with one query per source.

    The compact selection is cut from the full one in memory whenever the full rows contain it
    (the same ``latest 1`` twice, ``latest 3`` then ``latest 1``, or ``all``).
    """
    selections = []
    for source in plan.strategy.sources:
        since_ms = since_resolve(source.since, topic=source.topic, anchors=plan.anchors)
        full_query, compact_query = source_queries(source, since_ms)
        full = _run_query(plan, full_query)
        if _contains(full_query, compact_query):
            compact = select_messages(full, compact_query, exclude_id=plan.trigger.id)
        else:
            compact = _run_query(plan, compact_query)
        selections.append((full, compact))
    return selections


def _assemble(
    plan: _Plan, *, selections: list[tuple[list[MessageRecord], list[MessageRecord]]]
) -> BuildOutcome:
    """Packs, budget, guard and metrics: the pure core, on what the sources selected."""
    role = str(plan.agent.get("role") or "")
    validation_results = (
        _run_query(plan, validator_skip_query(cluster_start=plan.cluster.created_at))
        if role == VALIDATOR_ROLE
        else []
    )
    packs = build_packs(
        agent=plan.agent,
        iteration=plan.iteration,
        strategy=plan.strategy,
        source_messages=selections,
        trigger=plan.trigger,
        validation_results=validation_results,
        rules_text=_rules_text(agent=plan.agent, cluster=plan.cluster),
        queued_guidance=guidance_block(plan.guidance),
    )
    result = budget_select(packs, max_tokens=plan.max_tokens, max_chars=settings.CONTEXT_MAX_CHARS)
    metrics = build_metrics(
        cluster_id=plan.cluster.id,
        agent_id=plan.agent_id,
        role=role or None,
        iteration=plan.iteration,
        triggered_by=plan.trigger.topic,
        trigger_from=plan.trigger.sender,
        max_tokens=plan.max_tokens,
        sources_count=len(plan.strategy.sources),
        result=result,
    )
    return BuildOutcome(
        context=result.context,
        metrics=metrics,
        packs=tuple(packs),
        result=result,
        trigger=plan.trigger,
        iteration=plan.iteration,
        max_tokens=plan.max_tokens,
        recorded=False,
    )


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
    plan: _Plan,
    outcome: BuildOutcome,
    *,
    record_with: RecordHook | None,
    guidance_delivered: bool,
) -> tuple[int, int]:
    """Store the build and move the cluster's clock past its start, in the ledger's write
    transaction; with metrics-to-ledger on, its CONTEXT_METRICS message commits with it.
    Returns the build's id and start."""
    with ledger.cluster_transaction(plan.cluster.id) as writer:
        # Strictly after everything the agent could have seen (SPEC §2.2).
        started_at = max(ledger.now_ms(), writer.last_timestamp + 1)
        build_id = build_insert(
            cluster_id=plan.cluster.id,
            agent_id=plan.agent_id,
            # The role is shown, never looked up: a longer one from a config is cut to fit.
            role=str(plan.agent.get("role") or "")[:ROLE_MAX],
            iteration=plan.iteration,
            started_at=started_at,
            trigger_message_id=plan.trigger.id if plan.trigger.sequence else "",
            trigger_topic=plan.trigger.topic,
            max_tokens=plan.max_tokens,
            final_tokens=outcome.result.budget.final_tokens,
            metrics=outcome.metrics,
            pack_texts=included_pack_texts(outcome.result),
            guidance_through=plan.guidance[-1].sequence if plan.guidance else None,
            guidance_delivered=guidance_delivered and bool(plan.guidance),
            config_version=plan.cluster.config_version,
        )
        writer.clock_advance(started_at)
        if settings.CONTEXT_METRICS_LEDGER:
            draft = ledger.MessageDraft(
                topic="CONTEXT_METRICS",
                sender=plan.agent_id,
                receiver="system",
                content={"data": outcome.metrics},
            )
            writer.append([draft], now=ledger.now_ms(), single=True)
        if record_with is not None:
            record_with(writer, build_id)
    return build_id, started_at


def build_usage_record(*, build_id: int, usage: Mapping[str, Any]) -> None:
    """Keep what the model billed for a build's prompt next to the build's own estimate.

    Called inside the transaction that completes the build's task.
    """
    ContextBuild.objects.filter(pk=build_id).update(reported_usage=dict(usage))


def build_guidance_delivered(*, build_id: int) -> None:
    """The guidance a task's build carried has reached its agent: the task completed (zeroshot
    moves its cursor once the task's hook succeeded, ``agent-lifecycle.js``). Called inside the
    transaction that completes the task; one UPDATE, touching nothing when it carried none."""
    build_guidance_mark(build_id=build_id)
