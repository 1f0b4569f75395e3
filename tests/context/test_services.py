from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import override_settings

from context.models import ContextBuild
from context.services import context_build
from ledger.errors import InvalidInput, NotFound
from ledger.filters import MessageFilter
from ledger.interfaces import (
    ImportedMessage,
    MessageDraft,
    cluster_create,
    message_import_batch,
    message_publish,
    message_query,
)

pytestmark = pytest.mark.django_db

T0 = 4_102_444_800_000  # 2100-01-01T00:00:00.000Z


@pytest.fixture(autouse=True)
def _clock_far_behind(settings: Any) -> None:
    """Messages here are dated 2100, ahead of any build's clock (so that a recorded build
    starts right after them): allow timestamps that far ahead of the server's clock."""
    settings.LEDGER_MAX_CLOCK_SKEW_MS = 200 * 365 * 86_400_000


def make_cluster(agents: list[dict[str, Any]], cluster_id: str = "c1") -> str:
    return cluster_create(cluster_id=cluster_id, config={"agents": agents}, created_at=T0).id


def add(cluster_id: str, *messages: tuple[int, str, str, dict[str, Any]]) -> None:
    """Messages at T0 + offset ms, keeping their timestamps."""
    existing = len(message_query(cluster_id=cluster_id, limit=None))
    message_import_batch(
        cluster_id=cluster_id,
        messages=[
            ImportedMessage(
                id=f"m{existing + i}",
                timestamp=T0 + offset,
                topic=topic,
                sender=sender,
                receiver="broadcast",
                content=content,
                metadata=content.pop("_metadata", None),
            )
            for i, (offset, topic, sender, content) in enumerate(messages)
        ],
    )


def agent(agent_id: str, sources: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": extra.pop("role", "implementation"),
        "prompt": "Do the work.",
        "triggers": [{"topic": "GO", "action": "execute_task"}],
        "contextStrategy": {"sources": sources, **extra},
    }


def trigger(cluster_id: str, offset: int = 1000) -> None:
    add(cluster_id, (offset, "GO", "system", {"text": "go"}))


def texts_of(prompt: str, *needles: str) -> list[bool]:
    return [n in prompt for n in needles]


def test_selection_strategies_through_the_database() -> None:
    cases = {
        "latest2": ({"topic": "T", "strategy": "latest", "amount": 2}, ["two", "three"]),
        "oldest2": ({"topic": "T", "strategy": "oldest", "amount": 2}, ["one", "two"]),
        "all": ({"topic": "T", "strategy": "all"}, ["one", "two", "three"]),
        "all2": ({"topic": "T", "strategy": "all", "amount": 2}, ["one", "two"]),
        "limit1": ({"topic": "T", "limit": 1}, ["three"]),
        "amount1limit2": ({"topic": "T", "amount": 1, "limit": 2}, ["three"]),
    }
    cid = make_cluster([agent(name, [source]) for name, (source, _) in cases.items()])
    add(
        cid,
        (0, "T", "a", {"text": "one"}),
        (10, "T", "a", {"text": "two"}),
        (20, "T", "a", {"text": "three"}),
    )
    trigger(cid)

    for name, (_, expected) in cases.items():
        prompt = context_build(cluster_id=cid, agent_id=name, preview=True).context
        found = [w for w in ("one", "two", "three") if f"\n{w}\n" in prompt]
        assert found == expected, name
        positions = [prompt.index(f"\n{w}\n") for w in found]
        assert positions == sorted(positions), name


def test_required_anchors_survive_max_tokens_one() -> None:
    sources = [
        {"topic": "ISSUE_OPENED", "priority": "required"},
        {"topic": "PLAN_READY", "priority": "required"},
        {"topic": "NOTES", "priority": "low"},
        {"topic": "EXTRA", "priority": "high"},
    ]
    cid = make_cluster([agent("worker", sources, maxTokens=1)])
    add(
        cid,
        (0, "ISSUE_OPENED", "system", {"text": "the issue"}),
        (1, "PLAN_READY", "planner", {"text": "the plan"}),
        (2, "NOTES", "worker", {"text": "optional notes text"}),
        (3, "EXTRA", "worker", {"text": "optional extra text"}),
    )
    add(cid, (1000, "GO", "system", {"text": "trigger text"}))

    outcome = context_build(cluster_id=cid, agent_id="worker", preview=True)

    prompt = outcome.context
    assert "## Triggering Message" in prompt
    assert "trigger text" in prompt
    assert "## Messages from topic: ISSUE_OPENED" in prompt
    assert "## Messages from topic: PLAN_READY" in prompt
    assert "optional notes text" not in prompt
    assert "optional extra text" not in prompt
    decisions = {p["id"]: p for p in outcome.metrics["packs"]}
    for pack_id in ("source:NOTES:2", "source:EXTRA:3"):
        assert decisions[pack_id]["status"] == "skipped"
        assert decisions[pack_id]["reason"] == "budget"


