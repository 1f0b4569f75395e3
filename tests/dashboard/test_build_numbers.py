"""One number per build (SPEC §3.6; issue 20 item 4): every figure of a recorded build agrees.

Each pack's own estimate rounds up (SPEC §3.3), so a build's packs add up to more than its prompt.
These builds are made so that the old figures contradicted each other exactly as reported: the
caption's "N left" beside a row's "did not fit in the N-1 left", pack rows summing past the
prompt's total, and "+over budget" beside required rows whose overs summed past it.
"""

from __future__ import annotations

import re
from typing import Any

from context.budget import Pack, budget_select
from context.metrics import build_metrics, build_total
from context.selectors import BuildRecord
from dashboard.presentation import bar_geometry, decision_rows
from dashboard.presentation.numbers import build_numbers


def recorded(packs: list[Pack], max_tokens: int) -> BuildRecord:
    """A build as the context engine records it: only its metrics, no pack texts."""
    result = budget_select(packs, max_tokens=max_tokens, max_chars=500_000)
    metrics = build_metrics(
        cluster_id="c",
        agent_id="worker",
        role="implementation",
        iteration=1,
        triggered_by="ISSUE_OPENED",
        trigger_from="system",
        max_tokens=max_tokens,
        sources_count=2,
        result=result,
    )
    return BuildRecord(
        id=7,
        cluster_id="c",
        agent_id="worker",
        role="implementation",
        iteration=1,
        started_at=0,
        trigger_message_id="m",
        trigger_topic="ISSUE_OPENED",
        max_tokens=max_tokens,
        final_tokens=metrics["budget"]["finalTokens"],
        metrics=metrics,
    )


def shown(build: BuildRecord) -> tuple[list[Any], Any]:
    """What the build page and the inspector show for a recorded build (views/runs.py)."""
    rows = decision_rows(
        build.decisions, max_tokens=build.max_tokens, total_tokens=build.final_tokens
    )
    return rows, bar_geometry(rows, max_tokens=build.max_tokens, total_tokens=build.final_tokens)


def left_figures(sentence: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"the ([\d,]+) tokens? left", sentence)]


def under_budget() -> BuildRecord:
    # Own estimates 251 + 250 + 101 = 602; the prompt, 2,402 chars, is 601 tokens of 650.
    # The walk keeps 48 after the source, the total leaves 49: the low pack (49 tokens) was
    # left out because the walk had 48.
    return recorded(
        [
            Pack("header", "header", "required", 0, "h" * 1001, required=True),
            Pack("source:PLAN_READY:0", "sources", "high", 1, "p" * 401),
            Pack("source:WORKER_PROGRESS:1", "sources", "low", 2, "w" * 196),
            Pack(
                "triggeringMessage", "triggeringMessage", "required", 3, "t" * 1000, required=True
            ),
        ],
        650,
    )


def over_budget() -> BuildRecord:
    # Three required packs past a 200-token budget: own estimates 316 + 26 + 26 = 368 (the walk
    # counts 168 over), the prompt (1,463 chars) is 366 tokens, 166 over.
    return recorded(
        [
            Pack("header", "header", "required", 0, "h" * 1261, required=True),
            Pack("source:ISSUE_OPENED:0", "sources", "required", 1, "s" * 101, required=True),
            Pack("triggeringMessage", "triggeringMessage", "required", 2, "t" * 101, required=True),
        ],
        200,
    )


def test_the_recorded_builds_carry_the_contradictions_of_the_report() -> None:
    # Not a test of the pages: it pins that the builds below still hold the rounding that made
    # the old pages disagree, so the tests after it would fail on the old figures.
    under, over = under_budget(), over_budget()
    assert sum(d.estimated_tokens for d in under.decisions if d.status == "included") == 602
    assert build_total(under.metrics) == (601, 650, 0)
    assert under.metrics["budget"]["remainingTokens"] == 48
    assert over.metrics["budget"]["overBudgetTokens"] == 168
    assert build_total(over.metrics) == (366, 200, 166)


