"""Budget selection and the max-chars guard (SPEC §3.3, §3.4, §3.6): pure functions over packs."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

Status = Literal["included", "skipped"]
Variant = Literal["full", "compact"]
Reason = Literal["empty", "budget", "max_chars"]

PRIORITY_RANK: Final[dict[str, int]] = {"required": 0, "high": 1, "medium": 2, "low": 3}
DEFAULT_PRIORITY: Final = "medium"
DEFAULT_MAX_CHARS: Final = 500_000
TRUNCATION_MARKER: Final = "\n\n[Context truncated to fit limit]\n"


@dataclass(frozen=True)
class Pack:
    """One candidate piece of the prompt, with an optional smaller variant."""

    id: str
    section: str
    priority: str | None
    order: int
    full: str
    compact: str | None = None
    required: bool = False
    # Marks the triggering message: the guard truncates it last.
    preserve: bool = False


@dataclass(frozen=True)
class PackDecision:
    """What the engine did with one pack (SPEC §3.6)."""

    id: str
    section: str
    priority: str
    required: bool
    status: Status
    variant: Variant | None
    chars: int
    estimated_tokens: int
    order: int
    reason: Reason | None
    truncated: bool

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *, position: int = 0) -> PackDecision:
        """Read a decision back from its SPEC §3.6 shape (a stored build's metrics)."""
        priority = raw.get("priority")
        variant = raw.get("variant")
        reason = raw.get("reason")
        return cls(
            id=str(raw.get("id", "")),
            section=str(raw.get("section", "")),
            priority=priority if priority in PRIORITY_RANK else DEFAULT_PRIORITY,
            required=bool(raw.get("required")),
            status="included" if raw.get("status") == "included" else "skipped",
            variant=variant if variant in ("full", "compact") else None,
            chars=int(raw.get("chars") or 0),
            estimated_tokens=int(raw.get("estimatedTokens") or 0),
            order=int(raw.get("order", position)),
            reason=reason if reason in ("empty", "budget", "max_chars") else None,
            truncated=bool(raw.get("truncated")),
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the decision with the camelCase keys of SPEC §3.6."""
        return {
            "id": self.id,
            "section": self.section,
            "priority": self.priority,
            "required": self.required,
            "status": self.status,
            "variant": self.variant,
            "chars": self.chars,
            "estimatedTokens": self.estimated_tokens,
            "order": self.order,
            "reason": self.reason,
            "truncated": self.truncated,
        }


@dataclass(frozen=True)
class Budget:
    """Token accounting of one build; remaining_tokens is None when there is no budget."""

    max_tokens: int | None
    remaining_tokens: int | None
    over_budget_tokens: int
    final_tokens: int

    def to_dict(self) -> dict[str, Any]:
        """Return the budget with the camelCase keys of SPEC §3.6."""
        return {
            "maxTokens": self.max_tokens,
            "remainingTokens": self.remaining_tokens,
            "overBudgetTokens": self.over_budget_tokens,
            "finalTokens": self.final_tokens,
        }


@dataclass(frozen=True)
class Truncation:
    """Whether the max-chars guard had to act, and the prompt length before and after."""

    applied: bool
    before_chars: int
    after_chars: int

    def to_dict(self) -> dict[str, Any]:
        """Return the record with the camelCase keys of SPEC §6.2."""
        return {
            "applied": self.applied,
            "beforeChars": self.before_chars,
            "afterChars": self.after_chars,
        }


@dataclass(frozen=True)
class Visit:
    """What the budget walk (SPEC §3.3) had when it reached one pack: this explains the pack."""

    # Tokens left when the walk reached the pack; None without a budget.
    remaining_before: int | None
    # Whether every pack included before this one was required.
    only_required_before: bool


@dataclass(frozen=True)
class BudgetResult:
    """The assembled prompt, one decision per pack in order, the budget and the guard record.

    ``visits`` holds, per pack in order, what the budget walk had when it reached it.
    """

    context: str
    decisions: tuple[PackDecision, ...]
    budget: Budget
    truncation: Truncation
    visits: tuple[Visit, ...] = ()


def estimate_tokens(text: str) -> int:
    """Estimate tokens as ceil(code points / 4), 0 for empty text."""
    return math.ceil(len(text) / 4)


def normalise_priority(pack: Pack) -> str:
    """Return the effective priority: the required flag wins, unknown or missing is medium."""
    if pack.required:
        return "required"
    if pack.priority in PRIORITY_RANK:
        return pack.priority
    return DEFAULT_PRIORITY


def budget_select(
    packs: Sequence[Pack], *, max_tokens: int | None, max_chars: int = DEFAULT_MAX_CHARS
) -> BudgetResult:
    """Select pack variants within max_tokens, then cap the prompt at max_chars."""
    ordered_packs = sorted(packs, key=lambda pack: pack.order)
    priorities = [normalise_priority(pack) for pack in ordered_packs]
    texts: list[str] = [""] * len(ordered_packs)
    decisions: list[PackDecision] = [
        PackDecision(
            id=pack.id,
            section=pack.section,
            priority=priority,
            required=priority == "required",
            status="skipped",
            variant=None,
            chars=0,
            estimated_tokens=0,
            order=pack.order,
            reason=None,
            truncated=False,
        )
        for pack, priority in zip(ordered_packs, priorities, strict=True)
    ]

    def spend(i: int, remaining: int | None) -> int | None:
        pack = ordered_packs[i]
        choice = _choose_variant(pack, required=decisions[i].required, remaining=remaining)
        if choice == "empty" or choice == "budget":
            decisions[i] = replace(decisions[i], reason=choice)
            return None
        texts[i] = pack.full if choice == "full" else pack.compact or ""
        decisions[i] = _included(decisions[i], choice, texts[i])
        return estimate_tokens(texts[i])

    walk = budget_walk(priorities, max_tokens=max_tokens, spend=spend)

    before_chars = sum(len(text) for text in texts)
    if before_chars > max_chars:
        _guard(ordered_packs, priorities, texts, decisions, max_chars=max_chars)
    context = "".join(texts)
    return BudgetResult(
        context=context,
        decisions=tuple(decisions),
        budget=Budget(
            max_tokens=max_tokens,
            remaining_tokens=walk.remaining,
            over_budget_tokens=walk.over_budget,
            final_tokens=estimate_tokens(context),
        ),
        truncation=Truncation(
            applied=before_chars > max_chars, before_chars=before_chars, after_chars=len(context)
        ),
        visits=walk.visits,
    )


@dataclass(frozen=True)
class Walk:
    """The budget walk's account: a visit per pack in order, what is left, what went over."""

    visits: tuple[Visit, ...]
    remaining: int | None
    over_budget: int


def budget_walk(
    priorities: Sequence[str],
    *,
    max_tokens: int | None,
    spend: Callable[[int, int | None], int | None],
) -> Walk:
    """Visit packs by priority rank, then order, keeping the token account (SPEC §3.3).

    ``priorities`` are the normalised priorities of the packs in order. ``spend(i, remaining)``
    decides pack ``i`` and returns the tokens it takes, or None when it is skipped. The one walk
    behind both the selection (``budget_select``) and its explanation (``budget_replay``).
    """
    visits: list[Visit | None] = [None] * len(priorities)
    remaining = max_tokens
    over_budget = 0
    only_required = True
    for i in sorted(range(len(priorities)), key=lambda i: (PRIORITY_RANK[priorities[i]], i)):
        visits[i] = Visit(remaining_before=remaining, only_required_before=only_required)
        tokens = spend(i, remaining)
        if tokens is None:
            continue
        only_required = only_required and priorities[i] == "required"
        if remaining is not None:
            remaining -= tokens
            if remaining < 0:
                over_budget += -remaining
                remaining = 0
    return Walk(
        visits=tuple(v for v in visits if v is not None),
        remaining=remaining,
        over_budget=over_budget,
    )


def budget_replay(
    decisions: Sequence[PackDecision],
    *,
    max_tokens: int | None,
    sizes: Mapping[str, tuple[int, int | None]] | None = None,
) -> tuple[Visit, ...]:
    """The visits of the walk that made recorded ``decisions`` (one per pack, in order).

    ``sizes`` maps a pack id to the tokens of its full and compact variants. With them the
    replay equals the original walk exactly, the guard's work included; without them (a stored
    build keeps only final sizes) a pack that the guard changed counts with its final tokens.
    """
    sizes = sizes or {}

    def spend(i: int, remaining: int | None) -> int | None:
        decision = decisions[i]
        full, compact = sizes.get(decision.id, (None, None))
        if decision.reason == "max_chars" and full is not None:
            # The guard changed this pack after the walk: with its sizes, choose again.
            choice = _choose(full, compact or 0, required=decision.required, remaining=remaining)
            return full if choice == "full" else compact
        variant = _walk_variant(decision)
        if variant is None:
            return None
        known = full if variant == "full" else compact
        return known if known is not None else decision.estimated_tokens

    return budget_walk([d.priority for d in decisions], max_tokens=max_tokens, spend=spend).visits


def _walk_variant(decision: PackDecision) -> Variant | None:
    """The variant the budget walk chose for a pack, before the max-chars guard acted."""
    if decision.reason == "max_chars" and not decision.truncated:
        # The guard swaps full packs to compact, and a pack it drops keeps its variant.
        return "full" if decision.status == "included" else decision.variant
    return decision.variant if decision.status == "included" else None


def _fits(tokens: int, remaining: int | None) -> bool:
    return remaining is None or tokens <= remaining


def _choose_variant(
    pack: Pack, *, required: bool, remaining: int | None
) -> Variant | Literal["empty", "budget"]:
    return _choose(
        estimate_tokens(pack.full),
        estimate_tokens(pack.compact or ""),
        required=required,
        remaining=remaining,
    )


def _choose(
    full_tokens: int, compact_tokens: int, *, required: bool, remaining: int | None
) -> Variant | Literal["empty", "budget"]:
    """The walk's choice for one pack from its variants' tokens (0 tokens: an empty text)."""
    if not full_tokens and not compact_tokens:
        return "empty"
    if required:
        # A required pack with no full text falls back to its compact text whatever its size,
        # as the reference does: a required pack is never silently empty.
        if not full_tokens:
            return "compact"
        if (
            compact_tokens
            and not _fits(full_tokens, remaining)
            and (_fits(compact_tokens, remaining) or compact_tokens < full_tokens)
        ):
            return "compact"
        return "full"
    if _fits(full_tokens, remaining):
        return "full"
    if compact_tokens and _fits(compact_tokens, remaining):
        return "compact"
    return "budget"


def _included(decision: PackDecision, variant: Variant, text: str) -> PackDecision:
    return replace(
        decision,
        status="included",
        variant=variant,
        chars=len(text),
        estimated_tokens=estimate_tokens(text),
    )


def _guard(
    packs: list[Pack],
    priorities: list[str],
    texts: list[str],
    decisions: list[PackDecision],
    *,
    max_chars: int,
) -> None:
    """Shrink texts and decisions in place until their total length is at most max_chars."""
    total = sum(len(text) for text in texts)
    optional = sorted(
        (i for i, d in enumerate(decisions) if d.status == "included" and not d.required),
        key=lambda i: (-PRIORITY_RANK[priorities[i]], -i),
    )
    for i in optional:
        if total <= max_chars:
            return
        compact = packs[i].compact
        if decisions[i].variant == "full" and compact and len(compact) < len(texts[i]):
            total += len(compact) - len(texts[i])
            texts[i] = compact
            decisions[i] = replace(_included(decisions[i], "compact", compact), reason="max_chars")
    for i in optional:
        if total <= max_chars:
            return
        total -= len(texts[i])
        texts[i] = ""
        decisions[i] = replace(
            decisions[i], status="skipped", chars=0, estimated_tokens=0, reason="max_chars"
        )
    # The triggering message goes last: it is the one thing the agent must act on.
    required = sorted(
        (i for i, d in enumerate(decisions) if d.status == "included" and d.required),
        key=lambda i: (packs[i].preserve, -len(texts[i]), -i),
    )
    for i in required:
        if total <= max_chars:
            return
        target = max(0, len(texts[i]) - (total - max_chars))
        if target > len(TRUNCATION_MARKER):
            cut = texts[i][: target - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER
        else:
            cut = texts[i][:target]
        total += len(cut) - len(texts[i])
        texts[i] = cut
        decisions[i] = replace(
            decisions[i],
            chars=len(cut),
            estimated_tokens=estimate_tokens(cut),
            reason="max_chars",
            truncated=True,
        )
