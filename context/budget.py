"""Budget selection and the max-chars guard (SPEC §3.3, §3.4, §3.6): pure functions over packs."""

from __future__ import annotations

import math
from collections.abc import Sequence
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
class BudgetResult:
    """The assembled prompt, one decision per pack in order, the budget and the guard record."""

    context: str
    decisions: tuple[PackDecision, ...]
    budget: Budget
    truncation: Truncation


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

    remaining = max_tokens
    over_budget = 0
    visit = sorted(range(len(ordered_packs)), key=lambda i: (PRIORITY_RANK[priorities[i]], i))
    for i in visit:
        pack = ordered_packs[i]
        choice = _choose_variant(pack, required=decisions[i].required, remaining=remaining)
        if choice == "empty" or choice == "budget":
            decisions[i] = replace(decisions[i], reason=choice)
            continue
        text = pack.full if choice == "full" else pack.compact or ""
        tokens = estimate_tokens(text)
        texts[i] = text
        decisions[i] = _included(decisions[i], choice, text)
        if remaining is not None:
            remaining -= tokens
            if remaining < 0:
                over_budget += -remaining
                remaining = 0

    before_chars = sum(len(text) for text in texts)
    if before_chars > max_chars:
        _guard(ordered_packs, priorities, texts, decisions, max_chars=max_chars)
    context = "".join(texts)
    return BudgetResult(
        context=context,
        decisions=tuple(decisions),
        budget=Budget(
            max_tokens=max_tokens,
            remaining_tokens=remaining,
            over_budget_tokens=over_budget,
            final_tokens=estimate_tokens(context),
        ),
        truncation=Truncation(
            applied=before_chars > max_chars, before_chars=before_chars, after_chars=len(context)
        ),
    )


def _fits(tokens: int, remaining: int | None) -> bool:
    return remaining is None or tokens <= remaining


def _choose_variant(
    pack: Pack, *, required: bool, remaining: int | None
) -> Variant | Literal["empty", "budget"]:
    compact = pack.compact or ""
    if not pack.full and not compact:
        return "empty"
    full_tokens = estimate_tokens(pack.full)
    compact_tokens = estimate_tokens(compact)
    if required:
        # A required pack with no full text falls back to its compact text whatever its size,
        # as the reference does: a required pack is never silently empty.
        if not pack.full:
            return "compact"
        if (
            compact
            and not _fits(full_tokens, remaining)
            and (_fits(compact_tokens, remaining) or compact_tokens < full_tokens)
        ):
            return "compact"
        return "full"
    if _fits(full_tokens, remaining):
        return "full"
    if compact and _fits(compact_tokens, remaining):
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
