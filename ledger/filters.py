"""The one message filter (SPEC §1.3) that the API, the pages and the engine hand to selectors."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