def test_huge_issue_is_cut_by_the_guard_and_metrics_hold_no_text() -> None:
    secret = "SECRET-MARKER-7f3a"
    sources = [
        {"topic": "ISSUE_OPENED", "priority": "required"},
        {"topic": "LOGS", "priority": "low"},
    ]
    cid = make_cluster([agent("worker", sources, maxTokens=1)])
    add(
        cid,
        (0, "ISSUE_OPENED", "system", {"text": secret + "x" * 699_982}),
        (1, "LOGS", "worker", {"text": "y" * 200_000}),
    )
    trigger(cid)

    outcome = context_build(cluster_id=cid, agent_id="worker", preview=True)

    metrics = outcome.metrics
    guard = metrics["truncation"]["maxContextChars"]
    assert guard["applied"] is True
    assert guard["afterChars"] <= 500_000
    assert metrics["total"]["chars"] == len(outcome.context)
    decisions = {p["id"]: p for p in metrics["packs"]}
    assert decisions["source:LOGS:1"]["status"] == "skipped"
    assert decisions["source:ISSUE_OPENED:0"]["status"] == "included"
    assert secret not in json.dumps(metrics)


def test_missing_max_tokens_reports_the_default() -> None:
    cid = make_cluster([agent("worker", [{"topic": "ISSUE_OPENED"}])])
    trigger(cid)

    metrics = context_build(cluster_id=cid, agent_id="worker", preview=True).metrics

    assert metrics["strategy"]["maxTokens"] == 100_000
    assert metrics["budget"]["maxTokens"] == 100_000
    included = [p for p in metrics["packs"] if p["status"] == "included"]
    assert sum(s["chars"] for s in metrics["sections"].values()) == sum(
        p["chars"] for p in included
    )


def test_since_last_task_end_shows_only_later_validations() -> None:
    sources = [{"topic": "VALIDATION_RESULT", "since": "last_task_end"}]
    cid = make_cluster([agent("worker", sources)])
    add(cid, (10, "VALIDATION_RESULT", "validator", {"text": "old verdict"}))
    trigger(cid, 15)

    before_any_task = context_build(cluster_id=cid, agent_id="worker", preview=True).context
    add(
        cid,
        (20, "AGENT_LIFECYCLE", "worker", {"data": {"event": "TASK_COMPLETED"}}),
        (25, "AGENT_LIFECYCLE", "worker", {"data": {"event": "STARTED"}}),
        (30, "VALIDATION_RESULT", "validator", {"text": "new verdict"}),
    )
    trigger(cid, 40)
    after_task = context_build(cluster_id=cid, agent_id="worker", preview=True).context

    assert "old verdict" in before_any_task
    assert "old verdict" not in after_task
    assert "new verdict" in after_task


def test_since_last_agent_start_shows_what_arrived_after_the_previous_build() -> None:
    sources = [{"topic": "NEWS", "since": "last_agent_start"}]
    cid = make_cluster([agent("worker", sources)])
    add(cid, (10, "NEWS", "a", {"text": "first news"}))
    trigger(cid, 20)

    first = context_build(cluster_id=cid, agent_id="worker")
    preview = context_build(cluster_id=cid, agent_id="worker", preview=True)
    message_publish(
        cluster_id=cid,
        draft=MessageDraft(topic="NEWS", sender="a", content={"text": "second news"}),
    )
    message_publish(
        cluster_id=cid, draft=MessageDraft(topic="GO", sender="system", content={"text": "go"})
    )
    second = context_build(cluster_id=cid, agent_id="worker")

    assert "first news" in first.context
    assert "first news" not in preview.context  # a preview sees what the next build would see
    assert "first news" not in second.context
    assert "second news" in second.context
    assert (first.iteration, second.iteration) == (1, 2)
    assert ContextBuild.objects.count() == 2  # the preview changed nothing


