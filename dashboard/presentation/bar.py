"""The budget bar: the included packs laid out in percent of the bar's width."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dashboard.presentation.decisions import DecisionRow
from dashboard.presentation.labels import PRIORITY_LABELS, tokens_text


@dataclass(frozen=True, slots=True)
class Segment:
    """One drawn piece of the bar, in percent of the bar's width."""

    id: str
    priority: str
    look: str  # full | compact | truncated
    x: float
    width: float
    over: bool
    tokens: int
    title: str

    @property
    def label(self) -> str:
        return PRIORITY_LABELS.get(self.priority, "")

    @property
    def end(self) -> float:
        return self.x + self.width

    @property
    def x_attr(self) -> str:
        return f"{self.x:.4f}%"

    @property
    def width_attr(self) -> str:
        return f"{self.width:.4f}%"

    @property
    def end_attr(self) -> str:
        return f"{self.end:.4f}%"


@dataclass(frozen=True, slots=True)
class Bar:
    """The budget as one horizontal bar: segments, the quiet remainder and the 100% tick."""

    segments: tuple[Segment, ...]
    remainder_x: float
    remainder_width: float
    tick: float | None  # where 100% of the budget is, in percent of the width
    max_tokens: int | None
    used_tokens: int
    over_tokens: int
    skipped: tuple[DecisionRow, ...]  # left out by the budget or the guard: the "left out" strip
    empty: tuple[DecisionRow, ...]  # nothing to include (a source no message matched)

    @property
    def remainder_x_attr(self) -> str:
        return f"{self.remainder_x:.4f}%"

    @property
    def remainder_width_attr(self) -> str:
        return f"{self.remainder_width:.4f}%"

    @property
    def tick_attr(self) -> str:
        return f"{self.tick or 0:.4f}%"

    @property
    def left_tokens(self) -> int:
        if self.max_tokens is None:
            return 0
        return max(0, self.max_tokens - self.used_tokens)

    @property
    def tick_low(self) -> bool:
        """Whether the 100% tick sits so far left that its label must go to its right."""
        return self.tick is not None and self.tick < 20

    @property
    def used_percent(self) -> int:
        if not self.max_tokens:
            return 0
        return round(100 * self.used_tokens / self.max_tokens)


def _segment_title(row: DecisionRow) -> str:
    return f"{row.id} · {row.label} · {tokens_text(row.tokens)} · {row.sentence}"


def bar_geometry(
    rows: Sequence[DecisionRow], *, max_tokens: int | None, total_tokens: int | None = None
) -> Bar:
    """Lay the included packs out in prompt order on a scale of max(budget, what was used).

    ``total_tokens`` is the build's one total (SPEC §3.6 ``finalTokens``, the whole prompt's
    estimate). Rows from ``decision_rows(..., total_tokens=...)`` already add up to it
    (``numbers.build_numbers``); rows that do not (packs' own estimates round up one by one)
    are drawn in proportion inside the total, so the bar, its caption and the over-budget part
    always use the total. Segment widths plus the remainder add up to 100;
    whatever lies beyond the budget is split off into vermilion ``over`` segments.
    """
    included = [r for r in rows if r.included]
    packs_sum = sum(r.tokens for r in included)
    used = packs_sum if total_tokens is None else total_tokens
    share = used / packs_sum if packs_sum else 0.0
    scale = max(max_tokens or 0, used)
    segments: list[Segment] = []
    position = 0.0
    for row in included:
        if scale == 0 or row.tokens == 0:
            continue
        look = row.status_word
        title = _segment_title(row)
        start, end = position, position + row.tokens * share
        position = end
        limit = float(max_tokens) if max_tokens is not None else end
        pieces = [(start, min(end, limit), False), (max(start, limit), end, True)]
        for low, high, over in pieces:
            if high > low:
                segments.append(
                    Segment(
                        id=row.id,
                        priority=row.priority,
                        look=look,
                        x=100 * low / scale,
                        width=100 * (high - low) / scale,
                        over=over,
                        tokens=row.tokens,
                        title=title,
                    )
                )
    filled = 100 * used / scale if scale else 0.0
    return Bar(
        segments=tuple(segments),
        remainder_x=filled,
        remainder_width=100 - filled if scale else 0.0,
        tick=100 * max_tokens / scale if max_tokens and scale else None,
        max_tokens=max_tokens,
        used_tokens=used,
        over_tokens=max(0, used - max_tokens) if max_tokens is not None else 0,
        skipped=tuple(r for r in rows if not r.included and r.reason != "empty"),
        empty=tuple(r for r in rows if not r.included and r.reason == "empty"),
    )
