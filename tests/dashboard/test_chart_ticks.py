"""The metrics charts' time labels: which columns get one at each width tier."""

from __future__ import annotations

import itertools

import pytest

from dashboard.charts import X_LABEL_CHARS, X_TICK_TIERS, x_label_px, x_tick_tiers

TIERS = [name for name, _ in X_TICK_TIERS]


@pytest.mark.parametrize("style", sorted(X_LABEL_CHARS))
@pytest.mark.parametrize("n", [*range(1, 40), 64, 100, 250, 1000])
def test_labels_of_a_tier_never_overlap_and_the_newest_always_has_one(style: str, n: int) -> None:
    chosen = x_tick_tiers(n, style)
    assert chosen[n - 1] == TIERS[0]
    for rank, (tier, plot_px) in enumerate(X_TICK_TIERS):
        shown = sorted(i for i, t in chosen.items() if TIERS.index(t) <= rank)
        assert shown, f"{tier} shows no label"
        # labels sit at column centres, plot_px / n apart per column
        gaps = [(b - a) * plot_px / n for a, b in itertools.pairwise(shown)]
        assert all(gap >= x_label_px(style) for gap in gaps), (tier, gaps)
        # evenly spaced: one stride per tier
        assert len({b - a for a, b in itertools.pairwise(shown)}) <= 1


def test_a_wider_tier_only_adds_labels() -> None:
    chosen = x_tick_tiers(40, "seconds")
    narrow = {i for i, t in chosen.items() if t == "narrow"}
    assert narrow < set(chosen)


@pytest.mark.parametrize(("style", "every_column_up_to"), [("seconds", 7), ("minutes", 11)])
def test_the_wide_page_labels_every_column_while_they_fit(
    style: str, every_column_up_to: int
) -> None:
    # 500 px of plot hold 7 clock times with seconds, 11 without
    for n in range(1, every_column_up_to + 1):
        assert sorted(x_tick_tiers(n, style)) == list(range(n))
    assert len(x_tick_tiers(every_column_up_to + 1, style)) < every_column_up_to + 1


def test_the_narrow_page_keeps_three_clock_times_at_most_for_many_builds() -> None:
    chosen = x_tick_tiers(100, "seconds")
    assert sum(1 for t in chosen.values() if t == "narrow") == 3
