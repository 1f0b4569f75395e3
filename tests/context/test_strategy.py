"""Parsing and validation of an agent's contextStrategy (SPEC §2, §2.1)."""

from __future__ import annotations

from typing import Any

import pytest

from context.strategy import (
    DEFAULT_MAX_TOKENS,
    ContextStrategy,
    Issue,
    SourceSpec,
    StrategyError,
    ValidationReport,
    iso_to_ms,
    strategy_parse,
    strategy_validate,
    strategy_validate_agents,
)
from ledger.errors import InvalidInput


def _source(**fields: Any) -> SourceSpec:
    return strategy_parse({"sources": [{"topic": "NOTE", **fields}]}).sources[0]


def _agent(agent_id: str, sources: list[Any] | None = None, **fields: Any) -> dict[str, Any]:
    agent: dict[str, Any] = {"id": agent_id, "role": "worker", "prompt": "Work.", **fields}
    if sources is not None:
        agent["contextStrategy"] = {"sources": sources}
    return agent


def _publisher(topic: str) -> dict[str, Any]:
    return _agent(
        f"publisher-{topic.lower()}",
        hooks={"onComplete": {"action": "publish_message", "config": {"topic": topic}}},
    )


def _messages(report: ValidationReport) -> list[str]:
    return [issue.message for issue in [*report.errors, *report.warnings]]


# --- parsing and defaults ---------------------------------------------------------------------


def test_no_strategy_parses_to_no_sources_and_the_default_budget() -> None:
    assert strategy_parse(None) == ContextStrategy(sources=(), max_tokens=100_000)


def test_a_strategy_without_sources_has_none() -> None:
    assert strategy_parse({}).sources == ()


@pytest.mark.parametrize("max_tokens", [None, 0, 0.0])
def test_max_tokens_missing_or_zero_is_the_default(max_tokens: Any) -> None:
    raw: dict[str, Any] = {"sources": []}
    if max_tokens is not None:
        raw["maxTokens"] = max_tokens
    assert strategy_parse(raw).max_tokens == DEFAULT_MAX_TOKENS


def test_max_tokens_is_kept_when_positive() -> None:
    assert strategy_parse({"maxTokens": 2500}).max_tokens == 2500


def test_a_source_without_amount_defaults_to_all() -> None:
    source = _source()
    assert (source.strategy, source.amount) == ("all", None)


def test_a_source_with_an_amount_defaults_to_latest() -> None:
    source = _source(amount=3)
    assert (source.strategy, source.amount) == ("latest", 3)


def test_limit_is_an_alias_of_amount() -> None:
    source = _source(limit=2)
    assert (source.strategy, source.amount) == ("latest", 2)


def test_amount_wins_over_limit() -> None:
    assert _source(amount=1, limit=2).amount == 1


def test_an_integral_float_amount_is_an_integer() -> None:
    assert _source(amount=2.0).amount == 2


def test_compact_defaults_to_one_message() -> None:
    assert _source(amount=5).compact_amount == 1


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, "latest"),
        ({"strategy": "all", "amount": 3}, "latest"),
        ({"strategy": "latest", "amount": 3}, "latest"),
        ({"strategy": "oldest", "amount": 3}, "oldest"),
        ({"strategy": "oldest", "compactStrategy": "all"}, "all"),
    ],
)
def test_compact_strategy_default_follows_the_base_strategy(
    fields: dict[str, Any], expected: str
) -> None:
    assert _source(**fields).compact_strategy == expected


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("STATE_SNAPSHOT", "required"),
        ("ISSUE_OPENED", "required"),
        ("PLAN_READY", "required"),
        ("VALIDATION_RESULT", "high"),
        ("IMPLEMENTATION_READY", "high"),
        ("WORKER_PROGRESS", "medium"),
    ],
)
def test_default_priority_depends_on_the_topic(topic: str, expected: str) -> None:
    assert strategy_parse({"sources": [{"topic": topic}]}).sources[0].priority == expected


def test_an_explicit_priority_wins_over_the_topic_default() -> None:
    parsed = strategy_parse({"sources": [{"topic": "PLAN_READY", "priority": "low"}]})
    assert parsed.sources[0].priority == "low"


def test_a_source_keeps_its_index_topic_sender_and_since() -> None:
    # given
    raw = {
        "sources": [{"topic": "A"}, {"topic": "B", "sender": "worker", "since": "cluster_start"}]
    }

    # when
    second = strategy_parse(raw).sources[1]

    # then
    assert (second.index, second.topic, second.sender, second.since) == (
        1,
        "B",
        "worker",
        "cluster_start",
    )
    assert second.pack_id == "source:B:1"


