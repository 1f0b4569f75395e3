"""What the inspector and the build diff show, computed from plain data (no ORM, no request).

The views hand these functions a build's decisions in the SPEC §6.2 shape (``metrics["packs"]``)
and get back rows and geometry that a template only has to print: the budget bar in percent of
its width, a reason in words for every decision, and what changed between two builds.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from context.budget import PRIORITY_RANK
from context.packs import iso_ms

PRIORITY_LABELS: Final[dict[str, str]] = {
    "required": "REQ",
    "high": "HIGH",
    "medium": "MED",
    "low": "LOW",
}


def tokens_text(value: int) -> str:
    """``1200`` → ``1,200 tokens`` (``1 token``)."""
    return f"{value:,} token" + ("" if value == 1 else "s")


def time_text(ms: int) -> str:
    """The server-side fallback of a ``<time data-ms>``: ``2026-02-02 09:17:55 UTC``."""
    try:
        iso = iso_ms(ms)
    except ValueError:
        return str(ms)
    return f"{iso[:10]} {iso[11:19]} UTC"


# --- decisions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DecisionRow:
    """One pack decision with its reason in words."""

    id: str
    section: str
    priority: str
    required: bool
    status: str
    variant: str | None
    chars: int
    tokens: int
    order: int
    reason: str | None
    truncated: bool
    # Tokens the budget selection had left when it reached this pack; None without a budget.
    left_before: int | None
    full_tokens: int | None
    compact_tokens: int | None
    sentence: str

    @property
    def label(self) -> str:
        return PRIORITY_LABELS.get(self.priority, self.priority.upper())

    @property
    def included(self) -> bool:
        return self.status == "included"

    @property
    def status_word(self) -> str:
        """``full`` / ``compact`` / ``truncated`` / ``skipped``: the bar's four looks."""
        if not self.included:
            return "skipped"
        if self.truncated:
            return "truncated"
        return self.variant or "full"


def _priority(raw: Any) -> str:
    return raw if raw in PRIORITY_RANK else "medium"


def _budget_variant(decision: Mapping[str, Any]) -> str | None:
    """The variant the budget selection chose, before the max-chars guard acted."""
    if decision.get("reason") == "max_chars" and not decision.get("truncated"):
        # The guard swaps full packs to compact, and a pack it drops keeps its variant.
        return "full" if decision.get("status") == "included" else decision.get("variant")
    return decision.get("variant") if decision.get("status") == "included" else None


def decision_rows(
    decisions: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int | None,
    sizes: Mapping[str, tuple[int, int | None]] | None = None,
    max_chars: int | None = None,
) -> list[DecisionRow]:
    """Explain each decision, in prompt order.

    ``sizes`` maps a pack id to the tokens of its full and compact variants when the packs are
    at hand (a preview); without it the sentences name only what the decisions record.
    ``max_chars`` is the guard's cap when known (a recorded build does not store it).
    """
    sizes = sizes or {}
    ordered = sorted(decisions, key=lambda d: int(d.get("order", 0)))
    # Replay the visit order of SPEC §3.3 to know what was left when each pack was reached.
    visit = sorted(
        range(len(ordered)),
        key=lambda i: (PRIORITY_RANK[_priority(ordered[i].get("priority"))], i),
    )
    left_before: dict[int, int | None] = {}
    only_required_before: dict[int, bool] = {}
    remaining = max_tokens
    all_required = True
    for i in visit:
        decision = ordered[i]
        left_before[i] = remaining
        only_required_before[i] = all_required
        variant = _budget_variant(decision)
        if variant is not None:
            all_required = all_required and _priority(decision.get("priority")) == "required"
        if variant is None or remaining is None:
            continue
        full, compact = sizes.get(str(decision.get("id")), (None, None))
        known = full if variant == "full" else compact
        spent = known if known is not None else int(decision.get("estimatedTokens", 0))
        remaining = max(0, remaining - spent)

    rows = []
    for i, decision in enumerate(ordered):
        full, compact = sizes.get(str(decision.get("id")), (None, None))
        row = DecisionRow(
            id=str(decision.get("id", "")),
            section=str(decision.get("section", "")),
            priority=_priority(decision.get("priority")),
            required=bool(decision.get("required")),
            status=str(decision.get("status", "skipped")),
            variant=decision.get("variant"),
            chars=int(decision.get("chars", 0)),
            tokens=int(decision.get("estimatedTokens", 0)),
            order=int(decision.get("order", i)),
            reason=decision.get("reason"),
            truncated=bool(decision.get("truncated")),
            left_before=left_before[i],
            full_tokens=full,
            compact_tokens=compact or None,
            sentence="",
        )
        sentence = reason_sentence(
            row, max_chars=max_chars, after_required_only=only_required_before[i]
        )
        rows.append(replace(row, sentence=sentence))
    return rows


