"""Source selection and pack texts against the reference cases of conformance/sources.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context.budget import budget_select
from context.packs import build_packs
from context.selection import SinceAnchors, source_select
from context.strategy import strategy_parse
from ledger.records import MessageRecord

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "conformance" / "sources.json").read_text(encoding="utf-8")
)
AGENT = {"id": "reader", "role": "worker", "prompt": "Read the ledger."}


def _ledger(case: dict[str, Any]) -> tuple[list[MessageRecord], MessageRecord]:
    # The reference messages carry no id or sequence: give them in ledger order.
    messages = [
        MessageRecord(
            id=f"msg_{position:032x}",
            cluster_id="conformance",
            sequence=position + 1,
            timestamp=raw["timestamp"],
            topic=raw["topic"],
            sender=raw["sender"],
            content=raw.get("content", {}),
            metadata=raw.get("metadata"),
        )
        for position, raw in enumerate(case["messages"])
    ]
    raw_trigger = case["trigger"]
    trigger = MessageRecord(
        id="msg_trigger",
        cluster_id="conformance",
        sequence=len(messages) + 1,
        timestamp=raw_trigger["timestamp"],
        topic=raw_trigger["topic"],
        sender=raw_trigger["sender"],
        content=raw_trigger.get("content", {}),
    )
    return messages, trigger


def _packs(case: dict[str, Any]) -> tuple[Any, list[Any]]:
    messages, trigger = _ledger(case)
    strategy = strategy_parse(case["contextStrategy"])
    anchors = SinceAnchors(cluster_start=case["created_at"])
    selections = [
        source_select(messages, source, anchors=anchors, exclude_id=trigger.id)
        for source in strategy.sources
    ]
    packs = build_packs(
        agent=AGENT,
        iteration=1,
        strategy=strategy,
        source_messages=selections,
        trigger=trigger,
    )
    return strategy, packs


def test_the_table_holds_every_reference_case() -> None:
    assert len(CASES) == 24
    assert {case["name"].rsplit("-", 1)[1] for case in CASES} == {"full", "compact"}


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_pack_texts_match_the_expected_variant(case: dict[str, Any]) -> None:
    # given
    _, packs = _packs(case)
    by_id = {pack.id: pack for pack in packs}

    # when / then
    for pack_id, expected in case["expected"].items():
        pack = by_id[pack_id]
        if expected["status"] == "skipped":
            assert expected["reason"] == "empty"
            assert (pack.full, pack.compact or "") == ("", ""), pack_id
        elif expected["variant"] == "compact":
            assert pack.compact == expected["text"], pack_id
        else:
            assert pack.full == expected["text"], pack_id


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_budget_decisions_match_the_reference(case: dict[str, Any]) -> None:
    # given
    strategy, packs = _packs(case)
    texts = {pack.id: pack for pack in packs}

    # when
    result = budget_select(packs, max_tokens=strategy.max_tokens)

    # then
    decisions = {decision.id: decision for decision in result.decisions}
    for pack_id, expected in case["expected"].items():
        decision = decisions[pack_id]
        assert (decision.status, decision.variant, decision.reason) == (
            expected["status"],
            expected["variant"],
            expected["reason"],
        ), pack_id
        if expected["status"] == "included":
            pack = texts[pack_id]
            chosen = pack.full if decision.variant == "full" else pack.compact
            assert chosen == expected["text"], pack_id
            assert decision.chars == expected["chars"] == len(expected["text"]), pack_id
            assert expected["text"] in result.context, pack_id


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_source_packs_sit_between_the_fixed_packs_in_order(case: dict[str, Any]) -> None:
    # given
    strategy, packs = _packs(case)

    # when
    ids = [pack.id for pack in packs]

    # then
    assert ids == [
        "header",
        "instructions",
        *(source.pack_id for source in strategy.sources),
        "triggeringMessage",
    ]
    assert [pack.order for pack in packs] == list(range(len(packs)))
