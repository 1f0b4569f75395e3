"""The inspector's explanation comes from the engine's own budget walk, for any packs and budget.

A build just made is explained with the walk's visits; a recorded build with the same walk
replayed over its stored decisions. Both must say what the engine did.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from context.budget import Pack, PackDecision, budget_replay, budget_select, estimate_tokens
from dashboard.presentation import decision_rows
from tests.context.test_budget_properties import budgets, caps, pack_lists


def sizes_of(packs: list[Pack]) -> dict[str, tuple[int, int | None]]:
    return {
        p.id: (estimate_tokens(p.full), estimate_tokens(p.compact) if p.compact else None)
        for p in packs
    }


@settings(max_examples=300, deadline=None)
@given(pack_lists(), budgets, st.one_of(st.just(10**9), caps))
def test_the_explanation_is_the_engines_decisions(
    packs: list[Pack], max_tokens: int | None, max_chars: int
) -> None:
    # given a build
    result = budget_select(packs, max_tokens=max_tokens, max_chars=max_chars)
    sizes = sizes_of(packs)

    # when it is explained as a preview (the walk's own visits) and as a recorded build
    # (its decisions stored as SPEC §3.6 dicts and read back)
    preview = decision_rows(
        result.decisions, max_tokens=max_tokens, sizes=sizes, visits=result.visits
    )
    stored = [PackDecision.from_dict(d.to_dict()) for d in result.decisions]
    recorded = decision_rows(stored, max_tokens=max_tokens, sizes=sizes)

    # then every row says what the engine decided, and both paths agree on why
    engine = [(d.id, d.status, d.variant, d.reason, d.order) for d in result.decisions]
    for rows in (preview, recorded):
        assert [(r.id, r.status, r.variant, r.reason, r.order) for r in rows] == engine
    assert [(r.left_before, r.sentence) for r in recorded] == [
        (r.left_before, r.sentence) for r in preview
    ]
    assert budget_replay(stored, max_tokens=max_tokens, sizes=sizes) == result.visits
    assert stored == list(result.decisions)
