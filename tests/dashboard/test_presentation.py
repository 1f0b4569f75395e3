"""The inspector's pure helpers: bar geometry, reasons in words, build diffs, chart layout."""

from __future__ import annotations

import math
from typing import Any

import pytest

from context.budget import Pack, PackDecision, budget_select, estimate_tokens
from context.metrics import build_metrics
from context.selectors import BuildRecord
from dashboard.charts import BASELINE, agent_charts, build_point, cluster_charts
from dashboard.presentation import (
    bar_geometry,
    decision_rows,
    pack_diff,
    prompt_diff,
    time_text,
)


def decisions_of(packs: list[Pack], max_tokens: int | None, max_chars: int = 500_000) -> Any:
    result = budget_select(packs, max_tokens=max_tokens, max_chars=max_chars)
    return [d.to_dict() for d in result.decisions], result


def typed(decisions: list[dict[str, Any]]) -> list[PackDecision]:
    return [PackDecision.from_dict(d) for d in decisions]


def sizes_of(packs: list[Pack]) -> dict[str, tuple[int, int | None]]:
    return {
        p.id: (estimate_tokens(p.full), estimate_tokens(p.compact) if p.compact else None)
        for p in packs
    }


def req(pack_id: str, tokens: int, order: int) -> Pack:
    return Pack(pack_id, pack_id, "required", order, "x" * (4 * tokens), required=True)


def src(pack_id: str, priority: str, tokens: int, order: int, compact: int = 0) -> Pack:
    return Pack(
        pack_id,
        "sources",
        priority,
        order,
        "y" * (4 * tokens),
        compact="z" * (4 * compact) if compact else None,
    )


PACKS = [
    req("header", 100, 0),
    src("source:A:0", "high", 300, 1, compact=50),
    src("source:B:1", "low", 800, 2),
    req("triggeringMessage", 20, 3),
]


def rows_for(packs: list[Pack], max_tokens: int | None, **kwargs: Any) -> list[Any]:
    decisions, _ = decisions_of(packs, max_tokens)
    return decision_rows(typed(decisions), max_tokens=max_tokens, sizes=sizes_of(packs), **kwargs)


def test_bar_segments_and_remainder_sum_to_the_whole_width() -> None:
    rows = rows_for(PACKS, 1000)

    bar = bar_geometry(rows, max_tokens=1000)

    widths = sum(s.width for s in bar.segments) + bar.remainder_width
    assert math.isclose(widths, 100)
    assert bar.tick == 100
    assert bar.over_tokens == 0
    assert [s.id for s in bar.segments] == ["header", "source:A:0", "triggeringMessage"]
    assert all(
        a.end == pytest.approx(b.x) for a, b in zip(bar.segments, bar.segments[1:], strict=False)
    )
    assert bar.left_tokens == 1000 - 100 - 300 - 20
    assert [r.id for r in bar.skipped] == ["source:B:1"]


def test_a_required_overflow_goes_past_the_tick_in_over_segments() -> None:
    rows = rows_for(PACKS, 60)

    bar = bar_geometry(rows, max_tokens=60)

    assert bar.used_tokens == 120  # header 100 + trigger 20; both optional packs skipped
    assert bar.over_tokens == 60
    assert bar.tick == pytest.approx(50)
    assert math.isclose(sum(s.width for s in bar.segments) + bar.remainder_width, 100)
    assert bar.remainder_width == 0
    over = [s for s in bar.segments if s.over]
    assert [s.id for s in over] == ["header", "triggeringMessage"]
    assert min(s.x for s in over) == pytest.approx(50)  # nothing over starts before the tick
    assert all(s.end <= 50 + 1e-9 for s in bar.segments if not s.over)


def test_the_bar_shows_compact_and_truncated_looks() -> None:
    compact_rows = rows_for(PACKS, 200)
    assert {s.id: s.look for s in bar_geometry(compact_rows, max_tokens=200).segments} == {
        "header": "full",
        "source:A:0": "compact",
        "triggeringMessage": "full",
    }
    big = [req("header", 100, 0), req("triggeringMessage", 20, 1)]
    decisions, _ = decisions_of(big, None, max_chars=300)
    rows = decision_rows(typed(decisions), max_tokens=None, max_chars=300)
    looks = {s.id: s.look for s in bar_geometry(rows, max_tokens=None).segments}
    assert looks["header"] == "truncated"


def test_reasons_in_words() -> None:
    fits = {r.id: r.sentence for r in rows_for(PACKS, 1000)}
    assert fits["header"] == "full — required, always included"
    assert fits["source:A:0"] == "full — fits in the 880 tokens left after required packs"
    assert fits["source:B:1"] == (
        "skipped — 800 tokens did not fit in the 580 tokens left after higher-ranked packs"
    )

    tight = {r.id: r.sentence for r in rows_for(PACKS, 200)}
    assert tight["source:A:0"] == (
        "compact — full (300 tokens) did not fit in the 80 tokens left after required packs; "
        "compact used"
    )

    over = {r.id: r.sentence for r in rows_for(PACKS, 60)}
    assert over["header"] == "full — required, kept past the budget: +40 over"
    assert over["source:A:0"] == (
        "skipped — neither full (300 tokens) nor compact (50 tokens) fit in the budget: "
        "nothing was left after required packs"
    )


