"""Budget selection (SPEC §3.3): token estimate, priorities, variants and the budget record."""

from __future__ import annotations

import pytest

from context.budget import Pack, PackDecision, budget_select, estimate_tokens, normalise_priority


def _by_id(decisions: tuple[PackDecision, ...]) -> dict[str, PackDecision]:
    return {decision.id: decision for decision in decisions}


@pytest.mark.parametrize(("chars", "tokens"), [(0, 0), (1, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
def test_estimate_tokens_is_ceil_of_a_quarter(chars: int, tokens: int) -> None:
    assert estimate_tokens("x" * chars) == tokens


def test_estimate_tokens_counts_code_points_not_bytes() -> None:
    assert estimate_tokens("ééééé") == 2
    assert estimate_tokens("🙂🙂🙂🙂") == 1


@pytest.mark.parametrize(
    ("priority", "required", "expected"),
    [
        ("required", False, "required"),
        ("high", False, "high"),
        ("medium", False, "medium"),
        ("low", False, "low"),
        (None, False, "medium"),
        ("bogus", False, "medium"),
        ("HIGH", False, "medium"),
        ("low", True, "required"),
        (None, True, "required"),
    ],
)
def test_priority_normalisation(priority: str | None, required: bool, expected: str) -> None:
    pack = Pack(id="p", section="s", priority=priority, order=0, full="x", required=required)

    assert normalise_priority(pack) == expected
    decision = budget_select([pack], max_tokens=None).decisions[0]
    assert decision.priority == expected
    assert decision.required is (expected == "required")


def test_budget_4_keeps_required_packs_and_takes_the_high_compact() -> None:
    # given
    packs = [
        Pack(id="required", section="header", priority="required", order=0, full="REQ\n"),
        Pack(id="high", section="sources", priority="high", order=1, full="H" * 40, compact="H\n"),
        Pack(id="low", section="sources", priority="low", order=2, full="L" * 40, compact="L\n"),
        Pack(
            id="trigger",
            section="triggeringMessage",
            priority="required",
            order=3,
            full="TRIG\n",
            preserve=True,
        ),
    ]

    # when
    result = budget_select(packs, max_tokens=4)

    # then
    decisions = _by_id(result.decisions)
    assert (decisions["high"].status, decisions["high"].variant) == ("included", "compact")
    assert (decisions["low"].status, decisions["low"].reason) == ("skipped", "budget")
    assert decisions["required"].status == decisions["trigger"].status == "included"
    assert result.context == "REQ\nH\nTRIG\n"
    assert "H\n" in result.context
    assert "L" * 40 not in result.context
    assert result.budget.to_dict() == {
        "maxTokens": 4,
        "remainingTokens": 0,
        "overBudgetTokens": 0,
        "finalTokens": 3,
    }


def test_budget_of_one_token_keeps_every_required_pack_and_skips_the_optional_ones() -> None:
    # given
    packs = [
        Pack(id="header", section="header", priority="required", order=0, full="HEADER " * 10),
        Pack(
            id="src-high",
            section="sources",
            priority="high",
            order=1,
            full="a" * 12,
            compact="a" * 8,
        ),
        Pack(id="src-medium", section="sources", priority=None, order=2, full="b" * 30),
        Pack(id="src-low", section="sources", priority="low", order=3, full="c" * 9, compact="cc"),
        Pack(
            id="flagged", section="sources", priority="low", order=4, full="d" * 20, required=True
        ),
        Pack(
            id="trigger",
            section="triggeringMessage",
            priority="required",
            order=5,
            full="TRIGGER\n",
            preserve=True,
        ),
    ]

    # when
    result = budget_select(packs, max_tokens=1)

    # then
    decisions = _by_id(result.decisions)
    for pack_id in ("header", "flagged", "trigger"):
        assert decisions[pack_id].status == "included"
        assert decisions[pack_id].variant == "full"
    for pack_id in ("src-high", "src-medium", "src-low"):
        assert decisions[pack_id].status == "skipped"
        assert decisions[pack_id].reason == "budget"
        assert decisions[pack_id].variant is None
        assert (decisions[pack_id].chars, decisions[pack_id].estimated_tokens) == (0, 0)
    assert result.context == "HEADER " * 10 + "d" * 20 + "TRIGGER\n"
    required_tokens = estimate_tokens("HEADER " * 10) + 5 + 2
    assert result.budget.remaining_tokens == 0
    assert result.budget.over_budget_tokens == required_tokens - 1


def test_required_pack_uses_its_compact_variant_when_full_does_not_fit() -> None:
    pack = Pack(id="r", section="s", priority="required", order=0, full="x" * 40, compact="y" * 8)

    result = budget_select([pack], max_tokens=3)

    decision = result.decisions[0]
    assert (decision.status, decision.variant, decision.chars) == ("included", "compact", 8)
    assert result.budget.remaining_tokens == 1
    assert result.budget.over_budget_tokens == 0


def test_required_pack_keeps_full_when_compact_neither_fits_nor_is_smaller() -> None:
    pack = Pack(id="r", section="s", priority="required", order=0, full="x" * 8, compact="y" * 9)

    result = budget_select([pack], max_tokens=1)

    assert result.decisions[0].variant == "full"
    assert result.budget.over_budget_tokens == 1


def test_required_pack_takes_a_smaller_compact_even_when_it_does_not_fit() -> None:
    pack = Pack(id="r", section="s", priority="required", order=0, full="x" * 40, compact="y" * 20)

    result = budget_select([pack], max_tokens=2)

    assert result.decisions[0].variant == "compact"
    assert result.budget.to_dict() == {
        "maxTokens": 2,
        "remainingTokens": 0,
        "overBudgetTokens": 3,
        "finalTokens": 5,
    }


def test_required_pack_with_empty_full_falls_back_to_compact() -> None:
    # The reference does this even when the compact text does not fit (packs.json case099).
    pack = Pack(id="r", section="s", priority="required", order=0, full="", compact="y" * 40)

    result = budget_select([pack], max_tokens=2)

    assert (result.decisions[0].status, result.decisions[0].variant) == ("included", "compact")
    assert result.context == "y" * 40


def test_optional_pack_with_empty_full_is_included_as_its_empty_full_text() -> None:
    pack = Pack(id="o", section="s", priority="low", order=0, full="", compact="y" * 40)

    result = budget_select([pack], max_tokens=2)

    decision = result.decisions[0]
    assert (decision.status, decision.variant, decision.chars) == ("included", "full", 0)
    assert result.context == ""


def test_optional_pack_full_when_it_fits_else_compact_else_budget() -> None:
    packs = [
        Pack(id="fits", section="s", priority="high", order=0, full="a" * 8, compact="a"),
        Pack(id="compact", section="s", priority="high", order=1, full="b" * 40, compact="b" * 4),
        Pack(id="none", section="s", priority="high", order=2, full="c" * 40, compact="c" * 20),
        Pack(id="no-compact", section="s", priority="high", order=3, full="d" * 40),
        Pack(id="empty-compact", section="s", priority="high", order=4, full="e" * 40, compact=""),
    ]

    decisions = _by_id(budget_select(packs, max_tokens=4).decisions)

    assert (decisions["fits"].status, decisions["fits"].variant) == ("included", "full")
    assert (decisions["compact"].status, decisions["compact"].variant) == ("included", "compact")
    for pack_id in ("none", "no-compact", "empty-compact"):
        assert (decisions[pack_id].status, decisions[pack_id].reason) == ("skipped", "budget")


@pytest.mark.parametrize("priority", ["required", "high", None])
@pytest.mark.parametrize("compact", [None, ""])
def test_pack_with_both_variants_empty_is_skipped_as_empty(
    priority: str | None, compact: str | None
) -> None:
    pack = Pack(id="e", section="s", priority=priority, order=0, full="", compact=compact)

    decision = budget_select([pack], max_tokens=100).decisions[0]

    assert (decision.status, decision.variant, decision.reason) == ("skipped", None, "empty")
    assert (decision.chars, decision.estimated_tokens) == (0, 0)


def test_higher_priority_packs_are_served_first_regardless_of_order() -> None:
    packs = [
        Pack(id="low", section="s", priority="low", order=0, full="l" * 16),
        Pack(id="medium", section="s", priority="medium", order=1, full="m" * 16),
        Pack(id="high", section="s", priority="high", order=2, full="h" * 16),
    ]

    decisions = _by_id(budget_select(packs, max_tokens=8).decisions)

    assert decisions["high"].status == "included"
    assert decisions["medium"].status == "included"
    assert decisions["low"].reason == "budget"


def test_same_priority_packs_are_served_by_order() -> None:
    packs = [
        Pack(id="later", section="s", priority="high", order=5, full="b" * 16),
        Pack(id="earlier", section="s", priority="high", order=1, full="a" * 16),
    ]

    decisions = _by_id(budget_select(packs, max_tokens=4).decisions)

    assert decisions["earlier"].status == "included"
    assert decisions["later"].reason == "budget"


def test_decisions_and_prompt_follow_order_not_input_position() -> None:
    packs = [
        Pack(id="c", section="s", priority="low", order=2, full="C"),
        Pack(id="a", section="s", priority="required", order=0, full="A"),
        Pack(id="b", section="s", priority="high", order=1, full="B"),
    ]

    result = budget_select(packs, max_tokens=None)

    assert [decision.id for decision in result.decisions] == ["a", "b", "c"]
    assert [decision.order for decision in result.decisions] == [0, 1, 2]
    assert result.context == "ABC"


def test_no_budget_includes_every_full_text_and_reports_no_remaining_tokens() -> None:
    packs = [
        Pack(id="a", section="s", priority="low", order=0, full="a" * 1000, compact="a"),
        Pack(id="b", section="s", priority="required", order=1, full="b" * 3),
    ]

    result = budget_select(packs, max_tokens=None)

    assert [decision.variant for decision in result.decisions] == ["full", "full"]
    assert result.budget.to_dict() == {
        "maxTokens": None,
        "remainingTokens": None,
        "overBudgetTokens": 0,
        "finalTokens": 251,
    }


def test_decision_dict_has_exactly_the_spec_keys() -> None:
    pack = Pack(id="a", section="header", priority="required", order=0, full="abcde")

    decision = budget_select([pack], max_tokens=10).decisions[0]

    assert decision.to_dict() == {
        "id": "a",
        "section": "header",
        "priority": "required",
        "required": True,
        "status": "included",
        "variant": "full",
        "chars": 5,
        "estimatedTokens": 2,
        "order": 0,
        "reason": None,
        "truncated": False,
    }


def test_no_packs_give_an_empty_prompt() -> None:
    result = budget_select([], max_tokens=10)

    assert result.context == ""
    assert result.decisions == ()
    assert result.budget.remaining_tokens == 10
    assert result.truncation.to_dict() == {"applied": False, "beforeChars": 0, "afterChars": 0}


def test_required_pack_compares_variant_sizes_in_tokens() -> None:
    # "Smaller" is measured in tokens, the budget's unit: 8 and 5 chars are both 2 tokens, so
    # the compact variant is not smaller and the full one stays. packs.json does not settle
    # chars against tokens; this pins our reading of SPEC §3.3.
    pack = Pack(id="r", section="s", priority="required", order=0, full="x" * 8, compact="y" * 5)

    result = budget_select([pack], max_tokens=1)

    assert result.decisions[0].variant == "full"
