"""The max-chars guard (SPEC §3.4): swap to compact, then drop, then truncate required packs."""

from __future__ import annotations

from context.budget import (
    TRUNCATION_MARKER,
    Pack,
    PackDecision,
    budget_select,
)


def _by_id(decisions: tuple[PackDecision, ...]) -> dict[str, PackDecision]:
    return {decision.id: decision for decision in decisions}


def test_marker_is_35_chars() -> None:
    assert TRUNCATION_MARKER == "\n\n[Context truncated to fit limit]\n"
    assert len(TRUNCATION_MARKER) == 35


def test_guard_does_nothing_when_the_prompt_fits_exactly() -> None:
    packs = [Pack(id="a", section="s", priority="low", order=0, full="a" * 50, compact="a")]

    result = budget_select(packs, max_tokens=None, max_chars=50)

    assert result.context == "a" * 50
    assert result.decisions[0].reason is None
    assert result.truncation.to_dict() == {"applied": False, "beforeChars": 50, "afterChars": 50}


def test_guard_swaps_lowest_priority_first_and_stops_once_it_fits() -> None:
    # given: 30 + 30 + 30 chars, cap 70: swapping the low pack alone is enough
    packs = [
        Pack(id="req", section="s", priority="required", order=0, full="r" * 30),
        Pack(id="high", section="s", priority="high", order=1, full="h" * 30, compact="h"),
        Pack(id="low", section="s", priority="low", order=2, full="l" * 30, compact="l"),
    ]

    # when
    result = budget_select(packs, max_tokens=None, max_chars=70)

    # then
    decisions = _by_id(result.decisions)
    assert (decisions["low"].status, decisions["low"].variant) == ("included", "compact")
    assert decisions["low"].reason == "max_chars"
    assert (decisions["low"].chars, decisions["low"].estimated_tokens) == (1, 1)
    assert (decisions["high"].variant, decisions["high"].reason) == ("full", None)
    assert result.context == "r" * 30 + "h" * 30 + "l"
    assert result.truncation.to_dict() == {"applied": True, "beforeChars": 90, "afterChars": 61}


def test_guard_swaps_highest_order_first_within_a_priority() -> None:
    packs = [
        Pack(id="first", section="s", priority="medium", order=0, full="a" * 30, compact="a"),
        Pack(id="second", section="s", priority="medium", order=1, full="b" * 30, compact="b"),
    ]

    decisions = _by_id(budget_select(packs, max_tokens=None, max_chars=40).decisions)

    assert decisions["second"].variant == "compact"
    assert decisions["first"].variant == "full"


def test_guard_never_swaps_to_a_compact_that_is_not_smaller_or_is_empty() -> None:
    packs = [
        Pack(id="req", section="s", priority="required", order=0, full="r" * 10),
        Pack(id="bigger", section="s", priority="low", order=1, full="b" * 10, compact="B" * 12),
        Pack(id="empty", section="s", priority="low", order=2, full="e" * 10, compact=""),
    ]

    result = budget_select(packs, max_tokens=None, max_chars=15)

    decisions = _by_id(result.decisions)
    for pack_id in ("bigger", "empty"):
        assert decisions[pack_id].status == "skipped"
        assert decisions[pack_id].variant == "full"
        assert decisions[pack_id].reason == "max_chars"
    assert result.context == "r" * 10


def test_guard_drops_optional_packs_keeping_the_variant_they_had() -> None:
    # given: the low pack is swapped to compact first, then still too long, so it is dropped
    packs = [
        Pack(id="req", section="s", priority="required", order=0, full="r" * 20),
        Pack(id="high", section="s", priority="high", order=1, full="h" * 20),
        Pack(id="low", section="s", priority="low", order=2, full="l" * 20, compact="l" * 10),
    ]

    # when
    result = budget_select(packs, max_tokens=None, max_chars=40)

    # then
    decisions = _by_id(result.decisions)
    assert decisions["low"].status == "skipped"
    assert decisions["low"].variant == "compact"
    assert decisions["low"].reason == "max_chars"
    assert (decisions["low"].chars, decisions["low"].estimated_tokens) == (0, 0)
    assert (decisions["high"].status, decisions["high"].reason) == ("included", None)
    assert result.context == "r" * 20 + "h" * 20


