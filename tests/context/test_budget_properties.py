"""Property tests of budget selection and the guard over random packs, budgets and caps."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from context.budget import (
    BudgetResult,
    Pack,
    budget_select,
    estimate_tokens,
    normalise_priority,
)

PRIORITIES = ["required", "high", "medium", "low", None, "bogus"]
NO_CAP = 10**9

texts = st.one_of(
    st.just(""),
    st.text(alphabet="ab\né", max_size=12),
    st.integers(min_value=0, max_value=400).map(lambda n: "x" * n),
)


@st.composite
def pack_lists(draw: st.DrawFn) -> list[Pack]:
    """Packs with unique orders in shuffled input positions, and a preserved pack last."""
    count = draw(st.integers(min_value=0, max_value=9))
    orders = draw(st.permutations(range(count)))
    packs = [
        Pack(
            id=f"pack{order}",
            section=draw(st.sampled_from(["header", "sources", "instructions"])),
            priority=draw(st.sampled_from(PRIORITIES)),
            order=order,
            full=draw(texts),
            compact=draw(st.one_of(st.none(), texts)),
            required=draw(st.booleans()),
        )
        for order in orders
    ]
    if draw(st.booleans()):
        packs.append(
            Pack(
                id="triggeringMessage",
                section="triggeringMessage",
                priority="required",
                order=count,
                full=draw(texts),
                preserve=True,
            )
        )
    return packs


budgets = st.one_of(st.none(), st.integers(min_value=1, max_value=300))
caps = st.integers(min_value=0, max_value=1500)
common = settings(max_examples=200, deadline=None)


def _tokens(result: BudgetResult, *, required: bool) -> int:
    return sum(
        d.estimated_tokens
        for d in result.decisions
        if d.status == "included" and d.required is required
    )


@common
@given(pack_lists(), budgets)
def test_required_packs_are_always_included_unless_empty(
    packs: list[Pack], max_tokens: int | None
) -> None:
    result = budget_select(packs, max_tokens=max_tokens, max_chars=NO_CAP)

    by_id = {d.id: d for d in result.decisions}
    for pack in packs:
        decision = by_id[pack.id]
        if normalise_priority(pack) != "required":
            continue
        if pack.full or pack.compact:
            assert decision.status == "included"
            assert decision.reason is None
            text = pack.full if decision.variant == "full" else pack.compact
            assert decision.chars == len(text or "")
        else:
            assert (decision.status, decision.reason) == ("skipped", "empty")


@common
@given(pack_lists(), st.integers(min_value=1, max_value=300))
def test_optional_packs_only_spend_what_the_required_packs_left(
    packs: list[Pack], max_tokens: int
) -> None:
    # Required packs are served first and may overdraw the budget (that excess is
    # overBudgetTokens); optional packs then only take from what was left, so:
    #   optional tokens <= max(0, maxTokens - required tokens)
    #   remainingTokens == max(0, maxTokens - required tokens) - optional tokens
    #   overBudgetTokens == max(0, required tokens - maxTokens)
    # and the prompt's estimate never exceeds max(maxTokens, required tokens).
    result = budget_select(packs, max_tokens=max_tokens, max_chars=NO_CAP)

    required_tokens = _tokens(result, required=True)
    optional_tokens = _tokens(result, required=False)
    left_after_required = max(0, max_tokens - required_tokens)
    assert optional_tokens <= left_after_required
    assert result.budget.remaining_tokens == left_after_required - optional_tokens
    assert result.budget.over_budget_tokens == max(0, required_tokens - max_tokens)
    assert result.budget.final_tokens <= max(max_tokens, required_tokens)
    assert result.budget.final_tokens == estimate_tokens(result.context)


@common
@given(pack_lists())
def test_without_a_budget_every_non_empty_pack_is_included(packs: list[Pack]) -> None:
    result = budget_select(packs, max_tokens=None, max_chars=NO_CAP)

    assert result.budget.remaining_tokens is None
    assert result.budget.over_budget_tokens == 0
    for decision in result.decisions:
        assert decision.status == "included" or decision.reason == "empty"


@common
@given(pack_lists(), budgets, caps)
def test_the_guard_keeps_the_prompt_within_the_cap(
    packs: list[Pack], max_tokens: int | None, max_chars: int
) -> None:
    uncapped = budget_select(packs, max_tokens=max_tokens, max_chars=NO_CAP)
    result = budget_select(packs, max_tokens=max_tokens, max_chars=max_chars)

    assert len(result.context) <= max_chars
    assert result.truncation.after_chars == len(result.context)
    assert result.truncation.before_chars == len(uncapped.context)
    assert result.truncation.applied is (len(uncapped.context) > max_chars)
    assert result.budget.remaining_tokens == uncapped.budget.remaining_tokens
    assert result.budget.over_budget_tokens == uncapped.budget.over_budget_tokens
    for before, after in zip(uncapped.decisions, result.decisions, strict=True):
        if before.required:
            assert after.status == before.status
    if not result.truncation.applied:
        assert result == uncapped


@common
@given(pack_lists(), budgets, caps)
def test_the_guard_cuts_required_packs_only_after_dropping_every_optional_one(
    packs: list[Pack], max_tokens: int | None, max_chars: int
) -> None:
    result = budget_select(packs, max_tokens=max_tokens, max_chars=max_chars)

    included = [d for d in result.decisions if d.status == "included"]
    truncated = [d for d in included if d.truncated]
    if truncated:
        assert all(d.required for d in included)
    for decision in result.decisions:
        assert decision.truncated is False or decision.required
        if decision.reason == "max_chars":
            assert result.truncation.applied
    preserved = [d for d in truncated if d.id == "triggeringMessage"]
    if preserved:
        assert all(d.chars == 0 for d in included if d.id != "triggeringMessage")


@common
@given(pack_lists(), budgets, caps)
def test_decisions_come_back_in_order_one_per_pack_and_add_up_to_the_prompt(
    packs: list[Pack], max_tokens: int | None, max_chars: int
) -> None:
    result = budget_select(packs, max_tokens=max_tokens, max_chars=max_chars)

    assert [d.id for d in result.decisions] == [p.id for p in sorted(packs, key=lambda p: p.order)]
    assert sum(d.chars for d in result.decisions) == len(result.context)
    for decision in result.decisions:
        if decision.status == "skipped":
            assert (decision.chars, decision.estimated_tokens) == (0, 0)
            assert decision.reason is not None
        else:
            assert decision.variant is not None


@common
@given(pack_lists(), budgets, caps)
def test_same_inputs_give_the_same_bytes(
    packs: list[Pack], max_tokens: int | None, max_chars: int
) -> None:
    first = budget_select(packs, max_tokens=max_tokens, max_chars=max_chars)
    # The input position of a pack means nothing: only its order does.
    second = budget_select(packs[::-1], max_tokens=max_tokens, max_chars=max_chars)

    assert first.context.encode() == second.context.encode()
    assert first == second
