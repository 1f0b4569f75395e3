"""The retention policy, parsed once (no database)."""

from __future__ import annotations

import pytest

from operations.policy import ENDED_STATES, PolicyError, RetentionPolicy, age_parse

DAY = 86_400_000


@pytest.mark.parametrize(
    ("text", "ms"),
    [("30d", 30 * DAY), ("12h", 12 * 3_600_000), ("90m", 90 * 60_000), ("2w", 14 * DAY)],
)
def test_ages_read_as_milliseconds(text: str, ms: int) -> None:
    assert age_parse(text) == ms


@pytest.mark.parametrize("text", ["", "30", "d", "0d", "-1d", "1.5d", "30 days", "1y", "9999999d"])
def test_ages_that_are_not_read(text: str) -> None:
    with pytest.raises(PolicyError, match="such as 30d"):
        age_parse(text)


def test_states_default_to_every_ended_state_and_refuse_live_ones() -> None:
    assert RetentionPolicy.parse(older_than="1d").states == ENDED_STATES
    assert RetentionPolicy.parse(older_than="1d", states="failed, completed,failed").states == (
        "failed",
        "completed",
    )
    with pytest.raises(PolicyError, match="only ended clusters"):
        RetentionPolicy.parse(older_than="1d", states="completed,running")


def test_the_cutoff_is_the_age_before_now() -> None:
    policy = RetentionPolicy.parse(older_than="30d")
    assert policy.cutoff(now_ms=100 * DAY) == 70 * DAY
