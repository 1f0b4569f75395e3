"""Budget selection and the guard against the reference cases of conformance/packs.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context.budget import Pack, budget_select

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "conformance" / "packs.json").read_text(encoding="utf-8")
)


def _pack(raw: dict[str, Any]) -> Pack:
    return Pack(
        id=raw["id"],
        section=raw["section"],
        priority=raw.get("priority"),
        order=raw["order"],
        full=raw["full"],
        compact=raw.get("compact"),
        required=raw.get("required", False),
        preserve=raw.get("preserve", False),
    )


def test_the_table_holds_every_reference_case() -> None:
    assert len(CASES) == 301
    assert len({case["name"] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_budget_select_matches_the_reference(case: dict[str, Any]) -> None:
    # given
    packs = [_pack(raw) for raw in case["packs"]]
    expected = case["expected"]

    # when
    result = budget_select(packs, max_tokens=case["maxTokens"], max_chars=case["maxChars"])

    # then
    assert result.context == expected["context"]
    assert [decision.to_dict() for decision in result.decisions] == expected["packDecisions"]
    assert result.budget.to_dict() == expected["budget"]
    assert {"maxContextChars": result.truncation.to_dict()} == expected["truncation"]
