"""A build's numbers, derived once from its recorded decisions (SPEC §3.6).

A build has one size: ``total.estimatedTokens`` (= ``budget.finalTokens``), the estimate of the
whole prompt, ``ceil(chars / 4)``. The budget walk (SPEC §3.3) estimates each pack on its own and
each estimate rounds up, so the packs' own estimates add up to a few tokens more than the prompt
(602 against 601), the walk's ``remainingTokens`` is a few tokens lower than what the total leaves
(48 against 49) and its ``overBudgetTokens`` a few tokens higher (142 against 140).

Every page shows the figures computed here instead, on the total's scale: walking the packs in
the walk's own order, a pack *adds* to the prompt the difference between the estimate of the
prompt with it and without it, so the included packs' tokens add up to the total exactly, the
tokens left before a pack are the budget minus the estimate of what was taken before it, and the
packs' parts past the budget add up to the build's "over budget". A pack left out is not in the
prompt: its tokens are its own estimate, as the walk weighed it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from context.budget import PRIORITY_RANK, PackDecision


@dataclass(frozen=True, slots=True)
class PackNumbers:
    """One pack's figures on the build's scale."""

    # What the pack adds to the prompt's estimate (included), or its own estimate (left out).
    tokens: int
    # The budget minus the estimate of what the walk had taken before it; None without a budget.
    left_before: int | None
    # The part of ``tokens`` past the budget.
    over: int


@dataclass(frozen=True, slots=True)
class BuildNumbers:
    """A build's one total, its budget, what is left or over, and every pack's share."""

    tokens: int
    budget: int | None
    packs: dict[str, PackNumbers]

    @property
    def over(self) -> int:
        return max(0, self.tokens - self.budget) if self.budget is not None else 0

    @property
    def left(self) -> int:
        return max(0, self.budget - self.tokens) if self.budget is not None else 0


def _estimate(chars: int) -> int:
    return math.ceil(chars / 4) if chars > 0 else 0


def build_numbers(
    decisions: Sequence[PackDecision], *, max_tokens: int | None, total_tokens: int | None = None
) -> BuildNumbers:
    """The figures of one build from its decisions; ``total_tokens`` is its recorded total.

    Without ``total_tokens`` the total is the estimate of the included packs' chars (the prompt
    is those packs concatenated, with no separator, SPEC §3.2). A recorded total that differs
    (a build imported as it was) is kept: the running estimate is capped at it and the last
    included pack absorbs the difference, so the rows still add up to the total shown.
    """
    budget = max_tokens if max_tokens is not None and max_tokens > 0 else None
    ordered = sorted(decisions, key=lambda d: d.order)
    walk = sorted(range(len(ordered)), key=lambda i: (PRIORITY_RANK.get(ordered[i].priority, 2), i))
    included = [i for i in walk if ordered[i].status == "included"]
    if total_tokens is None:
        total_tokens = _estimate(sum(ordered[i].chars for i in included))
    last = included[-1] if included else None
    packs: dict[str, PackNumbers] = {}
    chars = 0
    taken = 0
    for i in walk:
        decision = ordered[i]
        left = max(0, budget - taken) if budget is not None else None
        if decision.status != "included":
            packs[decision.id] = PackNumbers(decision.estimated_tokens, left, 0)
            continue
        chars += decision.chars
        running = total_tokens if i == last else min(total_tokens, _estimate(chars))
        running = max(running, taken)
        over = max(0, running - max(taken, budget)) if budget is not None else 0
        packs[decision.id] = PackNumbers(running - taken, left, over)
        taken = running
    return BuildNumbers(tokens=total_tokens, budget=budget, packs=packs)


def packs_on_the_total_scale(
    packs: Sequence[Mapping[str, Any]], *, max_tokens: int | None, total_tokens: int | None
) -> list[dict[str, Any]]:
    """A build's recorded pack decisions (SPEC §3.6 shape) with each included pack's
    ``estimatedTokens`` replaced by what it adds to the total, as every other row shows it
    (the build diff compares these)."""
    decisions = [PackDecision.from_dict(p, position=i) for i, p in enumerate(packs)]
    numbers = build_numbers(decisions, max_tokens=max_tokens, total_tokens=total_tokens)
    shown = []
    for raw, decision in zip(packs, decisions, strict=True):
        pack = dict(raw)
        if decision.status == "included" and decision.id in numbers.packs:
            pack["estimatedTokens"] = numbers.packs[decision.id].tokens
        shown.append(pack)
    return shown