def test_unknown_since_is_an_error_naming_value_and_topic() -> None:
    cid = make_cluster([agent("worker", [{"topic": "NEWS", "since": "yesterday"}])])
    trigger(cid)

    with pytest.raises(InvalidInput) as error:
        context_build(cluster_id=cid, agent_id="worker", preview=True)

    assert "yesterday" in error.value.message
    assert "NEWS" in error.value.message


def test_raw_agent_output_never_enters_but_context_safe_does() -> None:
    cid = make_cluster(
        [
            agent("worker", [{"topic": "AGENT_OUTPUT", "amount": 1}]),
            agent("all", [{"topic": "AGENT_OUTPUT"}]),
        ]
    )
    add(
        cid,
        (10, "AGENT_OUTPUT", "w", {"text": "safe output", "_metadata": {"contextSafe": True}}),
        (20, "AGENT_OUTPUT", "w", {"text": "raw output"}),
    )
    trigger(cid)

    latest_one = context_build(cluster_id=cid, agent_id="worker", preview=True).context
    everything = context_build(cluster_id=cid, agent_id="all", preview=True).context

    assert "safe output" in latest_one
    assert "raw output" not in latest_one
    assert "raw output" not in everything


def test_validator_gets_skip_hints_and_others_do_not() -> None:
    results = {
        "criteriaResults": [
            {"id": "AC3", "status": "CANNOT_VALIDATE", "reason": "needs staging"},
            {"id": "AC3", "status": "CANNOT_VALIDATE", "reason": "second reason"},
            {"id": "AC1", "status": "PASS"},
        ]
    }
    cid = make_cluster(
        [
            agent("validator", [{"topic": "ISSUE_OPENED"}], role="validator"),
            agent("worker", [{"topic": "ISSUE_OPENED"}]),
        ]
    )
    add(cid, (10, "VALIDATION_RESULT", "validator", {"data": results}))
    trigger(cid)

    validator = context_build(cluster_id=cid, agent_id="validator", preview=True).context
    worker = context_build(cluster_id=cid, agent_id="worker", preview=True).context

    assert validator.count("**AC3**") == 1
    assert "- **AC3**: needs staging" in validator
    assert "AC3" not in worker


def test_as_of_sequence_sees_only_the_past_and_records_nothing() -> None:
    cid = make_cluster([agent("worker", [{"topic": "NEWS"}])])
    add(cid, (10, "NEWS", "a", {"text": "early"}), (20, "GO", "system", {"text": "go"}))
    add(cid, (30, "NEWS", "a", {"text": "late"}), (40, "GO", "system", {"text": "go again"}))

    past = context_build(cluster_id=cid, agent_id="worker", as_of_sequence=2)
    now = context_build(cluster_id=cid, agent_id="worker", preview=True)

    assert "early" in past.context
    assert "late" not in past.context
    assert "\ngo\n" in past.context
    assert "late" in now.context
    assert past.recorded is False
    assert ContextBuild.objects.count() == 0


def test_max_tokens_override_and_inline_trigger() -> None:
    cid = make_cluster([agent("worker", [{"topic": "ISSUE_OPENED"}], maxTokens=5000)])

    outcome = context_build(
        cluster_id=cid,
        agent_id="worker",
        max_tokens=777,
        triggering_message={"topic": "MANUAL", "sender": "operator", "content": {"text": "hi"}},
        preview=True,
    )

    assert outcome.metrics["budget"]["maxTokens"] == 777
    assert outcome.context.endswith(
        "\n## Triggering Message\n\nTopic: MANUAL\nSender: operator\n\nhi\n"
    )


def test_unknown_agent_and_empty_cluster_are_clear_errors() -> None:
    cid = make_cluster([agent("worker", [])])

    with pytest.raises(NotFound, match="worker"):
        context_build(cluster_id=cid, agent_id="ghost", preview=True)
    with pytest.raises(InvalidInput, match="no message"):
        context_build(cluster_id=cid, agent_id="worker", preview=True)


def test_metrics_line_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    cid = make_cluster([agent("worker", [{"topic": "ISSUE_OPENED"}])])
    trigger(cid)

    with override_settings(CONTEXT_METRICS_STDOUT=True):
        context_build(cluster_id=cid, agent_id="worker", preview=True)
    lines = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("[ContextMetrics] ")
    ]

    assert len(lines) == 1
    assert json.loads(lines[0].removeprefix("[ContextMetrics] "))["agentId"] == "worker"


