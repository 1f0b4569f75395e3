"""The ledger's bounds (ledger/validation.py): plain functions, no database."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import InvalidInput
from ledger.validation import (
    TIMESTAMP_MAX,
    JsonValueError,
    agent_id_problem,
    integer_check,
    json_encode_checked,
    json_problem,
    json_storable,
    json_text_suspicious,
    text_problem,
    text_storable,
    timestamp_problem,
)


def naive_problem(value: Any, depth: int = 0, max_depth: int = 8) -> bool:
    """The rule, written plainly and recursively: is anything wrong anywhere?"""
    if depth > max_depth:
        return True
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, str):
        return "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(
            naive_problem(k, depth + 1, max_depth) or naive_problem(v, depth + 1, max_depth)
            for k, v in value.items()
        )
    if isinstance(value, list):
        return any(naive_problem(v, depth + 1, max_depth) for v in value)
    return False


# Plain, accented and astral characters, a backslash, and the two kinds the ledger refuses.
texts = st.text(
    alphabet=st.sampled_from(["a", "Z", " ", "é", "😀", "\\", "\x00", "\ud800", "\udfff"]),
    max_size=5,
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_json_problem_agrees_with_the_plain_rule(value: Any) -> None:
    assert (json_problem(value, max_depth=8) is not None) == naive_problem(value)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_encoding_refuses_exactly_what_the_rule_refuses(value: Any) -> None:
    if naive_problem(value):
        with pytest.raises(JsonValueError):
            json_encode_checked(value, max_depth=8)
    else:
        assert json.loads(json_encode_checked(value, max_depth=8)) == json.loads(
            json.dumps(value, ensure_ascii=False)
        )


@pytest.mark.parametrize(
    ("value", "path", "problem"),
    [
        ({"a": [1, {"b": "x\x00"}]}, ".a[1].b", "must not contain NUL"),
        ({"k\ud800": 1}, "[key 'k\\ud800']", "must not contain lone surrogates"),
        ([1.0, float("inf")], "[1]", "must be a finite number"),
        (json.loads("[" * 5 + "]" * 5), "[0][0][0][0]", "nests deeper than 3 levels"),
    ],
)
def test_a_problem_names_its_path(value: Any, path: str, problem: str) -> None:
    found = json_problem(value, max_depth=3)

    assert found is not None
    assert found[0] == path
    assert found[1].startswith(problem)


def test_strings_checked_on_the_text_are_skipped_in_the_walk() -> None:
    assert json_problem({"a": "x\x00"}, max_depth=8, strings=False) is None
    assert json_problem({"a": float("nan")}, max_depth=8, strings=False) is not None


@pytest.mark.parametrize(
    ("text", "suspicious"),
    [
        ('{"a": "plain"}', False),
        ('{"a": "\\u00e9t\\u00e9"}', False),
        ('{"a": "\\u0000"}', True),
        ('{"a": "\\ud83d\\ude00"}', True),  # a valid pair: the walk decides
        ('{"a": "\\\\u0000"}', True),  # an escaped backslash: the walk decides
        ('{"a": "été"}', False),
        ('{"a": "\ud800"}', True),
    ],
)
def test_the_text_filter_only_lets_through_what_cannot_hide_a_problem(
    text: str, suspicious: bool
) -> None:
    assert json_text_suspicious(text) is suspicious


def test_strings_with_nul_or_a_lone_surrogate_are_refused_and_others_kept() -> None:
    assert text_problem("fine, ünïcode and 😀") is None
    assert "NUL" in (text_problem("a\x00") or "")
    assert "lone surrogate" in (text_problem("\udc00") or "")


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (0, True),
        (TIMESTAMP_MAX, True),
        (TIMESTAMP_MAX + 1, False),
        (-1, False),
        (2**63, False),
        (True, False),
        (1.0, False),
        ("1", False),
    ],
)
def test_timestamps_stay_within_year_9999(value: object, ok: bool) -> None:
    assert (timestamp_problem(value) is None) is ok


def test_a_timestamp_may_run_ahead_of_the_clock_by_the_skew_only() -> None:
    assert timestamp_problem(1_000 + 500, now=1_000, max_ahead=500) is None
    assert "501 ms ahead" in (timestamp_problem(1_000 + 501, now=1_000, max_ahead=500) or "")


@pytest.mark.parametrize(
    ("agent_id", "ok"),
    [
        ("worker", True),
        ("validator-code.2_b", True),
        ("9lives", True),
        ("w" * 64, True),
        ("w" * 65, False),
        ("team/worker", False),
        ("-worker", False),
        ("", False),
        ("worker\n", False),
        ("wörker", False),
        (7, False),
    ],
)
def test_agent_ids_follow_spec_4(agent_id: object, ok: bool) -> None:
    assert (agent_id_problem(agent_id) is None) is ok


def test_an_integer_out_of_bounds_names_its_field() -> None:
    with pytest.raises(InvalidInput, match=r"^iteration must be between 1 and 10, got 11$"):
        integer_check(11, field="iteration", minimum=1, maximum=10)


# --- making tenant text storable ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("plain", "plain"),
        ("nul\x00here", "nul\ufffdhere"),
        ("half \ud83d emoji", "half \ufffd emoji"),
        ("low \ude00", "low \ufffd"),
        ("a whole \U0001f600", "a whole \U0001f600"),
    ],
)
def test_text_storable_replaces_what_no_database_stores(text: str, stored: str) -> None:
    assert text_storable(text) == stored
    assert text_problem(text_storable(text)) is None


def test_text_storable_cuts_to_characters_and_to_utf8_bytes() -> None:
    assert text_storable("abcdef", max_chars=4) == "abc…"
    cut = text_storable("\U0001f600" * 1000, max_bytes=100)
    assert len(cut.encode("utf-8")) <= 100
    assert cut.endswith("…")
    assert text_problem(cut) is None


def test_json_storable_fixes_every_string_keys_included_and_keeps_clean_values() -> None:
    clean = {"a": [1, "x", {"b": None}]}
    assert json_storable(clean) is clean
    fixed = json_storable({"k\x00": ["\ud800", {"deep": "ok\x00"}], "n": 1.5})
    assert fixed == {"k\ufffd": ["\ufffd", {"deep": "ok\ufffd"}], "n": 1.5}
    deep: Any = "x\x00"
    for _ in range(5000):
        deep = [deep]
    assert json_problem(json_storable(deep), max_depth=10_000) is None
