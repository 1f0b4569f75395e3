"""A build's pack decisions as rows, each with the reason for it in words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from context.budget import PackDecision, Visit, budget_replay
from context.guidance import GUIDANCE_PACK
from dashboard.presentation.labels import PRIORITY_LABELS, tokens_text
from dashboard.presentation.numbers import build_numbers


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
    # What the pack adds to the build's one total (``numbers.build_numbers``): the included
    # rows add up to the total they sit beside. A left-out pack shows its own estimate.
    tokens: int
    order: int
    reason: str | None
    truncated: bool
    # The budget minus the estimate of what was taken before this pack (the figure the bar's
    # "N left" uses); None without a budget.
    left_before: int | None
    full_tokens: int | None
    compact_tokens: int | None
    sentence: str
    # The triggering message passes this source's filters (so the source leaves it out).
    holds_trigger: bool = False
    # The part of ``tokens`` past the budget: the rows' parts add up to the build's "over".
    over: int = 0
    # The pack's own estimate, and what the budget walk had left counting each pack's own
    # estimate (SPEC §3.3): named only where the walk's rounding decided a pack.
    own_tokens: int = 0
    walk_left_before: int | None = None

    @property
    def label(self) -> str:
        return PRIORITY_LABELS.get(self.priority, self.priority.upper())

    @property
    def section_differs(self) -> bool:
        """Whether the section says more than the pack id (``sources`` does; ``header`` not)."""
        return self.section != self.id

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


def decision_rows(
    decisions: Sequence[PackDecision],
    *,
    max_tokens: int | None,
    sizes: Mapping[str, tuple[int, int | None]] | None = None,
    max_chars: int | None = None,
    visits: Sequence[Visit] | None = None,
    trigger_sources: frozenset[str] = frozenset(),
    trigger_label: str = "",
    total_tokens: int | None = None,
) -> list[DecisionRow]:
    """Explain each decision, in prompt order.

    ``visits`` are the budget walk's own account of a build just made (``BudgetResult.visits``);
    for a recorded build they are replayed by the same walk (``budget_replay``). ``sizes`` maps
    a pack id to the tokens of its full and compact variants when the packs are at hand (a
    preview); without it the sentences name only what the decisions record. ``max_chars`` is
    the guard's cap when known (a recorded build does not store it). ``trigger_sources`` are
    the sources the triggering message (``trigger_label``, e.g. ``ISSUE_OPENED #1``) would
    have matched, as a build just made knows them (``BuildOutcome.trigger_sources``).
    ``total_tokens`` is the build's recorded total (``total.estimatedTokens``): every token
    figure of the rows is on its scale (``numbers.build_numbers``).
    """
    sizes = sizes or {}
    ordered = sorted(decisions, key=lambda d: d.order)
    if visits is None:
        visits = budget_replay(ordered, max_tokens=max_tokens, sizes=sizes)
    numbers = build_numbers(ordered, max_tokens=max_tokens, total_tokens=total_tokens)
    rows = []
    for decision, visit in zip(ordered, visits, strict=True):
        full, compact = sizes.get(decision.id, (None, None))
        figures = numbers.packs[decision.id]
        row = DecisionRow(
            id=decision.id,
            section=decision.section,
            priority=decision.priority,
            required=decision.required,
            status=decision.status,
            variant=decision.variant,
            chars=decision.chars,
            tokens=figures.tokens,
            order=decision.order,
            reason=decision.reason,
            truncated=decision.truncated,
            left_before=figures.left_before if visit.remaining_before is not None else None,
            full_tokens=full,
            compact_tokens=compact or None,
            sentence="",
            holds_trigger=decision.id in trigger_sources,
            over=figures.over,
            own_tokens=decision.estimated_tokens,
            walk_left_before=visit.remaining_before,
        )
        sentence = reason_sentence(
            row,
            max_chars=max_chars,
            after_required_only=visit.only_required_before,
            trigger_label=trigger_label,
        )
        rows.append(replace(row, sentence=sentence))
    return rows


def _left_words(left: int | None, after: str) -> str:
    if left is None:
        return "the budget"
    if left == 0:
        return f"the budget: nothing was left{after}"
    return f"the {tokens_text(left)} left{after}"


def _did_not_fit_in(row: DecisionRow, needed: int | None, after: str) -> str:
    """What a pack did not fit in, named on the build's scale unless that would contradict it.

    The walk counts each pack's estimate rounded up on its own, so it can have had a token or
    two less than the total leaves: when the pack would fit in what the total leaves (or its
    size is not recorded), the sentence names the walk's own figure and says why it differs.
    """
    left, walk = row.left_before, row.walk_left_before
    if left is None or walk is None or walk == left or (needed is not None and needed > left):
        return _left_words(left, after)
    return (
        f"{_left_words(walk, after)} (the budget counts each pack's estimate rounded up on its "
        f"own; the prompt's total leaves {tokens_text(left)})"
    )


def reason_sentence(
    row: DecisionRow, *, max_chars: int | None, after_required_only: bool, trigger_label: str = ""
) -> str:
    """Why the engine did what it did with one pack, in words, on the build's scale."""
    guard = f"the {max_chars:,}-char guard" if max_chars else "the max-chars guard"
    left = row.left_before
    after = (
        ""
        if row.required
        else (" after required packs" if after_required_only else " after higher-ranked packs")
    )
    left_text = _left_words(left, after)
    if not row.included:
        if row.reason == "empty":
            if row.section == "sources" and row.holds_trigger:
                what = f"the triggering message {trigger_label}".rstrip()
                return (
                    f"skipped — its only match is {what}, which the prompt carries once, "
                    "in triggeringMessage"
                )
            if row.section == "sources":
                return "skipped — no messages matched this source"
            return "skipped — empty"
        if row.reason == "max_chars":
            return f"skipped — dropped by {guard} to keep the prompt short enough"
        smallest = (
            min(t for t in (row.full_tokens, row.compact_tokens) if t) if row.full_tokens else None
        )
        fit_in = _did_not_fit_in(row, smallest, after)
        if row.full_tokens is not None and row.compact_tokens:
            return (
                f"skipped — neither full ({tokens_text(row.full_tokens)}) nor compact "
                f"({tokens_text(row.compact_tokens)}) fit in {fit_in}"
            )
        if row.full_tokens is not None:
            return f"skipped — {tokens_text(row.full_tokens)} did not fit in {fit_in}"
        return f"skipped — did not fit in {fit_in}"
    if row.truncated:
        return f"truncated — cut by {guard} to {row.chars:,} chars"
    if row.variant == "compact":
        if row.reason == "max_chars":
            return f"compact — swapped to compact by {guard}"
        full = f"full ({tokens_text(row.full_tokens)})" if row.full_tokens is not None else "full"
        fit_in = _did_not_fit_in(row, row.full_tokens, after)
        if row.required:
            return f"compact — required; {full} did not fit in {fit_in}, compact used"
        return f"compact — {full} did not fit in {fit_in}; compact used"
    over = f": +{row.over:,} over" if row.over else ""
    if row.section == GUIDANCE_PACK:
        # SPEC §7.8: the operator's queued guidance, carried by one prompt of the agent's only.
        kept = f"; kept past the budget{over}" if row.over else ""
        return f"full — required: guidance queued for this agent, given once{kept}"
    if left is None:
        return "full — no token budget"
    if row.required:
        if row.over:
            return f"full — required, kept past the budget{over}"
        return "full — required, always included"
    return f"full — fits in {left_text}"
