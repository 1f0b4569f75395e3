"""Build metrics (SPEC §6.2): shape, section sums, totals, and no prompt text."""

from __future__ import annotations

import json

from context.budget import Pack, budget_select
from context.metrics import build_metrics, metrics_line


def _metrics(packs: list[Pack], *, max_tokens: int = 100_000, max_chars: int = 500_000) -> dict:
    result = budget_select(packs, max_tokens=max_tokens, max_chars=max_chars)
    return build_metrics(
        cluster_id="cluster-1",
        agent_id="worker",
        role="implementation",
        iteration=2,
        triggered_by="PLAN_READY",
        trigger_from="planner",
        max_tokens=max_tokens,
        sources_count=2,
        result=result,
    )


def test_metrics_have_exactly_the_spec_shape() -> None:
    # given
    packs = [
        Pack(id="header", section="header", priority="required", order=0, full="HEAD"),
        Pack(id="source:A:0", section="sources", priority="high", order=1, full="abcde"),
        Pack(
            id="trigger",
            section="triggeringMessage",
            priority="required",
            order=2,
            full="T",
            preserve=True,
        ),
    ]

    # when
    metrics = _metrics(packs, max_tokens=50)

    # then
    assert metrics == {
        "clusterId": "cluster-1",
        "agentId": "worker",
        "role": "implementation",
        "iteration": 2,
        "triggeredBy": "PLAN_READY",
        "triggerFrom": "planner",
        "strategy": {"maxTokens": 50, "sourcesCount": 2},
        "budget": {
            "maxTokens": 50,
            "remainingTokens": 46,
            "overBudgetTokens": 0,
            "finalTokens": 3,
        },
        "packs": [
            {
                "id": "header",
                "section": "header",
                "priority": "required",
                "required": True,
                "status": "included",
                "variant": "full",
                "chars": 4,
                "estimatedTokens": 1,
                "order": 0,
                "reason": None,
                "truncated": False,
            },
            {
                "id": "source:A:0",
                "section": "sources",
                "priority": "high",
                "required": False,
                "status": "included",
                "variant": "full",
                "chars": 5,
                "estimatedTokens": 2,
                "order": 1,
                "reason": None,
                "truncated": False,
            },
            {
                "id": "trigger",
                "section": "triggeringMessage",
                "priority": "required",
                "required": True,
                "status": "included",
                "variant": "full",
                "chars": 1,
                "estimatedTokens": 1,
                "order": 2,
                "reason": None,
                "truncated": False,
            },
        ],
        "sections": {
            "header": {"chars": 4, "estimatedTokens": 1},
            "sources": {"chars": 5, "estimatedTokens": 2},
            "triggeringMessage": {"chars": 1, "estimatedTokens": 1},
        },
        "total": {"chars": 10, "estimatedTokens": 3},
        "truncation": {"maxContextChars": {"applied": False, "beforeChars": 10, "afterChars": 10}},
    }


def test_sections_sum_only_the_included_packs() -> None:
    # given: two included sources, one skipped for budget, one empty
    packs = [
        Pack(id="header", section="header", priority="required", order=0, full="h" * 8),
        Pack(id="s0", section="sources", priority="high", order=1, full="a" * 9),
        Pack(id="s1", section="sources", priority="high", order=2, full="b" * 40, compact="b" * 3),
        Pack(id="s2", section="sources", priority="low", order=3, full="c" * 400),
        Pack(id="s3", section="sources", priority="low", order=4, full=""),
        Pack(id="skip-only", section="validatorSkip", priority="low", order=5, full="v" * 400),
    ]

    # when
    metrics = _metrics(packs, max_tokens=10)

    # then
    assert metrics["sections"] == {
        "header": {"chars": 8, "estimatedTokens": 2},
        "sources": {"chars": 12, "estimatedTokens": 3 + 1},
    }
    assert metrics["total"] == {"chars": 20, "estimatedTokens": 5}


def test_total_chars_equal_the_prompt_length_after_the_guard() -> None:
    packs = [
        Pack(id="req", section="header", priority="required", order=0, full="r" * 120),
        Pack(id="opt", section="sources", priority="medium", order=1, full="o" * 50),
    ]
    result = budget_select(packs, max_tokens=None, max_chars=100)

    metrics = build_metrics(
        cluster_id="c",
        agent_id="a",
        role=None,
        iteration=1,
        triggered_by=None,
        trigger_from=None,
        max_tokens=100_000,
        sources_count=1,
        result=result,
    )

    assert metrics["total"]["chars"] == len(result.context) == 100
    assert metrics["sections"] == {"header": {"chars": 100, "estimatedTokens": 25}}
    assert metrics["truncation"]["maxContextChars"] == {
        "applied": True,
        "beforeChars": 170,
        "afterChars": 100,
    }


def test_a_700000_char_required_pack_gives_bounded_metrics_without_prompt_text() -> None:
    # given
    secret = "SECRET-MARKER-c41d"
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
            priority="medium",
            order=1,
            full=secret + "y" * 300_000,
        ),
        Pack(
            id="trigger",
            section="triggeringMessage",
            priority="required",
            order=2,
            full=f"\n## Triggering Message\n\n{secret}\n",
            preserve=True,
        ),
    ]
    result = budget_select(packs, max_tokens=None, max_chars=500_000)

    # when
    metrics = build_metrics(
        cluster_id="c",
        agent_id="a",
        role="worker",
        iteration=1,
        triggered_by="ISSUE_OPENED",
        trigger_from="system",
        max_tokens=100_000,
        sources_count=1,
        result=result,
    )

    # then
    assert secret in result.context
    assert metrics["truncation"]["maxContextChars"]["applied"] is True
    assert metrics["truncation"]["maxContextChars"]["afterChars"] <= 500_000
    assert metrics["total"]["chars"] == len(result.context)
    packs_by_id = {entry["id"]: entry for entry in metrics["packs"]}
    assert packs_by_id["big-optional"]["status"] == "skipped"
    assert packs_by_id["big-optional"]["reason"] == "max_chars"
    assert packs_by_id["huge"]["status"] == "included"
    assert packs_by_id["huge"]["truncated"] is True
    assert secret not in json.dumps(metrics)
    assert secret not in metrics_line(metrics)


def test_missing_max_tokens_is_reported_as_the_default() -> None:
    # Strategy parsing resolves a missing or zero maxTokens to 100000 (SPEC §2) and passes it in;
    # the metrics report what the build actually used.
    packs = [Pack(id="header", section="header", priority="required", order=0, full="h")]

    metrics = _metrics(packs, max_tokens=100_000)

    assert metrics["strategy"]["maxTokens"] == 100_000
    assert metrics["budget"]["maxTokens"] == 100_000
    assert metrics["budget"]["remainingTokens"] == 99_999


def test_metrics_line_is_the_prefix_and_compact_json() -> None:
    packs = [Pack(id="header", section="header", priority="required", order=0, full="h")]
    metrics = _metrics(packs)

    line = metrics_line(metrics)

    assert line.startswith("[ContextMetrics] {")
    assert "\n" not in line
    assert ", " not in line
    assert ": " not in line
    assert json.loads(line.removeprefix("[ContextMetrics] ")) == metrics


def test_metrics_are_deterministic() -> None:
    packs = [
        Pack(id="b", section="sources", priority="low", order=1, full="b" * 30, compact="b"),
        Pack(id="a", section="header", priority="required", order=0, full="a" * 30),
    ]

    assert metrics_line(_metrics(packs, max_tokens=9)) == metrics_line(
        _metrics(packs, max_tokens=9)
    )
