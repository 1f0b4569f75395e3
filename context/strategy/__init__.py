"""An agent's ``contextStrategy`` (SPEC §2, §2.1): parsing with defaults, and validation.

Layout: ``spec`` (the vocabulary, defaults and parsed dataclasses), ``parse`` (raw JSON to a
``ContextStrategy``, rejecting what validation calls an error) and ``validation`` (the errors
and warnings of one strategy or of every agent of a config).
"""

from __future__ import annotations

from context.strategy.parse import agent_max_tokens, default_priority, strategy_parse
from context.strategy.spec import (
    DEFAULT_COMPACT_AMOUNT,
    DEFAULT_MAX_TOKENS,
    HIGH_TOPICS,
    PRIORITIES,
    REQUIRED_TOPICS,
    SINCE_FORMS,
    SINCE_KEYWORDS,
    STRATEGIES,
    UNPUBLISHED_OK_TOPICS,
    ContextStrategy,
    Priority,
    SourceSpec,
    Strategy,
    StrategyError,
    is_since_valid,
    iso_to_ms,
    since_number,
)
from context.strategy.validation import (
    Issue,
    ValidationReport,
    strategy_validate,
    strategy_validate_agents,
)

__all__ = [
    "DEFAULT_COMPACT_AMOUNT",
    "DEFAULT_MAX_TOKENS",
    "HIGH_TOPICS",
    "PRIORITIES",
    "REQUIRED_TOPICS",
    "SINCE_FORMS",
    "SINCE_KEYWORDS",
    "STRATEGIES",
    "UNPUBLISHED_OK_TOPICS",
    "ContextStrategy",
    "Issue",
    "Priority",
    "SourceSpec",
    "Strategy",
    "StrategyError",
    "ValidationReport",
    "agent_max_tokens",
    "default_priority",
    "is_since_valid",
    "iso_to_ms",
    "since_number",
    "strategy_parse",
    "strategy_validate",
    "strategy_validate_agents",
]
