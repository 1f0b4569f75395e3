"""The inspector's pure helpers: bar geometry, reasons in words, build diffs, chart layout."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from context.budget import Pack, PackDecision, budget_select, estimate_tokens
from context.metrics import build_metrics
from context.selectors import BuildRecord
from dashboard.charts import (
    TOKENS_FRAME,
    agent_chart,
    build_point,
    cluster_charts,
    cluster_summary,
    nice_step,
)
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


def test_agent_chart_draws_one_column_per_build_and_markers_by_shape() -> None:
    builds = [
        record(1, "w", metrics_for(1000), 10),
        record(2, "w", metrics_for(60), 20),
        record(3, "w", metrics_for(100_000, max_chars=300), 30),
    ]

    chart = agent_chart("w", list(reversed(builds)), role="implementation")

    assert [p.id for p in chart.points] == [1, 2, 3]  # oldest first whatever the input order
    assert len(chart.columns) == 3
    assert [c.over_h > 0 for c in chart.columns] == [False, True, False]
    assert {m.kind for m in chart.markers} == {"over", "truncated"}
    baseline = TOKENS_FRAME.baseline
    for c in chart.columns:
        assert TOKENS_FRAME.top <= c.within_y <= baseline
        assert math.isclose(c.within_y + c.within_h, baseline, abs_tol=0.02)
        assert c.x >= 0
        assert c.x + c.width <= 100.01
    assert math.isclose(sum(c.slot_w for c in chart.columns), 100, abs_tol=0.05)
    # a budget of 100,000 next to builds of a few hundred tokens is named, not drawn
    assert chart.budget.off_scale
    assert chart.budget.label == "budget 100k ↑"
    assert "3 builds" in chart.summary
    assert "1 over budget" in chart.summary
    assert chart.stats.over_builds == 1
    assert chart.stats.truncated_builds == 1
    assert [
        c.agent_id for c in cluster_charts([*builds, record(4, "a", metrics_for(1000), 5)])
    ] == [
        "a",
        "w",
    ]


def test_a_budget_near_the_builds_is_a_step_line_and_the_scale_holds_it() -> None:
    chart = agent_chart(
        "w", [record(1, "w", metrics_for(1000), 10), record(2, "w", metrics_for(200), 20)]
    )

    assert not chart.budget.off_scale
    levels = {s.y1 for s in chart.budget.segments if s.y1 == s.y2}
    assert len(levels) == 2  # the budget moved from 1,000 to 200: two levels, joined
    assert any(s.x1 == s.x2 for s in chart.budget.segments)
    assert chart.y_ticks[0].label == "0"
    assert chart.y_ticks[-1].y >= TOKENS_FRAME.top
    assert [t.text for t in chart.x_ticks] == ["00:00:00", "00:00:00"]
    assert chart.x_ticks[0].style == "seconds"


def test_nice_steps_and_the_cluster_summary() -> None:
    assert [nice_step(v) for v in (7, 702, 1080, 108_000)] == [2, 200, 500, 50_000]
    charts = cluster_charts(
        [
            record(1, "w", metrics_for(1000), 10),
            record(2, "w", metrics_for(60), 20),
            record(3, "v", metrics_for(1000), 30),
        ]
    )

    summary = cluster_summary(charts)

    assert summary.builds == 3
    assert summary.agents_with_builds == 2
    assert summary.over_builds == 1
    assert summary.max_agent == "w"
    assert summary.max_point is not None
    assert summary.max_point.over
    assert cluster_summary([]).median_percent is None


# ---- one total per build, reasons that say what happened, diffs of reasons ---------------------


def odd_packs() -> list[Pack]:
    """Packs whose sizes do not divide by four: each pack's estimate rounds up on its own."""
    return [
        Pack("header", "header", "required", 0, "h" * 401, required=True),
        Pack("source:A:0", "sources", "required", 1, "a" * 201, required=True),
        Pack("triggeringMessage", "triggeringMessage", "required", 2, "t" * 41, required=True),
    ]


