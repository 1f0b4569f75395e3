"""The one message filter (SPEC §1.3) that the API, the pages and the engine hand to selectors."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PAGE = 100
MAX_PAGE = 1000


@dataclass(frozen=True, slots=True)
class MessageFilter:
    """Which messages of one cluster a read wants; ``None`` means "no filter on this field".

    ``topic`` is one topic or several. ``since`` / ``until`` bound the timestamp inclusively,
    ``after`` is the tailing cursor (sequence >), ``up_to_sequence`` an as-of point (sequence
    <=). ``replayable_only`` keeps what may enter an agent's context (SPEC §1.5).
    """

    topic: str | tuple[str, ...] | None = None
    sender: str | None = None
    receiver: str | None = None
    since: int | None = None
    until: int | None = None
    after: int | None = None
    up_to_sequence: int | None = None
    replayable_only: bool = False

    @property
    def is_empty(self) -> bool:
        return self == MessageFilter()