def test_guard_drops_every_optional_pack_before_touching_a_required_one() -> None:
    packs = [
        Pack(id="req", section="s", priority="required", order=0, full="r" * 100),
        Pack(id="high", section="s", priority="high", order=1, full="h" * 5),
        Pack(id="low", section="s", priority="low", order=2, full="l" * 5),
    ]

    result = budget_select(packs, max_tokens=None, max_chars=80)

    decisions = _by_id(result.decisions)
    assert decisions["high"].reason == decisions["low"].reason == "max_chars"
    assert decisions["req"].truncated
    assert result.context == "r" * 45 + TRUNCATION_MARKER
    assert len(result.context) == 80


def test_guard_truncates_the_largest_required_pack_first_and_the_triggering_message_last() -> None:
    # given
    packs = [
        Pack(id="small", section="s", priority="required", order=0, full="s" * 60),
        Pack(id="large", section="s", priority="required", order=1, full="L" * 100),
        Pack(
            id="trigger", section="t", priority="required", order=2, full="T" * 500, preserve=True
        ),
    ]

    # when: 660 chars, cap 600: the large pack alone absorbs the overage of 60
    result = budget_select(packs, max_tokens=None, max_chars=600)

    # then
    decisions = _by_id(result.decisions)
    assert decisions["large"].truncated
    assert decisions["large"].reason == "max_chars"
    assert decisions["large"].chars == 40
    assert decisions["large"].estimated_tokens == 10
    assert decisions["large"].variant == "full"
    assert not decisions["small"].truncated
    assert not decisions["trigger"].truncated
    assert result.context == "s" * 60 + "L" * 5 + TRUNCATION_MARKER + "T" * 500
    assert result.truncation.to_dict() == {"applied": True, "beforeChars": 660, "afterChars": 600}


def test_guard_cuts_to_a_plain_slice_when_the_target_is_not_longer_than_the_marker() -> None:
    packs = [Pack(id="req", section="s", priority="required", order=0, full="abcdefghij" * 10)]

    result = budget_select(packs, max_tokens=None, max_chars=35)

    assert result.context == ("abcdefghij" * 10)[:35]
    assert result.decisions[0].truncated


def test_guard_breaks_a_size_tie_by_highest_order_first() -> None:
    packs = [
        Pack(id="a", section="s", priority="required", order=0, full="a" * 50),
        Pack(id="b", section="s", priority="required", order=1, full="b" * 50),
    ]

    decisions = _by_id(budget_select(packs, max_tokens=None, max_chars=90).decisions)

    assert decisions["b"].truncated
    assert not decisions["a"].truncated


def test_guard_moves_on_to_the_next_required_pack_when_one_is_cut_to_nothing() -> None:
    packs = [
        Pack(id="a", section="s", priority="required", order=0, full="a" * 30),
        Pack(id="b", section="s", priority="required", order=1, full="b" * 20),
        Pack(id="trigger", section="t", priority="required", order=2, full="t" * 10, preserve=True),
    ]

    result = budget_select(packs, max_tokens=None, max_chars=5)

    decisions = _by_id(result.decisions)
    assert [decisions[i].chars for i in ("a", "b", "trigger")] == [0, 0, 5]
    assert all(decisions[i].truncated for i in ("a", "b", "trigger"))
    assert all(decisions[i].status == "included" for i in ("a", "b", "trigger"))
    assert result.context == "ttttt"


def test_a_700000_char_required_pack_is_truncated_under_the_default_cap() -> None:
    # given
    secret = "SECRET-MARKER-7f3a"
    packs = [
        Pack(
            id="huge",
            section="sources",
            priority="required",
            order=0,
            full=secret + "x" * (700_000 - len(secret)),
        ),
        Pack(
            id="big-optional",
            section="sources",
            priority="high",
            order=1,
            full="o" * 200_000,
            compact="o" * 100_000,
        ),
        Pack(
            id="trigger",
            section="triggeringMessage",
            priority="required",
            order=2,
            full="\n## Triggering Message\n",
            preserve=True,
        ),
    ]

    # when
    result = budget_select(packs, max_tokens=None)

    # then
    decisions = _by_id(result.decisions)
    assert result.truncation.applied
    assert result.truncation.before_chars == 900_000 + len("\n## Triggering Message\n")
    assert result.truncation.after_chars == len(result.context) == 500_000
    assert (decisions["big-optional"].status, decisions["big-optional"].reason) == (
        "skipped",
        "max_chars",
    )
    assert decisions["huge"].status == "included"
    assert decisions["huge"].truncated
    assert decisions["trigger"].chars == len("\n## Triggering Message\n")
    assert result.context.startswith(secret)
    assert result.context.endswith(TRUNCATION_MARKER + "\n## Triggering Message\n")
