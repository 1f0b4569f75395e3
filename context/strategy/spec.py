"""What a ``contextStrategy`` is made of (SPEC §2): its words, defaults and parsed shape."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, TypeGuard

from ledger.errors import InvalidInput
from ledger.topics import Topic

Strategy = Literal["latest", "oldest", "all"]
Priority = Literal["required", "high", "medium", "low"]

STRATEGIES: Final[tuple[Strategy, ...]] = ("latest", "oldest", "all")
PRIORITIES: Final[tuple[Priority, ...]] = ("required", "high", "medium", "low")
SINCE_KEYWORDS: Final = ("cluster_start", "last_task_end", "last_agent_start")
SINCE_FORMS: Final = (
    "cluster_start, last_task_end, last_agent_start, an ISO-8601 timestamp or a number of ms"
)
DEFAULT_MAX_TOKENS: Final = 100_000
# Bounds of every number a strategy holds (docs/decisions/0081-config-bounds.md): far past any
# model's window and any useful count, well inside the 32-bit columns and a claim's arithmetic.
MAX_TOKENS_MAX: Final = 10_000_000
SOURCE_COUNT_MAX: Final = 100_000
SINCE_MS_MAX: Final = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, as ledger timestamps
DEFAULT_COMPACT_AMOUNT: Final = 1
REQUIRED_TOPICS: Final = frozenset({Topic.STATE_SNAPSHOT, Topic.ISSUE_OPENED, Topic.PLAN_READY})
HIGH_TOPICS: Final = frozenset({Topic.VALIDATION_RESULT, Topic.IMPLEMENTATION_READY})
# Published by the system or by the operator rather than by an agent of the config.
UNPUBLISHED_OK_TOPICS: Final = frozenset(
    {
        Topic.ISSUE_OPENED,
        Topic.CLUSTER_RESUMED,
        Topic.STATE_SNAPSHOT,
        Topic.USER_GUIDANCE_AGENT,
        Topic.USER_GUIDANCE_CLUSTER,
    }
)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ISO_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")


class StrategyError(InvalidInput, ValueError):
    """An invalid context strategy; ``details`` lists one error dict per problem."""

    code = "invalid_strategy"

    def __init__(self, message: str, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message, details=details or [])
        self.details: list[dict[str, Any]] = details or []


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """One context source with every SPEC §2 default applied."""

    index: int
    topic: str
    sender: str | None
    # A keyword, an ISO-8601 string or ms; resolved per build by ``selection.since_resolve``.
    since: str | int | None
    strategy: Strategy
    amount: int | None
    priority: Priority
    compact_strategy: Strategy
    compact_amount: int

    @property
    def pack_id(self) -> str:
        return f"source:{self.topic}:{self.index}"


@dataclass(frozen=True, slots=True)
class ContextStrategy:
    """A parsed ``contextStrategy``: its sources in order and the token budget."""

    sources: tuple[SourceSpec, ...] = ()
    max_tokens: int = DEFAULT_MAX_TOKENS


def iso_to_ms(value: str) -> int | None:
    """Parse an ISO-8601 timestamp to ms since the epoch (UTC when no offset); None if invalid."""
    if not _ISO_DATE.match(value):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        # A server has no meaningful local time zone: a naive timestamp is read as UTC.
        parsed = parsed.replace(tzinfo=UTC)
    return (parsed - _EPOCH) // timedelta(milliseconds=1)


def since_number(value: Any) -> int | None:
    """Return a numeric ``since`` as whole ms (rounded up, keeping ``>=``), else None; a number
    past the last timestamp either way is none."""
    if is_number(value) and is_finite(value) and abs(value) <= SINCE_MS_MAX:
        return math.ceil(value)
    return None


def is_since_valid(value: Any) -> bool:
    """Tell whether ``since`` is a keyword, an ISO-8601 string or a number of ms."""
    if isinstance(value, str):
        return value in SINCE_KEYWORDS or iso_to_ms(value) is not None
    return since_number(value) is not None


# --- JSON numbers -----------------------------------------------------------------------------


def is_number(value: Any) -> TypeGuard[int | float]:
    # bool is an int subclass in Python, but true is not a number in JSON.
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_positive_integer(value: Any) -> bool:
    # JSON has one number type: 2.0 is the integer 2, as it is in JavaScript.
    return is_number(value) and is_finite(value) and value == int(value) and value > 0


def is_finite(value: float) -> bool:
    # math.isfinite converts to float, which overflows for the huge integers JSON allows.
    return isinstance(value, int) or math.isfinite(value)