def test_the_bar_total_is_the_builds_one_total() -> None:
    packs = odd_packs()
    result = budget_select(packs, max_tokens=100, max_chars=500_000)
    rows = decision_rows(
        result.decisions,
        max_tokens=100,
        sizes=sizes_of(packs),
        total_tokens=result.budget.final_tokens,
    )
    # per pack 101 + 51 + 11 = 163, but the prompt (643 chars) is 161 tokens: the rows show
    # what each pack adds to the total, so they add up to it
    assert sum(r.own_tokens for r in rows if r.included) == 163
    assert sum(r.tokens for r in rows if r.included) == 161
    assert result.budget.final_tokens == 161

    bar = bar_geometry(rows, max_tokens=100, total_tokens=result.budget.final_tokens)

    assert bar.used_tokens == 161
    assert bar.over_tokens == 61  # 161 - 100, as every other view says
    assert bar.used_percent == 161
    drawn = sum(s.width for s in bar.segments) + bar.remainder_width
    assert math.isclose(drawn, 100.0)
    tick = bar.tick or 0
    over_width = sum(s.width for s in bar.segments if s.over)
    assert math.isclose(over_width, 100 - tick)


def test_build_total_and_summary_use_final_tokens_everywhere() -> None:
    from context.metrics import build_summary, build_total

    packs = odd_packs()
    result = budget_select(packs, max_tokens=100, max_chars=500_000)
    metrics = build_metrics(
        cluster_id="c",
        agent_id="w",
        role=None,
        iteration=3,
        triggered_by="GO",
        trigger_from="s",
        max_tokens=100,
        sources_count=1,
        result=result,
    )

    assert metrics["budget"]["overBudgetTokens"] == 63  # the walk's own, pack by pack
    assert build_total(metrics) == (161, 100, 61)
    assert build_summary(metrics, iteration=3) == "161 tokens of 100 · 61 over budget · iteration 3"
    point = build_point(record(1, "w", metrics, 10))
    assert (point.tokens, point.budget, point.over) == (161, 100, 61)


def test_an_empty_source_whose_only_match_is_the_trigger_says_so() -> None:
    packs = [
        req("header", 10, 0),
        src("source:ISSUE_OPENED:0", "required", 0, 1),
        src("source:NOTES:1", "low", 0, 2),
        req("triggeringMessage", 5, 3),
    ]

    rows = {
        r.id: r.sentence
        for r in rows_for(
            packs,
            1000,
            trigger_sources=frozenset({"source:ISSUE_OPENED:0"}),
            trigger_label="ISSUE_OPENED #1",
        )
    }

    assert rows["source:ISSUE_OPENED:0"] == (
        "skipped — its only match is the triggering message ISSUE_OPENED #1, which the prompt "
        "carries once, in triggeringMessage"
    )
    assert rows["source:NOTES:1"] == "skipped — no messages matched this source"


def test_a_changed_reason_for_leaving_a_pack_out_is_a_change() -> None:
    a = [{"id": "source:W:3", "status": "skipped", "reason": "empty", "order": 3}]
    b = [{"id": "source:W:3", "status": "skipped", "reason": "budget", "order": 3}]
    same = [{"id": "source:W:3", "status": "skipped", "reason": "budget", "order": 3}]

    (change,) = pack_diff(a, {}, b, {})
    (still,) = pack_diff(b, {}, same, {})

    assert change.kind == "changed"
    assert change.notes == ("skipped (empty) → skipped (did not fit)",)
    assert still.kind == "unchanged"


def test_the_clusters_list_shows_the_most_loaded_agent() -> None:
    from dashboard.views.clusters import usage_of

    def build(agent: str, tokens: int, budget: int) -> BuildRecord:
        return BuildRecord(
            id=1,
            cluster_id="c",
            agent_id=agent,
            role="",
            iteration=1,
            started_at=1,
            trigger_message_id="",
            trigger_topic="GO",
            max_tokens=budget,
            final_tokens=tokens,
            metrics={},
        )

    usage = usage_of([build("planner", 225, 100_000), build("worker", 343, 650)])

    assert usage is not None
    assert (usage.agent_id, usage.tokens, usage.budget, usage.percent) == ("worker", 343, 650, 53)
    assert usage.agents == 2
    assert usage.detail == "worker: 343 / 650 (53%); planner: 225 / 100,000 (0%)"
    assert usage_of([]) is None


# ---- the topology and the timeline's times --------------------------------------------------


def chain(n: int) -> list[dict[str, Any]]:
    """n agents, each triggered by the topic of the one before; the first by the outside."""
    agents = []
    for i in range(n):
        agents.append(
            {
                "id": f"agent-{i}",
                "triggers": [{"topic": "ISSUE_OPENED" if i == 0 else f"STEP_{i - 1}_DONE"}],
                "hooks": {"onComplete": {"config": {"topic": f"STEP_{i}_DONE"}}},
            }
        )
    # two agents listen to the outside too: nested arcs from the same node
    agents[2]["triggers"].append({"topic": "ISSUE_OPENED"})
    return agents