def test_metrics_ledger_publishes_for_recorded_builds_only() -> None:
    cid = make_cluster([agent("worker", [{"topic": "ISSUE_OPENED"}])])
    trigger(cid)

    with override_settings(CONTEXT_METRICS_LEDGER=True):
        context_build(cluster_id=cid, agent_id="worker", preview=True)
        context_build(cluster_id=cid, agent_id="worker")
    published = message_query(cluster_id=cid, where=MessageFilter(topic="CONTEXT_METRICS"))

    assert len(published) == 1
    assert published[0].sender == "worker"
    assert published[0].receiver == "system"
    assert published[0].data["agentId"] == "worker"


def test_recorded_build_keeps_its_prompt_pack_by_pack() -> None:
    cid = make_cluster([agent("worker", [{"topic": "ISSUE_OPENED"}])])
    add(cid, (0, "ISSUE_OPENED", "system", {"text": "the issue"}))
    trigger(cid)

    outcome = context_build(cluster_id=cid, agent_id="worker")
    build = ContextBuild.objects.get()

    assert "".join(text for _, text in build.pack_texts) == outcome.context
    assert build.started_at > T0 + 1000
    assert build.metrics == outcome.metrics


def test_build_query_count_does_not_grow_with_the_ledger(django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    sources = [
        {"topic": "ISSUE_OPENED", "priority": "required"},
        {"topic": "VALIDATION_RESULT", "since": "last_task_end", "amount": 3},
        {"topic": "WORKER_PROGRESS", "amount": 1},
    ]
    cid = make_cluster([agent("worker", sources)])

    def fill(n: int, start: int) -> None:
        add(
            cid,
            *[
                (start + i, ("WORKER_PROGRESS", "VALIDATION_RESULT")[i % 2], "w", {"text": f"n{i}"})
                for i in range(n)
            ],
        )

    fill(50, 0)
    trigger(cid, 100)
    # cluster, trigger, previous build, the guidance mailbox (two seeks in one statement), task
    # end, one query per source (compact variants are cut from the full rows), then savepoint,
    # lock the cluster, insert build, advance the clock, release
    with django_assert_num_queries(13):
        context_build(cluster_id=cid, agent_id="worker")
    fill(500, 200)
    trigger(cid, 1000)
    with django_assert_num_queries(13):
        context_build(cluster_id=cid, agent_id="worker")


def test_one_query_finds_the_trigger_of_several_topics(django_assert_num_queries) -> None:  # type: ignore[no-untyped-def]
    triggers = [{"topic": t, "action": "execute_task"} for t in ("GO", "RETRY", "NUDGE")]
    cid = make_cluster([{**agent("worker", [{"topic": "ISSUE_OPENED"}]), "triggers": triggers}])
    add(cid, (0, "ISSUE_OPENED", "system", {"text": "the issue"}))
    add(cid, (10, "NUDGE", "system", {"text": "nudge"}), (20, "GO", "system", {"text": "go"}))
    add(cid, (30, "OTHER", "system", {"text": "not a trigger"}))

    # cluster, the trigger's three topics, previous build, the guidance mailbox (two seeks in one
    # statement), the source; then savepoint, lock the cluster, insert the build, advance the
    # clock, release
    with django_assert_num_queries(10):
        outcome = context_build(cluster_id=cid, agent_id="worker")

    assert (outcome.trigger.topic, outcome.trigger.text) == ("GO", "go")
    assert outcome.trigger_fallback is False


def test_a_recorded_build_reads_by_index_seeks_only() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    if connection.vendor != "sqlite":
        pytest.skip("reads SQLite's query plans")
    sources = [
        {"topic": "ISSUE_OPENED", "amount": 1},
        {"topic": "VALIDATION_RESULT", "since": "last_task_end", "amount": 3},
        {"topic": "NOTES", "sender": "w", "since": "last_agent_start", "strategy": "oldest"},
    ]
    triggers = [{"topic": t, "action": "execute_task"} for t in ("GO", "ISSUE_OPENED")]
    cid = make_cluster([{**agent("worker", sources), "triggers": triggers}])
    add(cid, (0, "ISSUE_OPENED", "system", {"text": "the issue"}), (5, "NOTES", "w", {}))
    trigger(cid)
    context_build(cluster_id=cid, agent_id="worker")

    with CaptureQueriesContext(connection) as captured:
        context_build(cluster_id=cid, agent_id="worker")
    reads = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SELECT")]
    plans = []
    for sql in reads:
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            plans.append([str(row[-1]) for row in cursor.fetchall()])

    # cluster, trigger, previous build, the guidance mailbox (two seeks in one statement), task
    # end, three sources, the cluster's lock
    assert len(plans) == 9
    for plan in plans:
        assert [step for step in plan if "TEMP B-TREE" in step] == []
        # Only the few rows of the trigger's and the mailbox's seeks are scanned, never a table.
        assert all(
            step.startswith(("SCAN newest_", "SCAN oldest_"))
            for step in plan
            if step.startswith("SCAN")
        )
        assert any(" INDEX " in step for step in plan)


def test_a_recorded_build_stores_its_row() -> None:
    cid = make_cluster([agent("worker", [{"topic": "ISSUE_OPENED"}], maxTokens=5000)])
    add(cid, (0, "ISSUE_OPENED", "system", {"text": "the issue"}))
    trigger(cid)

    outcome = context_build(cluster_id=cid, agent_id="worker")
    again = context_build(cluster_id=cid, agent_id="worker")
    build = ContextBuild.objects.get(pk=outcome.build_id)

    assert (build.cluster_id, build.agent_id, build.role) == (cid, "worker", "implementation")
    assert (build.iteration, build.started_at) == (1, outcome.started_at)
    assert (build.trigger_message_id, build.trigger_topic) == (outcome.trigger.id, "GO")
    assert (build.max_tokens, build.final_tokens) == (5000, outcome.result.budget.final_tokens)
    assert (build.as_of_sequence, build.reported_usage) == (None, None)
    assert build.metrics == outcome.metrics
    assert ContextBuild.objects.get(pk=again.build_id).iteration == again.iteration == 2
    assert (again.started_at or 0) > (outcome.started_at or 0) > 0


def test_header_rules_come_from_the_agent_then_the_template_then_ours() -> None:
    from context.packs import DEFAULT_RULES

    cid = cluster_create(
        cluster_id="rules",
        config={
            "contextRules": "Template rules: never wait for a person.",
            "agents": [
                agent("plain", []),
                {**agent("custom", []), "contextRules": "Agent rules: decide alone."},
            ],
        },
        created_at=T0,
    ).id
    ours = make_cluster([agent("worker", [])], cluster_id="ours")
    trigger(cid)
    trigger(ours)

    plain = context_build(cluster_id=cid, agent_id="plain", preview=True).context
    custom = context_build(cluster_id=cid, agent_id="custom", preview=True).context
    default = context_build(cluster_id=ours, agent_id="worker", preview=True).context

    assert "Template rules: never wait for a person." in plain
    assert "Agent rules: decide alone." in custom
    assert "Template rules" not in custom
    assert DEFAULT_RULES in default


def test_a_build_says_when_no_trigger_topic_matched_and_which_sources_hold_the_trigger() -> None:
    cid = make_cluster([agent("worker", [{"topic": "GO"}, {"topic": "NOTE", "amount": 2}])])
    add(cid, (1, "NOTE", "someone", {"text": "a note"}))

    # no GO yet: the newest message of any topic stands in, and the build says so
    fallback = context_build(cluster_id=cid, agent_id="worker", preview=True)
    add(cid, (2, "GO", "system", {"text": "go"}))
    matched = context_build(cluster_id=cid, agent_id="worker", preview=True)
    chosen = context_build(
        cluster_id=cid, agent_id="worker", triggering_message_id="m0", preview=True
    )

    assert (fallback.trigger.topic, fallback.trigger_fallback) == ("NOTE", True)
    assert fallback.trigger_sources == frozenset({"source:NOTE:1"})
    assert (matched.trigger.topic, matched.trigger_fallback) == ("GO", False)
    assert matched.trigger_sources == frozenset({"source:GO:0"})
    assert chosen.trigger_fallback is False  # the caller picked it
    # the GO source is empty: its only match is the trigger, which has its own pack
    go = next(d for d in matched.result.decisions if d.id == "source:GO:0")
    assert (go.status, go.reason) == ("skipped", "empty")


def test_a_wildcard_trigger_is_no_fallback() -> None:
    worker = agent("worker", [])
    worker["triggers"] = [{"topic": "*", "action": "execute_task"}]
    cid = make_cluster([worker])
    add(cid, (1, "ANYTHING", "someone", {"text": "hello"}))

    assert context_build(cluster_id=cid, agent_id="worker", preview=True).trigger_fallback is False