def test_reasons_for_empty_sources_and_the_char_guard() -> None:
    packs = [
        req("header", 100, 0),
        src("source:E:0", "medium", 0, 1),
        src("source:L:1", "low", 50, 2),
    ]
    decisions, _ = decisions_of(packs, None, max_chars=300)
    rows = {r.id: r for r in decision_rows(typed(decisions), max_tokens=None, max_chars=300)}

    assert rows["source:E:0"].sentence == "skipped — no messages matched this source"
    assert rows["source:L:1"].sentence.startswith("skipped — dropped by the 300-char guard")
    assert rows["header"].sentence == "truncated — cut by the 300-char guard to 300 chars"
    recorded = decision_rows(typed(decisions), max_tokens=None)
    assert "the max-chars guard" in recorded[0].sentence


def test_rows_without_sizes_still_explain_the_budget() -> None:
    decisions, _ = decisions_of(PACKS, 1000)
    rows = {r.id: r.sentence for r in decision_rows(typed(decisions), max_tokens=1000)}
    assert rows["source:B:1"] == (
        "skipped — did not fit in the 580 tokens left after higher-ranked packs"
    )


def test_pack_diff_classifies_added_dropped_changed_and_unchanged() -> None:
    a, _ = decisions_of(PACKS, 1000)
    b, _ = decisions_of([*PACKS[:1], src("source:A:0", "high", 300, 1, 50), *PACKS[2:]], 200)
    a.append(
        {
            "id": "source:Gone:9",
            "status": "included",
            "variant": "full",
            "order": 9,
            "estimatedTokens": 5,
        }
    )
    b.append(
        {
            "id": "source:New:8",
            "status": "included",
            "variant": "full",
            "order": 8,
            "estimatedTokens": 7,
        }
    )
    texts = {"header": "h", "triggeringMessage": "t"}

    changes = {c.id: c for c in pack_diff(a, texts, b, {**texts, "header": "h2"})}

    assert changes["source:New:8"].kind == "added"
    assert changes["source:Gone:9"].kind == "dropped"
    assert changes["source:A:0"].kind == "changed"
    assert changes["source:A:0"].notes == ("full → compact", "300 → 50 tokens (-250)")
    assert changes["header"].kind == "changed"
    assert changes["header"].notes == ("text changed",)
    assert changes["triggeringMessage"].kind == "unchanged"
    assert changes["source:B:1"].kind == "unchanged"  # skipped in both
    assert changes["source:B:1"].before == "skipped (did not fit)"


def test_prompt_diff_marks_lines_and_keeps_prefixes() -> None:
    lines = prompt_diff("one\ntwo\nthree\n", "one\n2\nthree\n", a_name="A", b_name="B")

    kinds = [(line.kind, line.text) for line in lines]
    assert kinds[:3] == [("file", "--- A"), ("file", "+++ B"), ("hunk", "@@ -1,3 +1,3 @@")]
    assert ("del", "-two") in kinds
    assert ("add", "+2") in kinds
    assert ("ctx", " one") in kinds
    assert prompt_diff("same", "same") == []


def test_time_text() -> None:
    assert time_text(0) == "1970-01-01 00:00:00 UTC"
    assert time_text(10**18) == str(10**18)


def record(build_id: int, agent: str, metrics: dict[str, Any], started: int) -> BuildRecord:
    budget = metrics["budget"]
    return BuildRecord(
        id=build_id,
        cluster_id="c",
        agent_id=agent,
        role="",
        iteration=build_id,
        started_at=started,
        trigger_message_id="",
        trigger_topic="GO",
        max_tokens=budget["maxTokens"],
        final_tokens=budget["finalTokens"],
        metrics=metrics,
    )


def metrics_for(max_tokens: int, max_chars: int = 500_000) -> dict[str, Any]:
    _, result = decisions_of(PACKS, max_tokens, max_chars=max_chars)
    return build_metrics(
        cluster_id="c",
        agent_id="w",
        role=None,
        iteration=1,
        triggered_by="GO",
        trigger_from="s",
        max_tokens=max_tokens,
        sources_count=2,
        result=result,
    )


def test_build_point_counts_pack_fates() -> None:
    point = build_point(record(1, "w", metrics_for(200), 10))
    assert point.counts == (2, 1, 0, 1)  # full, compact, truncated, skipped
    assert point.over == 0

    over = build_point(record(2, "w", metrics_for(60), 20))
    assert over.over == 60

    cut = build_point(record(3, "w", metrics_for(100_000, max_chars=300), 30))
    assert cut.truncated
    assert cut.counts[2] >= 1


def test_agent_charts_draw_one_bar_per_build_and_markers_by_shape() -> None:
    builds = [
        record(1, "w", metrics_for(1000), 10),
        record(2, "w", metrics_for(60), 20),
        record(3, "w", metrics_for(100_000, max_chars=300), 30),
    ]

    chart = agent_charts("w", list(reversed(builds)))

    assert [p.id for p in chart.points] == [1, 2, 3]  # oldest first whatever the input order
    assert len([r for r in chart.token_bars if r.kind == "tokens"]) == 3
    assert [r.kind for r in chart.token_bars].count("over") == 1
    assert {m.kind for m in chart.markers} == {"over", "truncated"}
    assert all(0 <= r.y <= BASELINE and r.y + r.height <= BASELINE + 0.01 for r in chart.token_bars)
    assert chart.budget_path.startswith("M")
    assert "3 builds" in chart.summary
    assert "1 over budget" in chart.summary
    assert [
        c.agent_id for c in cluster_charts([*builds, record(4, "a", metrics_for(1000), 5)])
    ] == [
        "a",
        "w",
    ]
