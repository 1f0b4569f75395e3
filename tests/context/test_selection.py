"""Source selection (SPEC §2): since anchors, bounded queries and latest / oldest / all."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from context.selection import (
    SelectionQuery,
    SinceAnchors,
    apply_query_result,
    select_messages,
    selection_query,
    since_resolve,
    source_queries,
    source_select,
    validator_skip_query,
)
from context.strategy import Strategy, StrategyError, strategy_parse
from ledger.records import MessageRecord

T = 4_102_444_800_000
ANCHORS = SinceAnchors(cluster_start=T)
_sequence = itertools.count(1)


def _message(
    timestamp: int,
    *,
    topic: str = "NOTE",
    sender: str = "worker",
    text: str = "",
    data: Any = None,
    metadata: Any = None,
    sequence: int | None = None,
) -> MessageRecord:
    seq = next(_sequence) if sequence is None else sequence
    content: dict[str, Any] = {"text": text or f"at {timestamp}"}
    if data is not None:
        content["data"] = data
    return MessageRecord(
        id=f"msg_{seq}",
        cluster_id="c",
        sequence=seq,
        timestamp=timestamp,
        topic=topic,
        sender=sender,
        content=content,
        metadata=metadata,
    )


def _select(messages: list[MessageRecord], exclude_id: str | None = None, **source: Any) -> Any:
    spec = strategy_parse({"sources": [{"topic": "NOTE", **source}]}).sources[0]
    full, _ = source_select(messages, spec, anchors=ANCHORS, exclude_id=exclude_id)
    return full


THREE = [_message(T), _message(T + 10), _message(T + 20)]


# --- the acceptance cases ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"strategy": "latest", "amount": 2}, [1, 2]),
        ({"strategy": "oldest", "amount": 2}, [0, 1]),
        ({"strategy": "all"}, [0, 1, 2]),
        ({"strategy": "all", "amount": 2}, [0, 1]),
        ({"limit": 1}, [2]),
        ({"amount": 1, "limit": 2}, [2]),
        ({}, [0, 1, 2]),
        ({"strategy": "latest"}, [0, 1, 2]),
        ({"strategy": "oldest"}, [0, 1, 2]),
        ({"strategy": "latest", "amount": 10}, [0, 1, 2]),
    ],
)
def test_three_messages_of_one_topic(source: dict[str, Any], expected: list[int]) -> None:
    # when
    selected = _select(THREE, **source)

    # then
    assert selected == [THREE[i] for i in expected]


def test_raw_agent_output_is_never_selected() -> None:
    # given
    raw = _message(T, topic="AGENT_OUTPUT")

    # when / then
    assert _select([raw], topic="AGENT_OUTPUT") == []


def test_agent_output_marked_context_safe_is_selected() -> None:
    # given
    safe = _message(T, topic="AGENT_OUTPUT", metadata={"contextSafe": True})

    # when / then
    assert _select([safe], topic="AGENT_OUTPUT") == [safe]


def test_latest_one_skips_a_newer_raw_output_for_an_older_safe_one() -> None:
    # given
    safe = _message(T, topic="AGENT_OUTPUT", metadata={"contextSafe": True})
    raw = _message(T + 10, topic="AGENT_OUTPUT")

    # when
    selected = _select([safe, raw], topic="AGENT_OUTPUT", strategy="latest", amount=1)

    # then
    assert selected == [safe]


@pytest.mark.parametrize(
    ("metadata", "data", "topic", "selected"),
    [
        ({"contextSafe": False}, None, "NOTE", False),
        (None, {"contextSafe": True}, "AGENT_OUTPUT", True),
        ({"replayPolicy": "raw_log_only"}, None, "NOTE", False),
        ({"replayPolicy": "context"}, None, "AGENT_OUTPUT", True),
        ({"contextSafe": True, "replayPolicy": "raw_log_only"}, None, "NOTE", True),
    ],
)
def test_the_replay_policy_decides(metadata: Any, data: Any, topic: str, selected: bool) -> None:
    # given
    message = _message(T, topic=topic, metadata=metadata, data=data)

    # when / then
    assert (_select([message], topic=topic) == [message]) is selected


# --- filters ----------------------------------------------------------------------------------


def test_only_the_source_topic_is_selected() -> None:
    # given
    note = _message(T)
    other = _message(T + 1, topic="PLAN_READY")

    # when / then
    assert _select([note, other]) == [note]


def test_the_sender_filter_keeps_one_sender() -> None:
    # given
    mine = _message(T, sender="planner")
    theirs = _message(T + 1, sender="worker")

    # when / then
    assert _select([mine, theirs], sender="planner") == [mine]


def test_since_is_inclusive() -> None:
    assert _select(THREE, since=T + 10) == THREE[1:]


def test_since_as_iso_string() -> None:
    assert _select(THREE, since="2100-01-01T00:00:00.020Z") == THREE[2:]


def test_the_triggering_message_is_excluded_before_the_amount_is_applied() -> None:
    # when
    selected = _select(THREE, exclude_id=THREE[2].id, strategy="latest", amount=2)

    # then
    assert selected == THREE[:2]


def test_equal_timestamps_are_ordered_by_sequence() -> None:
    # given
    first = _message(T, sequence=101)
    second = _message(T, sequence=102)

    # when / then
    assert _select([second, first]) == [first, second]
    assert _select([second, first], strategy="latest", amount=1) == [second]


def test_selection_does_not_depend_on_input_order() -> None:
    assert _select(list(reversed(THREE)), strategy="oldest", amount=2) == THREE[:2]


def test_an_empty_ledger_selects_nothing() -> None:
    assert _select([], strategy="latest", amount=3) == []


def test_the_compact_variant_uses_compact_amount_and_strategy() -> None:
    # given
    spec = strategy_parse(
        {"sources": [{"topic": "NOTE", "strategy": "all", "compactAmount": 2}]}
    ).sources[0]

    # when
    full, compact = source_select(THREE, spec, anchors=ANCHORS, exclude_id=None)

    # then
    assert full == THREE
    assert compact == THREE[1:]


# --- since anchors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("since", "anchors", "expected"),
    [
        (None, ANCHORS, None),
        ("cluster_start", ANCHORS, T),
        ("last_task_end", ANCHORS, T),
        ("last_task_end", SinceAnchors(cluster_start=T, last_task_end=T + 500), T + 500),
        ("last_agent_start", ANCHORS, T),
        ("last_agent_start", SinceAnchors(cluster_start=T, last_agent_start=T + 500), T + 501),
        (T + 42, ANCHORS, T + 42),
        (0, ANCHORS, 0),
        ("2100-01-01T00:00:01.500Z", ANCHORS, T + 1500),
        ("2100-01-01T01:00:00+01:00", ANCHORS, T),
    ],
)
def test_since_resolve(since: Any, anchors: SinceAnchors, expected: int | None) -> None:
    assert since_resolve(since, topic="NOTE", anchors=anchors) == expected


def test_an_unknown_since_names_the_value_the_topic_and_the_accepted_forms() -> None:
    # when
    with pytest.raises(StrategyError) as caught:
        since_resolve("yesterday", topic="PLAN_READY", anchors=ANCHORS)

    # then
    assert str(caught.value) == (
        'unknown since value "yesterday" for topic PLAN_READY (expected cluster_start, '
        "last_task_end, last_agent_start, an ISO-8601 timestamp or a number of ms)"
    )


# --- bounded queries --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "amount", "newest_first", "limit"),
    [
        ("latest", 3, True, 3),
        ("oldest", 3, False, 3),
        ("all", 3, False, 3),
        ("all", None, False, None),
        ("latest", None, False, None),
    ],
)
def test_selection_query_shape(
    strategy: Any, amount: int | None, newest_first: bool, limit: int | None
) -> None:
    # when
    query = selection_query(
        topic="NOTE", sender=None, since_ms=None, strategy=strategy, amount=amount
    )

    # then
    assert (query.newest_first, query.limit) == (newest_first, limit)
    assert query.fetch_limit == (None if limit is None else limit + 1)


def test_a_huge_amount_is_clamped_to_a_valid_sql_limit() -> None:
    # when
    query = selection_query(
        topic="NOTE", sender=None, since_ms=None, strategy="oldest", amount=10**30
    )

    # then
    assert query.fetch_limit == 2**53 + 1
    assert query.fetch_limit < 2**63


def test_source_queries_describe_full_and_compact() -> None:
    # given
    spec = strategy_parse(
        {"sources": [{"topic": "NOTE", "sender": "w", "strategy": "oldest", "amount": 4}]}
    ).sources[0]

    # when
    full, compact = source_queries(spec, T)

    # then
    assert full == SelectionQuery("NOTE", "w", T, newest_first=False, limit=4)
    assert compact == SelectionQuery("NOTE", "w", T, newest_first=False, limit=1)


def test_apply_query_result_drops_the_trigger_cuts_and_returns_oldest_first() -> None:
    # given: rows as a database returns them for latest 2, one extra fetched
    query = SelectionQuery("NOTE", None, None, newest_first=True, limit=2)
    rows = list(reversed(THREE))

    # when
    selected = apply_query_result(rows, query, exclude_id=THREE[2].id)

    # then
    assert selected == THREE[:2]


def test_apply_query_result_without_the_trigger_keeps_limit_rows() -> None:
    query = SelectionQuery("NOTE", None, None, newest_first=True, limit=2)
    assert apply_query_result(list(reversed(THREE)), query, exclude_id=None) == THREE[1:]


def test_the_database_path_and_the_memory_path_agree() -> None:
    # given
    messages = [_message(T + i, sender=("a", "b")[i % 2]) for i in range(12)]
    raw = [{"strategy": s, "amount": a} for s in ("latest", "oldest", "all") for a in (None, 1, 5)]
    for source in raw:
        spec = strategy_parse({"sources": [{"topic": "NOTE", "sender": "a", **source}]}).sources[0]
        query, _ = source_queries(spec, T + 2)
        # a database returns the ordered, filtered rows, at most fetch_limit of them
        ordered = sorted(messages, key=lambda m: m.timestamp, reverse=query.newest_first)
        fetched = [m for m in ordered if m.sender == "a" and m.timestamp >= T + 2]
        fetched = fetched[: query.fetch_limit]

        # when
        from_db = apply_query_result(fetched, query, exclude_id=messages[4].id)
        in_memory = select_messages(messages, query, exclude_id=messages[4].id)

        # then
        assert from_db == in_memory, source


def test_the_validator_hint_query_reads_the_oldest_fifty_results() -> None:
    # when
    query = validator_skip_query(cluster_start=T)

    # then
    assert (query.topic, query.since_ms, query.newest_first, query.limit) == (
        "VALIDATION_RESULT",
        T,
        False,
        50,
    )


@given(
    timestamps=st.lists(st.integers(min_value=0, max_value=50), max_size=12),
    strategy=st.sampled_from(["latest", "oldest", "all"]),
    amount=st.none() | st.integers(min_value=1, max_value=5),
    exclude=st.integers(min_value=0, max_value=12),
)
def test_selection_is_a_bounded_ordered_subset(
    timestamps: list[int], strategy: Strategy, amount: int | None, exclude: int
) -> None:
    # given
    messages = [_message(T + ts, sequence=i + 1) for i, ts in enumerate(timestamps)]
    query = selection_query(
        topic="NOTE",
        sender=None,
        since_ms=None,
        strategy=strategy,
        amount=amount,  # type: ignore[arg-type]
    )
    excluded = f"msg_{exclude + 1}"

    # when
    selected = select_messages(messages, query, exclude_id=excluded)

    # then
    candidates = sorted(
        (m for m in messages if m.id != excluded), key=lambda m: (m.timestamp, m.sequence)
    )
    keys = [(m.timestamp, m.sequence) for m in selected]
    assert keys == sorted(keys)
    assert len(selected) == (len(candidates) if amount is None else min(amount, len(candidates)))
    if amount is not None and strategy == "latest":
        assert selected == candidates[len(candidates) - len(selected) :]
    else:
        assert selected == candidates[: len(selected)]
