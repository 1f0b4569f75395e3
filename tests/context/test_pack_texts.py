"""Exact pack texts (SPEC §3.1, §3.2, §3.5): other tools parse these byte for byte."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from context.jsformat import data_is_written, iso_ms, js_json
from context.packs import (
    DEFAULT_RULES,
    build_packs,
    prompt_text,
    render_header,
    render_instructions,
    render_output_schema,
    render_source,
    render_trigger,
    schema_example,
    validator_skip_hints,
)
from context.strategy import strategy_parse
from ledger.errors import InvalidInput
from ledger.records import MessageRecord

T = 4_102_444_800_000  # 2100-01-01T00:00:00.000Z


def _message(
    *,
    topic: str = "NOTE",
    sender: str = "worker",
    timestamp: int = T,
    content: dict[str, Any] | None = None,
    sequence: int = 1,
) -> MessageRecord:
    return MessageRecord(
        id=f"msg_{sequence}",
        cluster_id="c",
        sequence=sequence,
        timestamp=timestamp,
        topic=topic,
        sender=sender,
        content=content if content is not None else {},
    )


def _result(*criteria: Any, sequence: int = 1) -> MessageRecord:
    return _message(
        topic="VALIDATION_RESULT",
        content={"data": {"criteriaResults": list(criteria)}},
        sequence=sequence,
    )


# --- timestamps -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ts_ms", "expected"),
    [
        (T, "2100-01-01T00:00:00.000Z"),
        (0, "1970-01-01T00:00:00.000Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (1_770_023_875_553, "2026-02-02T09:17:55.553Z"),
        (951_782_400_000, "2000-02-29T00:00:00.000Z"),
        (253_402_300_800_000, "+010000-01-01T00:00:00.000Z"),
        (-62_198_755_200_001, "-000002-12-31T23:59:59.999Z"),
    ],
)
def test_iso_ms_formats_as_javascript(ts_ms: int, expected: str) -> None:
    assert iso_ms(ts_ms) == expected


def test_iso_ms_rejects_what_javascript_cannot_represent() -> None:
    with pytest.raises(ValueError, match="outside the range"):
        iso_ms(8_640_000_000_000_001)


# --- JSON as JavaScript prints it -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "null"),
        (True, "true"),
        (False, "false"),
        ("tab\there", '"tab\\there"'),
        ("中文 and émigré", '"中文 and émigré"'),
        ("\u2028\x7f", '"\u2028\x7f"'),
        ("\x01", '"\\u0001"'),
        ("\ud800", '"\\ud800"'),
        ({}, "{}"),
        ([], "[]"),
        (1, "1"),
        (1.0, "1"),
        (-0.0, "0"),
        (1.5, "1.5"),
        (0.1, "0.1"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (1e-6, "0.000001"),
        (1.2345e-7, "1.2345e-7"),
        (5e-324, "5e-324"),
        (123456789012345680000.0, "123456789012345680000"),
        (2**53 + 1, "9007199254740992"),
        (float("nan"), "null"),
        (float("inf"), "null"),
        ([1, "two", None, True], '[\n  1,\n  "two",\n  null,\n  true\n]'),
        (
            {"b": 1, "2": 2, "a": 3, "1": 4, "01": 5},
            '{\n  "1": 4,\n  "2": 2,\n  "b": 1,\n  "a": 3,\n  "01": 5\n}',
        ),
    ],
)
def test_js_json_matches_json_stringify(value: Any, expected: str) -> None:
    assert js_json(value) == expected


def test_js_json_indents_nested_objects_and_lists_two_spaces() -> None:
    # given
    value = {
        "nested": {"list": [1, 2, {"deep": "x"}], "empty_list": [], "empty_obj": {}},
        "n": 42,
        "f": 1.5,
    }

    # when / then
    assert js_json(value) == (
        "{\n"
        '  "nested": {\n'
        '    "list": [\n'
        "      1,\n"
        "      2,\n"
        "      {\n"
        '        "deep": "x"\n'
        "      }\n"
        "    ],\n"
        '    "empty_list": [],\n'
        '    "empty_obj": {}\n'
        "  },\n"
        '  "n": 42,\n'
        '  "f": 1.5\n'
        "}"
    )


def test_js_json_refuses_what_is_not_json() -> None:
    with pytest.raises(TypeError):
        js_json({"when": object()})


@pytest.mark.parametrize(
    ("data", "written"),
    [
        (None, False),
        (False, False),
        (0, False),
        (0.0, False),
        ("", False),
        ({}, True),
        ([], True),
        (True, True),
        (1, True),
        ("x", True),
        ([0], True),
    ],
)
def test_data_is_written_follows_javascript_truthiness(data: Any, written: bool) -> None:
    assert data_is_written(data) is written


# --- source packs -----------------------------------------------------------------------------


def test_an_empty_source_renders_the_empty_string() -> None:
    assert render_source([]) == ""


def test_a_source_renders_text_and_data_oldest_first() -> None:
    # given
    messages = [
        _message(sender="planner", content={"text": "Plan: ship it", "data": {"ok": True}}),
        _message(
            sender="worker",
            timestamp=T + 1553,
            content={"text": "Unicode: café", "data": {"unicode": "中文", "list": [1, {}]}},
            sequence=2,
        ),
    ]

    # when
    text = render_source(messages)

    # then
    assert text == (
        "\n## Messages from topic: NOTE\n\n"
        "[2100-01-01T00:00:00.000Z] planner:\n"
        "Plan: ship it\n"
        'Data: {\n  "ok": true\n}\n'
        "\n"
        "[2100-01-01T00:00:01.553Z] worker:\n"
        "Unicode: café\n"
        'Data: {\n  "unicode": "中文",\n  "list": [\n    1,\n    {}\n  ]\n}\n'
        "\n"
    )


@pytest.mark.parametrize(
    ("content", "body"),
    [
        ({"text": "hello", "data": 0}, "hello\n"),
        ({"text": "hello", "data": False}, "hello\n"),
        ({"text": "hello", "data": None}, "hello\n"),
        ({"text": "hello", "data": ""}, "hello\n"),
        ({"text": "hello"}, "hello\n"),
        ({"text": "", "data": {}}, "Data: {}\n"),
        ({"data": []}, "Data: []\n"),
        ({"data": "a plain string"}, 'Data: "a plain string"\n'),
        ({"data": 2.0}, "Data: 2\n"),
        ({}, ""),
    ],
)
def test_text_and_data_are_written_only_when_javascript_would(
    content: dict[str, Any], body: str
) -> None:
    # when
    text = render_source([_message(content=content)])

    # then
    assert text == f"\n## Messages from topic: NOTE\n\n[2100-01-01T00:00:00.000Z] worker:\n{body}\n"


def test_a_multiline_text_is_kept_as_is() -> None:
    text = render_source([_message(content={"text": "Line one\n\n  indented"})])
    assert text.endswith("worker:\nLine one\n\n  indented\n\n")


def test_the_source_header_names_the_given_topic() -> None:
    text = render_source([_message(topic="PLAN_READY")], topic="PLAN_READY")
    assert text.startswith("\n## Messages from topic: PLAN_READY\n\n")


# --- triggering message -----------------------------------------------------------------------


def test_the_triggering_message_block() -> None:
    # given
    trigger = _message(
        topic="TRIGGER_EVENT",
        sender="system",
        content={"text": "Re-run with fixes\nplease", "data": {"ignored": True}},
    )

    # when / then
    assert render_trigger(trigger) == (
        "\n## Triggering Message\n\nTopic: TRIGGER_EVENT\nSender: system\n"
        "\nRe-run with fixes\nplease\n"
    )


@pytest.mark.parametrize("content", [{}, {"text": ""}, {"data": {"x": 1}}])
def test_a_triggering_message_without_text_has_no_body(content: dict[str, Any]) -> None:
    trigger = _message(topic="ISSUE_OPENED", sender="system", content=content)
    assert render_trigger(trigger) == (
        "\n## Triggering Message\n\nTopic: ISSUE_OPENED\nSender: system\n"
    )


# --- header, instructions, output schema ------------------------------------------------------


def test_the_header_names_the_agent_and_gives_the_rules() -> None:
    # when
    header = render_header("worker", "implementation", 3)

    # then
    assert header.startswith('# Agent "worker"\n\nRole: implementation\nIteration: 3\n\n')
    assert header.endswith(DEFAULT_RULES)


def test_the_default_rules_forbid_waiting_for_a_person() -> None:
    rules = DEFAULT_RULES.lower()
    assert "unattended" in rules
    assert "never ask" in rules
    assert "never wait" in rules


def test_a_template_can_replace_the_rules() -> None:
    header = render_header("w", "r", 1, rules_text="## House rules\n\nBe brief.")
    assert header == '# Agent "w"\n\nRole: r\nIteration: 1\n\n## House rules\n\nBe brief.\n\n'


def test_empty_rules_leave_only_the_identity() -> None:
    assert render_header("w", "r", 1, rules_text="") == '# Agent "w"\n\nRole: r\nIteration: 1\n\n'


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("Fix the bug.", "## Instructions\n\nFix the bug.\n\n"),
        ({"system": "Plan the work."}, "## Instructions\n\nPlan the work.\n\n"),
        (None, ""),
        ("", ""),
        ({"system": ""}, ""),
    ],
)
def test_instructions(prompt: Any, expected: str) -> None:
    assert render_instructions(prompt) == expected


def test_zeroshots_initial_and_subsequent_prompts_follow_the_iteration() -> None:
    prompt = {"initial": "Start the work.", "subsequent": "Fix what the validators found."}

    assert render_instructions(prompt) == "## Instructions\n\nStart the work.\n\n"
    assert render_instructions(prompt, iteration=2) == (
        "## Instructions\n\nFix what the validators found.\n\n"
    )
    assert prompt_text({"initial": "Only one."}, iteration=3) == "Only one."


@pytest.mark.parametrize("prompt", [{"user": "x"}, ["a"], 42])
def test_a_prompt_of_another_shape_is_invalid_input(prompt: Any) -> None:
    with pytest.raises(InvalidInput, match="string `system`"):
        prompt_text(prompt)


def test_the_output_schema_shows_the_schema_and_an_example() -> None:
    # given
    schema = {
        "type": "object",
        "properties": {"approved": {"type": "boolean"}, "summary": {"type": "string"}},
        "required": ["approved"],
    }

    # when
    text = render_output_schema(schema)

    # then
    assert text.startswith("## Output format\n\n")
    assert f"```json\n{js_json(schema)}\n```\n\n" in text
    assert '```json\n{\n  "approved": false,\n  "summary": "..."\n}\n```\n\n' in text
    assert text.endswith("\n\n")


def test_the_output_schema_text_follows_every_change_of_the_schema() -> None:
    # given: schemas that differ only in a number's type, a key's order, a nested value
    schemas = [
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}},
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1.5}}},
        {"properties": {"n": {"type": "integer", "minimum": 1}}, "type": "object"},
        {"type": "object", "properties": {"n": {"type": "number", "minimum": 1}}},
    ]

    # when: each is rendered twice, the second time from the kept text
    texts = [render_output_schema(schema) for schema in schemas]
    again = [render_output_schema(json.loads(json.dumps(schema))) for schema in schemas]

    # then
    assert again == texts
    assert len(set(texts)) == len(schemas)
    for schema, text in zip(schemas, texts, strict=True):
        assert f"```json\n{js_json(schema)}\n```\n\n" in text
        assert f"```json\n{js_json(schema_example(schema))}\n```\n\n" in text


@pytest.mark.parametrize(
    ("schema", "example"),
    [
        ({"type": "string"}, "..."),
        ({"type": "integer"}, 0),
        ({"type": "number"}, 0),
        ({"type": "boolean"}, False),
        ({"type": "null"}, None),
        ({"enum": ["PASS", "FAIL"], "type": "string"}, "PASS"),
        ({"const": "v1"}, "v1"),
        ({"type": ["string", "null"]}, "..."),
        ({"type": "array", "items": {"type": "integer"}}, [0]),
        ({"type": "array"}, []),
        ({"type": "object"}, {}),
        ({"properties": {"a": {"type": "string"}}}, {"a": "..."}),
        ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, 0),
        ({"$ref": "#/definitions/x"}, None),
        ("not a schema", None),
        (
            {
                "type": "object",
                "properties": {
                    "criteriaResults": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string"},
                                "status": {"enum": ["PASS", "FAIL", "CANNOT_VALIDATE"]},
                            },
                        },
                    }
                },
            },
            {"criteriaResults": [{"id": "...", "status": "PASS"}]},
        ),
    ],
)
def test_schema_example(schema: Any, example: Any) -> None:
    assert schema_example(schema) == example


def test_a_recursive_schema_example_stays_bounded() -> None:
    # given
    node: dict[str, Any] = {"type": "object", "properties": {}}
    node["properties"]["child"] = node

    # when
    example = schema_example(node)

    # then: the depth limit ends the recursion with a null
    depth = 0
    while isinstance(example, dict):
        example = example["child"]
        depth += 1
    assert example is None
    assert depth == 13


# --- validator skip hints ---------------------------------------------------------------------


def test_skip_hints_list_each_unverifiable_criterion_once() -> None:
    # given
    results = [
        _result(
            {"id": "AC1", "status": "PASS"},
            {"id": "AC2", "status": "CANNOT_VALIDATE", "reason": "No browser in the sandbox"},
            sequence=1,
        ),
        _result(
            {"id": "AC2", "status": "CANNOT_VALIDATE", "reason": "a later reason"},
            {"id": "AC3", "status": "CANNOT_VALIDATE"},
            sequence=2,
        ),
    ]

    # when
    text = validator_skip_hints(results)

    # then
    assert text.startswith("\n## ")
    assert text.endswith(
        "\n\n- **AC2**: No browser in the sandbox\n- **AC3**: No reason provided\n\n"
    )
    assert "a later reason" not in text
    assert "AC1" not in text


def test_no_unverifiable_criteria_means_no_hints() -> None:
    assert validator_skip_hints([_result({"id": "AC1", "status": "PASS"})]) == ""
    assert validator_skip_hints([]) == ""


@pytest.mark.parametrize(
    "content",
    [
        {},
        {"data": None},
        {"data": "text"},
        {"data": {"criteriaResults": None}},
        {"data": {"criteriaResults": "AC1"}},
        {"data": {"criteriaResults": [None, 1, "x", []]}},
        {"data": {"criteriaResults": [{"status": "CANNOT_VALIDATE"}]}},
        {"data": {"criteriaResults": [{"id": "", "status": "CANNOT_VALIDATE"}]}},
        {"data": {"criteriaResults": [{"id": 7, "status": "CANNOT_VALIDATE"}]}},
        {"data": {"criteriaResults": [{"id": "AC1", "status": "cannot_validate"}]}},
    ],
)
def test_malformed_results_are_ignored(content: dict[str, Any]) -> None:
    message = _message(topic="VALIDATION_RESULT", content=content)
    assert validator_skip_hints([message]) == ""


def test_a_malformed_entry_does_not_hide_a_valid_one() -> None:
    # given
    message = _result(None, {"id": "AC9", "status": "CANNOT_VALIDATE", "reason": 5})

    # when / then
    assert validator_skip_hints([message]).endswith("- **AC9**: No reason provided\n\n")


# --- the pack list ----------------------------------------------------------------------------


def _build(agent: dict[str, Any], *, sources: list[dict[str, Any]], **kwargs: Any) -> list[Any]:
    strategy = strategy_parse({"sources": sources})
    note = _message(content={"text": "hi"})
    return build_packs(
        agent=agent,
        iteration=2,
        strategy=strategy,
        source_messages=[([note], [note])] * len(strategy.sources),
        trigger=_message(topic="GO", sender="system", content={"text": "Go."}, sequence=9),
        **kwargs,
    )


def test_packs_come_in_the_spec_order() -> None:
    # given
    agent = {
        "id": "validator-1",
        "role": "validator",
        "prompt": {"system": "Check it."},
        "jsonSchema": {"type": "object", "properties": {"approved": {"type": "boolean"}}},
    }
    hint = _result({"id": "AC1", "status": "CANNOT_VALIDATE", "reason": "offline"})

    # when
    packs = _build(
        agent,
        sources=[{"topic": "PLAN_READY"}, {"topic": "NOTE", "priority": "low"}],
        validation_results=[hint],
    )

    # then
    assert [(p.id, p.section, p.priority, p.order) for p in packs] == [
        ("header", "header", "required", 0),
        ("instructions", "instructions", "required", 1),
        ("outputSchema", "outputSchema", "required", 2),
        ("source:PLAN_READY:0", "sources", "required", 3),
        ("source:NOTE:1", "sources", "low", 4),
        ("validatorSkip", "validatorSkip", "required", 5),
        ("triggeringMessage", "triggeringMessage", "required", 6),
    ]
    assert [p.preserve for p in packs] == [False] * 6 + [True]
    assert all(p.required and p.compact is None for p in packs if p.section != "sources")


def test_a_worker_without_schema_has_no_schema_or_skip_pack() -> None:
    # when
    packs = _build({"id": "w", "role": "worker", "prompt": "Do."}, sources=[{"topic": "NOTE"}])

    # then
    assert [p.id for p in packs] == ["header", "instructions", "source:NOTE:0", "triggeringMessage"]


def test_a_validator_without_hints_has_no_skip_pack() -> None:
    packs = _build({"id": "v", "role": "validator", "prompt": "Check."}, sources=[])
    assert [p.id for p in packs] == ["header", "instructions", "triggeringMessage"]


def test_pack_texts_are_the_rendered_sections() -> None:
    # when
    packs = _build(
        {"id": "w", "role": "worker", "prompt": "Do."},
        sources=[{"topic": "NOTE"}],
        rules_text="Rules.",
    )

    # then
    assert [p.full for p in packs] == [
        '# Agent "w"\n\nRole: worker\nIteration: 2\n\nRules.\n\n',
        "## Instructions\n\nDo.\n\n",
        "\n## Messages from topic: NOTE\n\n[2100-01-01T00:00:00.000Z] worker:\nhi\n\n",
        "\n## Triggering Message\n\nTopic: GO\nSender: system\n\nGo.\n",
    ]
    assert packs[2].compact == packs[2].full


def test_selections_must_match_the_sources() -> None:
    with pytest.raises(ValueError, match="1 sources but 0 selections"):
        build_packs(
            agent={"id": "w", "role": "worker"},
            iteration=1,
            strategy=strategy_parse({"sources": [{"topic": "NOTE"}]}),
            source_messages=[],
            trigger=_message(),
        )


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


def _numbers_as_floats(value: Any) -> Any:
    # JavaScript prints a large double as an integer ("21162358292935930"): compare as doubles.
    if isinstance(value, dict):
        return {key: _numbers_as_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbers_as_floats(item) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


@given(JSON_VALUES)
def test_js_json_reads_back_as_the_same_data(value: Any) -> None:
    assert _numbers_as_floats(json.loads(js_json(value))) == _numbers_as_floats(value)


@given(JSON_VALUES)
@example("\x85 ")  # U+0085 is a line break to ``str.splitlines``, not to JavaScript
def test_js_json_lines_are_indented_by_two_spaces(value: Any) -> None:
    # Lines as JavaScript's output has them: split at "\n" only (``str.splitlines`` also splits
    # at characters JSON.stringify leaves in strings unescaped, such as U+0085).
    for line in js_json(value).split("\n"):
        indent = len(line) - len(line.lstrip(" "))
        assert indent % 2 == 0