def test_a_fractional_numeric_since_rounds_up_to_keep_the_bound_inclusive() -> None:
    assert _source(since=1000.2).since == 1001


def test_parse_rejects_an_invalid_strategy_with_every_error() -> None:
    # given
    raw = {"sources": [{"topic": "A", "strategy": "newest"}, {"amount": 0}]}

    # when
    with pytest.raises(StrategyError) as caught:
        strategy_parse(raw, agent_id="worker")

    # then
    assert [detail["field"] for detail in caught.value.details] == ["strategy", "topic", "amount"]
    assert str(caught.value).startswith(
        'invalid contextStrategy: agent "worker", source 0, field "strategy"'
    )
    assert "(and 2 more)" in str(caught.value)


def test_a_strategy_error_is_a_value_error_and_an_invalid_input() -> None:
    with pytest.raises(StrategyError) as caught:
        strategy_parse({"maxTokens": -1})
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, InvalidInput)
    assert caught.value.to_dict()["code"] == "invalid_strategy"


# --- validation errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "field", "message"),
    [
        (
            {"topic": "NOTE", "strategy": "newest"},
            "strategy",
            'agent "worker", source 0, field "strategy": '
            'unknown strategy "newest" (expected latest, oldest or all)',
        ),
        (
            {"topic": "NOTE", "compactStrategy": "first"},
            "compactStrategy",
            'agent "worker", source 0, field "compactStrategy": '
            'unknown compactStrategy "first" (expected latest, oldest or all)',
        ),
        (
            {"topic": "NOTE", "priority": "urgent"},
            "priority",
            'agent "worker", source 0, field "priority": '
            'unknown priority "urgent" (expected required, high, medium or low)',
        ),
        (
            {"topic": "NOTE", "amount": 0},
            "amount",
            'agent "worker", source 0, field "amount": must be a positive integer, got 0',
        ),
        (
            {"topic": "NOTE", "amount": True},
            "amount",
            'agent "worker", source 0, field "amount": must be a positive integer, got true',
        ),
        (
            {"topic": "NOTE", "limit": 1.5},
            "limit",
            'agent "worker", source 0, field "limit": must be a positive integer, got 1.5',
        ),
        (
            {"topic": "NOTE", "compactAmount": "2"},
            "compactAmount",
            'agent "worker", source 0, field "compactAmount": must be a positive integer, got "2"',
        ),
        (
            {"topic": "NOTE", "since": "yesterday"},
            "since",
            'agent "worker", source 0, field "since": unknown since value "yesterday" for topic '
            "NOTE (expected cluster_start, last_task_end, last_agent_start, an ISO-8601 "
            "timestamp or a number of ms)",
        ),
        ({"strategy": "all"}, "topic", 'agent "worker", source 0, field "topic": missing topic'),
        ({"topic": ""}, "topic", 'agent "worker", source 0, field "topic": missing topic'),
    ],
)
def test_each_invalid_field_is_one_error_naming_agent_source_and_field(
    source: dict[str, Any], field: str, message: str
) -> None:
    # when
    report = strategy_validate({"sources": [source]}, agent_id="worker")

    # then
    assert not report.valid
    assert report.errors == [Issue(agent="worker", source=0, field=field, message=message)]


@pytest.mark.parametrize("amount", [-1, 0, True, False, "3", 2.5, [1]])
def test_amount_must_be_a_positive_integer(amount: Any) -> None:
    report = strategy_validate({"sources": [{"topic": "NOTE", "amount": amount}]})
    assert [issue.field for issue in report.errors] == ["amount"]


@pytest.mark.parametrize(
    "since",
    [
        "cluster_start",
        "last_task_end",
        "last_agent_start",
        "2026-02-02T09:17:55.553Z",
        "2026-02-02T09:17:55+02:00",
        "2026-02-02",
        1770023875553,
        0,
    ],
)
def test_accepted_since_forms(since: Any) -> None:
    assert strategy_validate({"sources": [{"topic": "NOTE", "since": since}]}).valid


@pytest.mark.parametrize("since", ["now", "last_build", "1770023875553", "02/02/2026", True, {}])
def test_rejected_since_forms(since: Any) -> None:
    report = strategy_validate({"sources": [{"topic": "NOTE", "since": since}]})
    assert [issue.field for issue in report.errors] == ["since"]