def test_topology_labels_sit_outside_every_arc_they_share_a_height_with() -> None:
    from dashboard.topology import NODE_W, topology

    graph = topology(chain(5))
    column_right = graph.nodes[0].x + NODE_W

    for edge in graph.edges:
        if edge.anchor != "start":
            continue
        for other in graph.edges:
            if other.anchor != "start":
                continue
            numbers = [float(v) for v in re.findall(r"-?\d+\.?\d*", other.path)]
            ys = numbers[1::2]
            apex = column_right + 0.75 * (max(numbers[0::2]) - column_right)
            if min(ys) - 4 <= edge.label_y <= max(ys) + 4:
                assert edge.label_x > apex, (edge.topic, other.topic)
    labels = [(e.label_x, e.label_y) for e in graph.edges]
    assert len(set(labels)) == len(labels)


def test_topology_is_drawn_at_one_scale_whatever_the_number_of_agents() -> None:
    from dashboard.topology import topology

    small, large = topology(chain(3)), topology(chain(8))

    # the same node size and spacing, so the page draws both at the same text size
    assert small.nodes[1].y - small.nodes[0].y == large.nodes[1].y - large.nodes[0].y
    assert large.height > small.height


def test_row_times_carry_their_day() -> None:
    from dashboard.templatetags.dashboard_ui import stamp_text

    assert stamp_text(1_770_024_000_000) == "02-02 09:20:00"
    assert stamp_text(None) == ""


@pytest.mark.parametrize(
    "ms",
    [0, 1_770_024_000_123, 253_402_300_799_999, -30_000_000_000_000, -62_135_596_800_000, 10**18],
)
def test_timeline_rows_write_times_as_the_filters_do(ms: int) -> None:
    from dashboard.presentation.timeline import rows_html
    from dashboard.templatetags.dashboard_ui import iso_ms, stamp_text, utc_text
    from ledger.interfaces import MessageRecord

    message = MessageRecord(id="m", cluster_id="c", sequence=1, timestamp=ms, topic="T", sender="s")

    html = rows_html([(message, None)])

    [stamped] = re.findall(
        r'<time class="msg-time num" datetime="(.*?)" data-ms="(.*?)" '
        r'data-format="stamp" title="(.*?)">(.*?)</time>',
        html,
    )
    assert stamped == (iso_ms(ms), str(ms), utc_text(ms), stamp_text(ms))


def test_the_topology_panel_escapes_every_config_text_and_marks_the_picked_version() -> None:
    import dataclasses

    from dashboard.presentation.topology_panel import topology_panel_html
    from dashboard.topology import topology

    hostile = "<b>\"x'&"
    graph = topology(chain(3))
    graph = dataclasses.replace(
        graph,
        nodes=tuple(dataclasses.replace(n, id=n.id + hostile) for n in graph.nodes),
        edges=tuple(dataclasses.replace(e, topic=e.topic + hostile) for e in graph.edges),
    )
    versions = [
        {"version": 1, "sender": "", "summary": "the config it was created with", "current": False},
        {"version": 2, "sender": hostile, "summary": hostile, "current": True},
    ]

    html = topology_panel_html(
        topology=graph,
        tones=range(2),
        node_h=28,
        completion=hostile,
        config_versions=versions,
        config_version=2,
        oob=True,
    )

    assert "<b>" not in html
    escaped = "&lt;b&gt;&quot;x&#x27;&amp;"
    assert html.count(f"<title>agent-0{escaped}</title>") == 1
    assert html.count(f"{escaped}</text>") >= len(graph.nodes)
    assert html.count('<g class="edge ') == len(graph.edges)
    assert '<li class="picked"><a href="?config_version=2" aria-current="true">v2</a>' in html
    assert '<li><a href="?config_version=1">v1</a> <span class="muted small">the config' in html
    assert html.startswith('    <section class="panel" id="topology-panel" ')
    assert '"topology-title" hx-swap-oob="true">' in html.splitlines()[0]
    assert f'<p class="muted small completion-rule">{escaped}</p>' in html
    empty = topology_panel_html(
        topology=topology([]),
        tones=(),
        node_h=28,
        completion="",
        config_versions=[],
        config_version=1,
    )
    assert "No topic connects these agents" in empty
    assert "config-versions" not in empty
