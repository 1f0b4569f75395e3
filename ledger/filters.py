"""The one message filter (SPEC §1.3) that the API, the pages and the engine hand to selectors."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ledger.errors import InvalidInput
from ledger.validation import INT64_MAX, INT64_MIN, integer_problem, text_problem

DEFAULT_PAGE = 100
MAX_PAGE = 1000
# A search is a few words; past these bounds it is not a search any more.
MAX_SEARCH_TERMS = 16
MAX_TERM_CHARS = 64
# Letters and digits: what both full-text indexes (SQLite's unicode61, PostgreSQL's parser)
# treat as word characters. Everything else separates words, as it does in the indexed text.
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, slots=True)
class MessageFilter:
    """Which messages of one cluster a read wants; ``None`` means "no filter on this field".

    ``topic`` is one topic or several. ``since`` / ``until`` bound the timestamp inclusively,
    ``after`` is the tailing cursor (sequence >), ``up_to_sequence`` an as-of point (sequence
    <=). ``replayable_only`` keeps what may enter an agent's context (SPEC §1.5). ``q`` is a
    full-text search over ``content.text``: every word must match, by stem or prefix.
    """

    topic: str | tuple[str, ...] | None = None
    sender: str | None = None
    receiver: str | None = None
    since: int | None = None
    until: int | None = None
    after: int | None = None
    up_to_sequence: int | None = None
    replayable_only: bool = False
    q: str | None = None

    @property
    def is_empty(self) -> bool:
        return self == MessageFilter()

    @property
    def search_terms(self) -> tuple[str, ...]:
        """The words of ``q`` that the search matches; none means no search."""
        return search_terms(self.q or "")


def search_terms(q: str) -> tuple[str, ...]:
    """The words of a search, lower-cased, each once, in order: ``"Fix the CSV-export"`` gives
    ``("fix", "the", "csv", "export")``."""
    words = (word[:MAX_TERM_CHARS] for word in _WORD.findall(q.lower()))
    return tuple(dict.fromkeys(words))[:MAX_SEARCH_TERMS]


def filter_check(where: MessageFilter) -> None:
    """Refuse what no stored message can match and a database would choke on: strings with NUL
    or lone surrogates, numbers beyond 64 bits (``InvalidInput`` naming the field)."""
    topics = (where.topic,) if isinstance(where.topic, str) else (where.topic or ())
    strings: list[tuple[str, str | None]] = [("topic", t) for t in topics]
    strings += [("sender", where.sender), ("receiver", where.receiver), ("q", where.q)]
    for name, value in strings:
        if isinstance(value, str) and (problem := text_problem(value)) is not None:
            raise InvalidInput(f"{name} {problem}", details={"field": name})
    numbers = (
        ("since", where.since),
        ("until", where.until),
        ("after", where.after),
        ("up_to_sequence", where.up_to_sequence),
    )
    for name, number in numbers:
        if number is not None and (
            problem := integer_problem(number, minimum=INT64_MIN, maximum=INT64_MAX)
        ):
            raise InvalidInput(f"{name} {problem}", details={"field": name})