@pytest.mark.parametrize(
    ("max_tokens", "message"),
    [
        (-5, 'field "maxTokens": must be a positive integer, got -5'),
        (1.5, 'field "maxTokens": must be a positive integer, got 1.5'),
        ("5000", 'field "maxTokens": must be a positive integer, got "5000"'),
        (False, 'field "maxTokens": must be a positive integer, got false'),
        (
            "{{max_tokens}}",
            'field "maxTokens": unresolved template placeholder "{{max_tokens}}" '
            "(expected a positive integer)",
        ),
    ],
)
def test_max_tokens_must_be_a_positive_integer(max_tokens: Any, message: str) -> None:
    # when
    report = strategy_validate({"sources": [], "maxTokens": max_tokens}, agent_id="planner")

    # then
    assert [issue.message for issue in report.errors] == [f'agent "planner", {message}']
    assert report.errors[0].source is None


def test_a_source_that_is_not_an_object_is_an_error() -> None:
    report = strategy_validate({"sources": ["NOTE"]}, agent_id="worker")
    assert [(issue.source, issue.field) for issue in report.errors] == [(0, "sources")]


def test_sources_that_are_not_a_list_are_an_error() -> None:
    report = strategy_validate({"sources": {"topic": "NOTE"}}, agent_id="worker")
    assert [issue.field for issue in report.errors] == ["sources"]


def test_a_strategy_that_is_not_an_object_is_an_error() -> None:
    report = strategy_validate(["NOTE"], agent_id="worker")
    assert [issue.field for issue in report.errors] == ["contextStrategy"]


def test_a_non_string_sender_is_an_error() -> None:
    report = strategy_validate({"sources": [{"topic": "NOTE", "sender": 7}]})
    assert [issue.field for issue in report.errors] == ["sender"]


def test_without_an_agent_the_message_names_source_and_field() -> None:
    report = strategy_validate({"sources": [{"topic": "NOTE", "priority": "p0"}]})
    assert report.errors[0].message.startswith('source 0, field "priority": ')


def test_a_valid_strategy_has_no_errors() -> None:
    # given
    raw = {
        "sources": [
            {"topic": "ISSUE_OPENED", "priority": "required", "strategy": "latest", "amount": 1},
            {"topic": "NOTE", "since": "last_task_end", "compactAmount": 2},
        ],
        "maxTokens": 50_000,
    }

    # when
    report = strategy_validate(raw, agent_id="worker")

    # then
    assert report.to_dict() == {"valid": True, "errors": [], "warnings": []}


# --- validation warnings ----------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["latest", "oldest"])
def test_a_non_all_source_without_amount_is_a_warning(strategy: str) -> None:
    # when
    report = strategy_validate(
        {"sources": [{"topic": "PLAN_READY", "strategy": strategy}]}, agent_id="worker"
    )

    # then
    assert report.valid
    assert _messages(report) == [
        f'agent "worker", source 0, field "amount": strategy "{strategy}" without an amount '
        "selects every message of the topic"
    ]


@pytest.mark.parametrize("fields", [{"strategy": "all"}, {}, {"strategy": "latest", "limit": 1}])
def test_no_amount_warning_for_all_or_with_an_amount(fields: dict[str, Any]) -> None:
    report = strategy_validate({"sources": [{"topic": "PLAN_READY", **fields}]})
    assert report.warnings == []


def test_no_required_source_is_a_warning() -> None:
    # when
    report = strategy_validate({"sources": [{"topic": "NOTE"}]}, agent_id="worker")

    # then
    assert report.warnings == [
        Issue(
            agent="worker",
            source=None,
            field="sources",
            message='agent "worker", field "sources": no source has priority "required": '
            "under a tight budget every source may be dropped",
        )
    ]


def test_a_default_required_priority_counts_as_required() -> None:
    assert strategy_validate({"sources": [{"topic": "STATE_SNAPSHOT"}]}).warnings == []


def test_a_topic_no_agent_publishes_is_a_warning() -> None:
    # given
    agents = [
        _publisher("PLAN_READY"),
        _agent("worker", [{"topic": "PLAN_READY"}, {"topic": "DESIGN_READY"}]),
    ]

    # when
    report = strategy_validate_agents(agents)

    # then
    assert report.valid
    assert _messages(report) == [
        'agent "worker", source 1, field "topic": no agent of the config publishes topic '
        '"DESIGN_READY"'
    ]


@pytest.mark.parametrize("topic", ["ISSUE_OPENED", "CLUSTER_RESUMED", "STATE_SNAPSHOT", "CI_*"])
def test_system_topics_and_wildcards_need_no_publisher(topic: str) -> None:
    # given
    agents = [_agent("worker", [{"topic": topic, "priority": "required"}])]

    # when / then
    assert strategy_validate_agents(agents).warnings == []


