"""Which ledger messages a context source selects (SPEC §2): bounded queries and their results.

A source turns into one :class:`SelectionQuery` per variant (full and compact). The database
layer runs it as one index-backed query and hands the rows to :func:`apply_query_result`;
:func:`select_messages` is the same selection over messages already in memory, so both paths
share one implementation of the rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from context.strategy import (
    SINCE_FORMS,
    SourceSpec,
    Strategy,
    StrategyError,
    iso_to_ms,
    since_number,
)
from ledger.records import MessageRecord, replay_allowed
from ledger.topics import Topic

VALIDATOR_SKIP_TOPIC: Final = Topic.VALIDATION_RESULT
VALIDATOR_SKIP_LIMIT: Final = 50
# JSON allows any integer amount; past this one every ledger is smaller anyway, and the
# fetch limit stays inside a 64-bit SQL LIMIT.
MAX_AMOUNT: Final = 2**53


@dataclass(frozen=True, slots=True)
class SinceAnchors:
    """The moments a keyword ``since`` refers to, in ms (SPEC §2, §2.2)."""

    cluster_start: int
    # Timestamp of this agent's newest TASK_COMPLETED lifecycle message, if any.
    last_task_end: int | None = None
    # ``started_at`` of this agent's previous recorded build, if any.
    last_agent_start: int | None = None


@dataclass(frozen=True, slots=True)
class SelectionQuery:
    """One bounded ledger query: a topic (and sender) from a timestamp, newest or oldest N."""

    topic: str
    sender: str | None
    since_ms: int | None
    newest_first: bool
    # Messages to keep; None keeps every matching message.
    limit: int | None
    # Context sources never see raw agent output (SPEC §1.5); the validator hints read all.
    replayable_only: bool = True

    @property
    def fetch_limit(self) -> int | None:
        """Rows to fetch: one more than kept, so that the triggering message can be dropped."""
        return None if self.limit is None else self.limit + 1


def since_resolve(since: str | float | None, *, topic: str, anchors: SinceAnchors) -> int | None:
    """Resolve a source's ``since`` to ms; None means no lower bound."""
    if since is None:
        return None
    if since == "cluster_start":
        return anchors.cluster_start
    if since == "last_task_end":
        return anchors.last_task_end or anchors.cluster_start
    if since == "last_agent_start":
        # Strictly after the previous build, so that a message of that same ms is not replayed.
        if anchors.last_agent_start:
            return anchors.last_agent_start + 1
        return anchors.cluster_start
    parsed = iso_to_ms(since) if isinstance(since, str) else since_number(since)
    if parsed is None:
        raise StrategyError(
            f'unknown since value "{since}" for topic {topic} (expected {SINCE_FORMS})',
            [{"field": "since", "topic": topic, "value": since}],
        )
    return parsed


def selection_query(
    *, topic: str, sender: str | None, since_ms: int | None, strategy: Strategy, amount: int | None
) -> SelectionQuery:
    """Describe the query for one strategy and amount (``all`` with an amount is oldest N)."""
    if amount is None:
        # Without an amount every strategy selects everything.
        return SelectionQuery(topic, sender, since_ms, newest_first=False, limit=None)
    return SelectionQuery(
        topic, sender, since_ms, newest_first=strategy == "latest", limit=min(amount, MAX_AMOUNT)
    )


def source_queries(
    source: SourceSpec, since_ms: int | None
) -> tuple[SelectionQuery, SelectionQuery]:
    """Return the queries of a source's full and compact variants."""
    full = selection_query(
        topic=source.topic,
        sender=source.sender,
        since_ms=since_ms,
        strategy=source.strategy,
        amount=source.amount,
    )
    compact = selection_query(
        topic=source.topic,
        sender=source.sender,
        since_ms=since_ms,
        strategy=source.compact_strategy,
        amount=source.compact_amount,
    )
    return full, compact


def validator_skip_query(*, cluster_start: int) -> SelectionQuery:
    """The query for validator skip hints (SPEC §3.5): the oldest 50 VALIDATION_RESULTs."""
    return SelectionQuery(
        topic=VALIDATOR_SKIP_TOPIC,
        sender=None,
        since_ms=cluster_start,
        newest_first=False,
        limit=VALIDATOR_SKIP_LIMIT,
        replayable_only=False,
    )


def query_matches(query: SelectionQuery, message: MessageRecord) -> bool:
    """Tell whether a message passes the query's filters (topic, sender, since, replay)."""
    return (
        message.topic == query.topic
        and (query.sender is None or message.sender == query.sender)
        and (query.since_ms is None or message.timestamp >= query.since_ms)
        and (
            not query.replayable_only
            or replay_allowed(
                topic=message.topic, content=message.content, metadata=message.metadata
            )
        )
    )


def apply_query_result(
    rows: Sequence[MessageRecord], query: SelectionQuery, *, exclude_id: str | None
) -> list[MessageRecord]:
    """Finish a fetched query: drop non-matching rows and the trigger, cut to limit, oldest first.

    ``rows`` must be in the query's order: by (timestamp, sequence), descending when
    ``query.newest_first``.
    """
    kept = [row for row in rows if row.id != exclude_id and query_matches(query, row)]
    if query.limit is not None:
        kept = kept[: query.limit]
    if query.newest_first:
        kept.reverse()
    return kept


def select_messages(
    messages: Sequence[MessageRecord], query: SelectionQuery, *, exclude_id: str | None
) -> list[MessageRecord]:
    """Run a query over messages in memory: the reference of what the database returns."""
    ordered = sorted(
        messages,
        key=lambda message: (message.timestamp, message.sequence),
        reverse=query.newest_first,
    )
    return apply_query_result(ordered, query, exclude_id=exclude_id)


def source_select(
    messages: Sequence[MessageRecord],
    source: SourceSpec,
    *,
    anchors: SinceAnchors,
    exclude_id: str | None,
) -> tuple[list[MessageRecord], list[MessageRecord]]:
    """Select a source's full and compact messages from messages in memory."""
    since_ms = since_resolve(source.since, topic=source.topic, anchors=anchors)
    full, compact = source_queries(source, since_ms)
    return (
        select_messages(messages, full, exclude_id=exclude_id),
        select_messages(messages, compact, exclude_id=exclude_id),
    )
