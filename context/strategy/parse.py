"""Parsing a ``contextStrategy`` with every SPEC §2 default applied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from context.strategy.spec import (
    DEFAULT_COMPACT_AMOUNT,
    DEFAULT_MAX_TOKENS,
    HIGH_TOPICS,
    REQUIRED_TOPICS,
    ContextStrategy,
    Priority,
    SourceSpec,
    Strategy,
    StrategyError,
    is_number,
    since_number,
)
from context.strategy.validation import strategy_errors


def strategy_parse(
    raw: Mapping[str, Any] | None, *, agent_id: str | None = None
) -> ContextStrategy:
    """Parse a raw ``contextStrategy`` with defaults; raise StrategyError when it is invalid."""
    if raw is None:
        return ContextStrategy()
    errors = list(strategy_errors(raw, agent=agent_id))
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise StrategyError(
            f"invalid contextStrategy: {errors[0].message}{more}",
            [issue.to_dict() for issue in errors],
        )
    raw_sources = raw.get("sources")
    sources = raw_sources if isinstance(raw_sources, list) else []
    return ContextStrategy(
        sources=tuple(_source_spec(index, source) for index, source in enumerate(sources)),
        max_tokens=_max_tokens(raw.get("maxTokens")),
    )


def default_priority(topic: str) -> Priority:
    """Return the priority of a source that sets none (SPEC §2)."""
    if topic in REQUIRED_TOPICS:
        return "required"
    if topic in HIGH_TOPICS:
        return "high"
    return "medium"


def _source_spec(index: int, raw: Mapping[str, Any]) -> SourceSpec:
    amount = _int_or_none(raw.get("amount"))
    if amount is None:
        amount = _int_or_none(raw.get("limit"))
    strategy = cast("Strategy | None", raw.get("strategy")) or (
        "latest" if amount is not None else "all"
    )
    compact_amount = _int_or_none(raw.get("compactAmount")) or DEFAULT_COMPACT_AMOUNT
    compact_strategy = cast("Strategy | None", raw.get("compactStrategy")) or (
        "latest" if strategy == "all" else strategy
    )
    topic = str(raw["topic"])
    since = raw.get("since")
    return SourceSpec(
        index=index,
        topic=topic,
        sender=raw.get("sender"),
        since=since if isinstance(since, str) else since_number(since),
        strategy=strategy,
        amount=amount,
        priority=cast("Priority | None", raw.get("priority")) or default_priority(topic),
        compact_strategy=compact_strategy,
        compact_amount=compact_amount,
    )


def _max_tokens(value: Any) -> int:
    parsed = _int_or_none(value)
    return parsed if parsed else DEFAULT_MAX_TOKENS


def _int_or_none(value: Any) -> int | None:
    return int(value) if is_number(value) else None


def agent_max_tokens(agent: Mapping[str, Any]) -> int | None:
    """The budget an agent's ``contextStrategy`` resolves to; None when the strategy is invalid."""
    raw = agent.get("contextStrategy")
    if raw is not None and not isinstance(raw, Mapping):
        return None
    try:
        return strategy_parse(raw, agent_id=str(agent.get("id"))).max_tokens
    except StrategyError:
        return None