def reason_sentence(row: DecisionRow, *, max_chars: int | None, after_required_only: bool) -> str:
    """Why the engine did what it did with one pack, in words."""
    guard = f"the {max_chars:,}-char guard" if max_chars else "the max-chars guard"
    left = row.left_before
    after = (
        ""
        if row.required
        else (" after required packs" if after_required_only else " after higher-ranked packs")
    )
    left_text = f"the {tokens_text(left)} left{after}" if left is not None else "the budget"
    if left == 0:
        left_text = f"the budget: nothing was left{after}"
    if not row.included:
        if row.reason == "empty":
            if row.section == "sources":
                return "skipped — no messages matched this source"
            return "skipped — empty"
        if row.reason == "max_chars":
            return f"skipped — dropped by {guard} to keep the prompt short enough"
        if row.full_tokens is not None and row.compact_tokens:
            return (
                f"skipped — neither full ({tokens_text(row.full_tokens)}) nor compact "
                f"({tokens_text(row.compact_tokens)}) fit in {left_text}"
            )
        if row.full_tokens is not None:
            return f"skipped — {tokens_text(row.full_tokens)} did not fit in {left_text}"
        return f"skipped — did not fit in {left_text}"
    if row.truncated:
        return f"truncated — cut by {guard} to {row.chars:,} chars"
    if row.variant == "compact":
        if row.reason == "max_chars":
            return f"compact — swapped to compact by {guard}"
        full = f"full ({tokens_text(row.full_tokens)})" if row.full_tokens is not None else "full"
        if row.required:
            return f"compact — required; {full} did not fit in {left_text}, compact used"
        return f"compact — {full} did not fit in {left_text}; compact used"
    if left is None:
        return "full — no token budget"
    if row.required:
        if row.tokens > left:
            return f"full — required, kept past the budget: +{row.tokens - left:,} over"
        return "full — required, always included"
    return f"full — fits in {left_text}"


# --- the budget bar -----------------------------------------------------------------------------


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


def bar_geometry(rows: Sequence[DecisionRow], *, max_tokens: int | None) -> Bar:
    """Lay the included packs out in prompt order on a scale of max(budget, what was used).

    Segment widths plus the remainder always add up to 100; whatever lies beyond the budget
    is split off into vermilion ``over`` segments to the right of the tick.
    """
    included = [r for r in rows if r.included]
    used = sum(r.tokens for r in included)
    scale = max(max_tokens or 0, used)
    segments: list[Segment] = []
    position = 0
    for row in included:
        if scale == 0 or row.tokens == 0:
            continue
        look = row.status_word
        title = _segment_title(row)
        start, end = position, position + row.tokens
        position = end
        limit = max_tokens if max_tokens is not None else end
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


# --- comparing two builds -----------------------------------------------------------------------

ChangeKind = Literal["added", "dropped", "changed", "unchanged"]


@dataclass(frozen=True, slots=True)
class PackChange:
    """How one pack differs between build A and build B."""

    id: str
    kind: ChangeKind
    before: str  # e.g. "full · 1,200 tokens", "skipped", "absent"
    after: str
    notes: tuple[str, ...]


_REASON_WORDS: Final[dict[Any, str]] = {
    "empty": "empty",
    "budget": "did not fit",
    "max_chars": "char guard",
}


def _state(decision: Mapping[str, Any] | None) -> str:
    if decision is None:
        return "absent"
    if decision.get("status") != "included":
        return f"skipped ({_REASON_WORDS.get(decision.get('reason'), 'unknown reason')})"
    look = "truncated" if decision.get("truncated") else decision.get("variant") or "full"
    return f"{look} · {tokens_text(int(decision.get('estimatedTokens', 0)))}"


def pack_diff(
    a: Sequence[Mapping[str, Any]],
    a_texts: Mapping[str, str],
    b: Sequence[Mapping[str, Any]],
    b_texts: Mapping[str, str],
) -> list[PackChange]:
    """Classify every pack of two builds: added, dropped, changed or unchanged (B's order)."""
    before = {str(d.get("id")): d for d in a}
    after = {str(d.get("id")): d for d in b}
    ids = [str(d.get("id")) for d in sorted(b, key=lambda d: int(d.get("order", 0)))]
    ids += [i for i in (str(d.get("id")) for d in a) if i not in after]
    changes = []
    for pack_id in ids:
        old, new = before.get(pack_id), after.get(pack_id)
        was_in = old is not None and old.get("status") == "included"
        is_in = new is not None and new.get("status") == "included"
        notes: list[str] = []
        kind: ChangeKind
        if is_in and not was_in:
            kind = "added"
        elif was_in and not is_in:
            kind = "dropped"
        elif not is_in or old is None or new is None:
            kind = "unchanged"
        else:
            if (old.get("variant"), bool(old.get("truncated"))) != (
                new.get("variant"),
                bool(new.get("truncated")),
            ):
                notes.append(f"{_state(old).split(' · ')[0]} → {_state(new).split(' · ')[0]}")
            old_tokens, new_tokens = (
                int(old.get("estimatedTokens", 0)),
                int(new.get("estimatedTokens", 0)),
            )
            if old_tokens != new_tokens:
                notes.append(
                    f"{old_tokens:,} → {new_tokens:,} tokens ({new_tokens - old_tokens:+,})"
                )
            if a_texts.get(pack_id) != b_texts.get(pack_id):
                notes.append("text changed")
            kind = "changed" if notes else "unchanged"
        changes.append(
            PackChange(
                id=pack_id, kind=kind, before=_state(old), after=_state(new), notes=tuple(notes)
            )
        )
    return changes


@dataclass(frozen=True, slots=True)
class DiffLine:
    """One line of a unified diff; ``kind`` is add, del, hunk, file or ctx."""

    kind: str
    text: str


def prompt_diff(a: str, b: str, *, a_name: str = "a", b_name: str = "b") -> list[DiffLine]:
    """The unified diff of two prompts, each line classified (its ``+``/``-`` prefix kept)."""
    lines = []
    for line in difflib.unified_diff(
        a.splitlines(), b.splitlines(), fromfile=a_name, tofile=b_name, lineterm=""
    ):
        if line.startswith(("---", "+++")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        lines.append(DiffLine(kind=kind, text=line))
    return lines