def test_pack_rows_add_up_to_the_prompt_total_they_sit_beside() -> None:
    rows, bar = shown(under_budget())

    assert sum(r.tokens for r in rows if r.included) == 601 == bar.used_tokens
    assert sum(s.tokens for s in {s.id: s for s in bar.segments}.values()) == 601
    assert (bar.used_tokens, bar.max_tokens, bar.left_tokens) == (601, 650, 49)


def test_no_row_names_a_left_figure_the_caption_contradicts_without_saying_why() -> None:
    rows, bar = shown(under_budget())
    by_id = {r.id: r for r in rows}

    # Included packs: the left before each is the budget minus what the total had taken.
    assert by_id["source:PLAN_READY:0"].sentence == (
        "full — fits in the 149 tokens left after required packs"
    )
    assert 650 - (by_id["header"].tokens + by_id["triggeringMessage"].tokens) == 149
    # The left-out pack was weighed against the walk's 48; the total leaves 49 (the caption's
    # figure), so the row names both and says why they differ.
    skipped = by_id["source:WORKER_PROGRESS:1"].sentence
    assert skipped.startswith("skipped — did not fit in the 48 tokens left after higher-ranked")
    assert "rounded up on its own; the prompt's total leaves 49 tokens" in skipped
    assert bar.left_tokens == 49


def test_required_rows_overs_add_up_to_the_builds_over_budget() -> None:
    rows, bar = shown(over_budget())

    overs = [r.over for r in rows]
    assert sum(overs) == bar.over_tokens == 166
    assert sum(r.tokens for r in rows) == bar.used_tokens == 366
    sentences = " ".join(r.sentence for r in rows)
    said = [int(n) for n in re.findall(r"\+(\d+) over", sentences)]
    assert sum(said) == 166
    assert said == [n for n in overs if n]


def test_build_numbers_telescope_to_the_total_in_the_walks_order() -> None:
    build = over_budget()
    numbers = build_numbers(build.decisions, max_tokens=200, total_tokens=build.final_tokens)

    assert (numbers.tokens, numbers.budget, numbers.over, numbers.left) == (366, 200, 166, 0)
    header = numbers.packs["header"]
    assert (header.tokens, header.left_before, header.over) == (316, 200, 116)
    assert numbers.packs["source:ISSUE_OPENED:0"].left_before == 0
    assert sum(p.tokens for p in numbers.packs.values()) == 366


def test_a_recorded_total_that_differs_from_the_chars_is_kept_and_still_added_up_to() -> None:
    build = under_budget()
    numbers = build_numbers(build.decisions, max_tokens=650, total_tokens=590)

    assert numbers.tokens == 590
    included = [d.id for d in build.decisions if d.status == "included"]
    assert sum(numbers.packs[i].tokens for i in included) == 590
    assert all(p.tokens >= 0 for p in numbers.packs.values())


def test_the_build_diff_compares_packs_on_the_same_scale_as_the_rows() -> None:
    from dashboard.presentation import pack_diff
    from dashboard.presentation.numbers import packs_on_the_total_scale

    a, b = under_budget(), over_budget()
    shown_a = packs_on_the_total_scale(
        a.metrics["packs"], max_tokens=a.max_tokens, total_tokens=a.final_tokens
    )
    shown_b = packs_on_the_total_scale(
        b.metrics["packs"], max_tokens=b.max_tokens, total_tokens=b.final_tokens
    )

    assert sum(p["estimatedTokens"] for p in shown_a if p["status"] == "included") == 601
    assert sum(p["estimatedTokens"] for p in shown_b if p["status"] == "included") == 366
    rows_a, _ = shown(a)
    changes = {c.id: c for c in pack_diff(shown_a, {}, shown_b, {})}
    # source:PLAN_READY:0 adds 100 tokens to its build's total (its own estimate is 101)
    plan = next(r for r in rows_a if r.id == "source:PLAN_READY:0")
    assert (plan.tokens, plan.own_tokens) == (100, 101)
    assert changes["source:PLAN_READY:0"].before == "full · 100 tokens"
    # the recorded metrics themselves are left as the engine wrote them (SPEC §3.6)
    assert sum(p["estimatedTokens"] for p in a.metrics["packs"] if p["status"] == "included") == 602