def test_any_topic_string_inside_hooks_counts_as_published() -> None:
    # given
    hooks = {
        "onComplete": {
            "action": "publish_message",
            "logic": {"script": "if (!ok) return { topic: 'WORKER_PROGRESS' };"},
            "transform": {"script": 'return { topic: "VALIDATION_RESULT", content: {} };'},
            "extra": [{"config": {"topic": "NESTED_TOPIC"}}],
        }
    }
    sources = [
        {"topic": topic, "priority": "required"}
        for topic in ("WORKER_PROGRESS", "VALIDATION_RESULT", "NESTED_TOPIC")
    ]
    agents = [_agent("worker", sources, hooks=hooks)]

    # when / then
    assert strategy_validate_agents(agents).warnings == []


def test_a_trigger_topic_missing_from_the_sources_is_a_warning() -> None:
    # given
    agent = _agent(
        "validator",
        [{"topic": "ISSUE_OPENED"}],
        triggers=[
            {"topic": "ISSUE_OPENED", "action": "execute_task"},
            {"topic": "IMPLEMENTATION_READY", "action": "execute_task"},
        ],
    )

    # when
    report = strategy_validate_agents([agent])

    # then
    assert [(issue.field, issue.message) for issue in report.warnings] == [
        (
            "triggers[1].topic",
            'agent "validator", field "triggers[1].topic": the agent triggers on topic '
            '"IMPLEMENTATION_READY" but no source reads it',
        )
    ]


def test_a_wildcard_trigger_is_covered_by_a_matching_source() -> None:
    agent = _agent(
        "ops", [{"topic": "CLUSTER_OPS", "priority": "required"}], triggers=[{"topic": "CLUSTER_*"}]
    )
    assert strategy_validate_agents([agent, _publisher("CLUSTER_OPS")]).warnings == []


def test_an_agent_without_context_strategy_is_valid_and_quiet() -> None:
    agent = _agent("completion-detector", triggers=[{"topic": "VALIDATION_RESULT"}])
    assert strategy_validate_agents([agent]).to_dict() == {
        "valid": True,
        "errors": [],
        "warnings": [],
    }


def test_validating_agents_collects_errors_of_every_agent() -> None:
    # given
    agents = [
        _agent("a", [{"topic": "ISSUE_OPENED", "strategy": "newest"}]),
        _agent("b", [{"topic": "ISSUE_OPENED", "amount": -1}]),
    ]

    # when
    report = strategy_validate_agents(agents)

    # then
    assert not report.valid
    assert [(issue.agent, issue.field) for issue in report.errors] == [
        ("a", "strategy"),
        ("b", "amount"),
    ]


def test_an_agent_that_is_not_an_object_is_an_error() -> None:
    report = strategy_validate_agents(["worker"])
    assert [issue.field for issue in report.errors] == ["agents[0]"]


def test_an_agent_without_id_is_named_by_its_position() -> None:
    report = strategy_validate_agents([{"contextStrategy": {"sources": [{"amount": 1}]}}])
    assert report.errors[0].agent == "agents[0]"


def test_validate_one_strategy_in_the_context_of_its_agents() -> None:
    # given
    agents = [
        _publisher("PLAN_READY"),
        _agent("worker", triggers=[{"topic": "PLAN_READY"}, {"topic": "FIX_REQUESTED"}]),
    ]
    raw = {"sources": [{"topic": "PLAN_READY"}, {"topic": "MISSING", "amount": 1}]}

    # when
    report = strategy_validate(raw, agent_id="worker", agents=agents)

    # then
    assert [(issue.source, issue.field) for issue in report.warnings] == [
        (1, "topic"),
        (None, "triggers[1].topic"),
    ]


def test_report_to_dict_has_the_api_shape() -> None:
    # when
    body = strategy_validate({"sources": [{"topic": "NOTE", "amount": 0}]}, agent_id="w").to_dict()

    # then
    assert body["valid"] is False
    assert body["errors"] == [
        {
            "agent": "w",
            "source": 0,
            "field": "amount",
            "message": 'agent "w", source 0, field "amount": must be a positive integer, got 0',
        }
    ]
    assert [warning["field"] for warning in body["warnings"]] == ["sources"]


# --- ISO timestamps ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2100-01-01T00:00:00.000Z", 4102444800000),
        ("2100-01-01T00:00:02.540Z", 4102444802540),
        ("2100-01-01T02:00:00+02:00", 4102444800000),
        ("2100-01-01T00:00:00", 4102444800000),
        ("2100-01-01", 4102444800000),
        ("1970-01-01T00:00:00.0019Z", 1),
    ],
)
def test_iso_to_ms(text: str, expected: int) -> None:
    assert iso_to_ms(text) == expected


@pytest.mark.parametrize("text", ["", "soon", "2100-13-01", "12:00", "2100-01-01Tnope"])
def test_iso_to_ms_rejects_what_is_not_a_timestamp(text: str) -> None:
    assert iso_to_ms(text) is None
