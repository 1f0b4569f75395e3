"""What scripts see (SPEC §7.2): the messages, ledger.*, cluster.*, helpers.*, and their returns."""

from __future__ import annotations

from typing import Any

import pytest

from runs.logic import (
    AgentInfo,
    ClusterInfo,
    LedgerView,
    LogicError,
    TransformMessage,
    TriggerOutcome,
    hook_logic_evaluate,
    transform_evaluate,
    trigger_logic_evaluate,
)
from tests.runs.ledger_data import Run, cluster_of

AGENTS = [
    {"id": "worker", "role": "implementation"},
    {"id": "validator-a", "role": "validator"},
    {"id": "validator-b", "role": "validator"},
]
WORKER = AgentInfo(id="worker", role="implementation", iteration=2)


def value(script: str, run: Run, *, agents: list[dict[str, Any]] = AGENTS) -> Any:
    """What a script returns, read through hook logic (which gives back whole objects)."""
    outcome = hook_logic_evaluate(
        f"return {{ v: (() => {{ {script} }})() }};",
        result={},
        agent=WORKER,
        message=run.last,
        view=run.view(),
        cluster=cluster_of(agents, run.cluster_id),
    )
    assert isinstance(outcome, dict), outcome
    return outcome.get("v")


def validation_run() -> Run:
    """An issue, a handoff at 10 s, then three verdicts of the two validators."""
    run = Run(start=0)
    run.publish("ISSUE_OPENED", "system", text="fix the parser", gap_ms=1_000)
    run.publish("AGENT_OUTPUT", "worker", text="raw line", gap_ms=1_000)
    run.publish("IMPLEMENTATION_READY", "worker", text="done", gap_ms=8_000)
    run.publish("VALIDATION_RESULT", "validator-a", data={"approved": False}, gap_ms=1_000)
    run.publish("VALIDATION_RESULT", "validator-b", data={"approved": "true"}, gap_ms=1_000)
    run.publish("VALIDATION_RESULT", "validator-a", data={"approved": True}, gap_ms=1_000)
    return run


# --- the messages -------------------------------------------------------------------------------


def test_message_fields_read_as_zeroshot_scripts_read_them() -> None:
    # given a message with text, data and metadata
    run = Run("run-7")
    run.publish(
        "VALIDATION_RESULT",
        "validator",
        text="looks good",
        data={"approved": False, "errors": ["a"]},
        metadata={"_republished": True},
        receiver="worker",
    )

    # when a script reads it
    read = value(
        "return [message.id, message.sequence, typeof message.timestamp, message.cluster_id,"
        " message.topic, message.sender, message.receiver, message.content.text,"
        " message.content.data.approved, message.content.data.errors.length,"
        " message.metadata._republished, triggeringMessage === message];",
        run,
    )

    # then every field has the SPEC §1.1 shape with a numeric sequence
    assert read == [
        run.last["id"],
        1,
        "number",
        "run-7",
        "VALIDATION_RESULT",
        "validator",
        "worker",
        "looks good",
        False,
        1,
        True,
        True,
    ]


def test_a_message_without_content_still_has_a_content_object() -> None:
    run = Run()
    run.publish("CLUSTER_RESUMED", "system")

    assert value("return [typeof message.content, message.content.data];", run) == [
        "object",
        None,
    ]


def test_the_agent_and_the_result_of_hook_logic() -> None:
    run = Run()
    run.publish("PLAN_READY", "planner")

    outcome = hook_logic_evaluate(
        "return { seen: [agent.id, agent.role, agent.iteration, result.summary] };",
        result={"summary": "all done"},
        agent=WORKER,
        message=run.last,
        view=run.view(),
        cluster=cluster_of(AGENTS),
    )

    assert outcome == {"seen": ["worker", "implementation", 2, "all done"]}


# --- ledger -------------------------------------------------------------------------------------


def test_query_filters_by_topic_sender_and_time_in_ascending_order() -> None:
    run = validation_run()

    assert value(
        "return ledger.query({ topic: 'VALIDATION_RESULT' }).map((m) => m.sequence);", run
    ) == [4, 5, 6]
    assert value(
        "return ledger.query({ topic: 'VALIDATION_RESULT', sender: 'validator-a' })"
        ".map((m) => m.sequence);",
        run,
    ) == [4, 6]
    # since and until are inclusive, in milliseconds or as a date
    assert value(
        "return ledger.query({ since: 12000, until: 13000 }).map((m) => m.sequence);", run
    ) == [5, 6]
    assert value("return ledger.query({ since: new Date(12000).toISOString() }).length;", run) == 2
    assert value("return ledger.query({ topic: 'NEVER' });", run) == []


def test_query_limit_offset_and_order_follow_zeroshot() -> None:
    run = validation_run()

    # the limit takes the oldest first, unless the order is descending
    assert value(
        "return ledger.query({ topic: 'VALIDATION_RESULT', limit: 2 }).map((m) => m.sequence);",
        run,
    ) == [4, 5]
    assert value(
        "return ledger.query({ topic: 'VALIDATION_RESULT', order: 'desc', limit: 2 })"
        ".map((m) => m.sequence);",
        run,
    ) == [6, 5]
    assert value(
        "return ledger.query({ topic: 'VALIDATION_RESULT', offset: 1 }).map((m) => m.sequence);",
        run,
    ) == [5, 6]
    # a falsy criterion is no criterion, as in zeroshot
    assert value("return ledger.query({ topic: '', since: 0, limit: 0 }).length;", run) == 6


def test_raw_output_lines_are_in_the_view_as_in_zeroshots_ledger() -> None:
    # zeroshot publishes AGENT_OUTPUT on its message bus (src/agent/agent-task-executor.js:1526)
    # and its logic engine queries that ledger unfiltered (src/logic-engine.js).
    run = validation_run()

    assert value("return ledger.count({ topic: 'AGENT_OUTPUT' });", run) == 1
    assert value("return ledger.findLast({ topic: 'AGENT_OUTPUT' }).content.text;", run) == (
        "raw line"
    )
    assert value("return ledger.since(0).map((m) => m.topic);", run) == [
        "ISSUE_OPENED",
        "AGENT_OUTPUT",
        "IMPLEMENTATION_READY",
        "VALIDATION_RESULT",
        "VALIDATION_RESULT",
        "VALIDATION_RESULT",
    ]


def test_find_last_count_and_since() -> None:
    run = validation_run()

    assert value("return ledger.findLast({ topic: 'VALIDATION_RESULT' }).sequence;", run) == 6
    assert (
        value(
            "return ledger.findLast({ topic: 'VALIDATION_RESULT', sender: 'validator-b' })"
            ".content.data.approved;",
            run,
        )
        == "true"
    )
    until = "return ledger.findLast({ topic: 'VALIDATION_RESULT', until: %d })?.sequence;"
    assert value(until % 11_000, run) == 4
    assert value(until % 10_999, run) is None
    assert value("return ledger.findLast({ topic: 'NEVER' });", run) is None
    assert value("return ledger.count({ topic: 'VALIDATION_RESULT', since: 12000 });", run) == 2
    assert value("return ledger.count({ sender: 'validator-a' });", run) == 2
    assert value("return ledger.count();", run) == 6
    assert value("return ledger.since(12000).map((m) => m.sequence);", run) == [5, 6]


def test_each_query_returns_new_objects() -> None:
    run = validation_run()

    edited = value(
        "const first = ledger.findLast({ topic: 'ISSUE_OPENED' });"
        " first.content.text = 'edited';"
        " return ledger.findLast({ topic: 'ISSUE_OPENED' }).content.text;",
        run,
    )

    assert edited == "fix the parser"


def test_the_ledger_is_the_view_as_of_the_offered_message() -> None:
    # given a view read ahead past the message being offered
    run = validation_run()
    offered = run.messages[3]

    # when a script is evaluated with the view as of that message
    outcome = trigger_logic_evaluate(
        "return ledger.count({ topic: 'VALIDATION_RESULT' }) === 1"
        " && ledger.findLast({ topic: 'VALIDATION_RESULT' }).id === message.id;",
        message=offered,
        view=run.view().as_of(int(offered["sequence"])),
        cluster=cluster_of(AGENTS),
    )

    # then it sees nothing after it
    assert outcome == TriggerOutcome(passed=True)


def test_ledger_text_outside_ascii_survives_the_trip() -> None:
    run = Run()
    run.publish("PLAN_READY", "planner", text='naïve 😀 \u2028 "quoted" \\ back')

    assert value("return ledger.findLast({ topic: 'PLAN_READY' }).content.text;", run) == (
        'naïve 😀 \u2028 "quoted" \\ back'
    )


# --- cluster ------------------------------------------------------------------------------------


def test_cluster_api() -> None:
    run = Run("run-9")
    run.publish("ISSUE_OPENED", "system")

    assert value("return cluster.id;", run) == "run-9"
    assert value("return cluster.getAgents().map((a) => a.id);", run) == [
        "worker",
        "validator-a",
        "validator-b",
    ]
    assert value("return cluster.getAgentsByRole('validator').map((a) => a.id);", run) == [
        "validator-a",
        "validator-b",
    ]
    assert value("return cluster.getAgentsByRole('nobody');", run) == []
    assert value("return cluster.getAgent('worker').role;", run) == "implementation"
    assert value("return cluster.getAgent('ghost');", run) is None


def test_cluster_info_of_a_config_keeps_object_agents_only() -> None:
    info = ClusterInfo.of(id="c", config={"agents": [{"id": "a"}, "junk", 3]})

    assert info.agents == ({"id": "a"},)
    assert ClusterInfo.of(id="c", config=None).agents == ()


# --- helpers ------------------------------------------------------------------------------------


def test_all_responded() -> None:
    run = validation_run()

    assert value(
        "return helpers.allResponded(['validator-a', 'validator-b'], 'VALIDATION_RESULT', 10000);",
        run,
    )
    # agent objects are accepted as well as ids
    assert value(
        "return helpers.allResponded(cluster.getAgentsByRole('validator'),"
        " 'VALIDATION_RESULT', 10000);",
        run,
    )
    assert not value(
        "return helpers.allResponded(['validator-a', 'validator-b'], 'VALIDATION_RESULT', 13000);",
        run,
    )


def test_has_consensus_is_zeroshots_every_response_since_approves_with_true() -> None:
    # zeroshot src/logic-engine.js:42-46: at least one response since `since`, and every one has
    # content.data.approved === true; validators' roles play no part.
    run = validation_run()

    # since the handoff: validator-a's first rejection and validator-b's string "true" count
    assert value("return helpers.hasConsensus('VALIDATION_RESULT', 10000);", run) is False
    # since 13 s only validator-a's approval is left: one response, and it approves
    assert value("return helpers.hasConsensus('VALIDATION_RESULT', 13000);", run) is True
    # validator-b has not answered since then, and that does not matter
    assert value("return helpers.hasConsensus('VALIDATION_RESULT', 12500);", run) is True
    # nothing since `since`: no consensus
    assert value("return helpers.hasConsensus('VALIDATION_RESULT', 14000);", run) is False


def test_has_consensus_wants_the_boolean_true_from_every_message() -> None:
    run = Run()
    run.publish("REVIEW", "reviewer-1", data={"approved": True})
    run.publish("REVIEW", "reviewer-2", data={"approved": True})
    solo = [{"id": "worker", "role": "implementation"}]

    assert value("return helpers.hasConsensus('REVIEW');", run, agents=solo) is True
    run.publish("REVIEW", "reviewer-3", data={"approved": "true"})
    assert value("return helpers.hasConsensus('REVIEW');", run, agents=solo) is False
    assert value("return helpers.hasConsensus('NOTHING');", run, agents=solo) is False


def test_has_messages_since() -> None:
    run = validation_run()

    assert value("return helpers.hasMessagesSince('VALIDATION_RESULT', 13000);", run) is True
    assert value("return helpers.hasMessagesSince('VALIDATION_RESULT', 14000);", run) is False


@pytest.mark.parametrize(
    ("complexity", "task_type", "expected"),
    [
        (
            "TRIVIAL",
            "TASK",
            {"base": "single-worker", "max_tokens": 50000, "worker_level": "level1"},
        ),
        (
            "SIMPLE",
            "TASK",
            {"base": "worker-validator", "worker_level": "level2", "validator_level": "level2"},
        ),
        (
            "STANDARD",
            "TASK",
            {"base": "full-workflow", "planner_level": "level2", "validator_count": 2},
        ),
        (
            "CRITICAL",
            "TASK",
            {
                "base": "full-workflow",
                "max_tokens": 150000,
                "planner_level": "level3",
                "validator_count": 0,
            },
        ),
        (
            "STANDARD",
            "DEBUG",
            {"base": "debug-workflow", "investigator_level": "level2", "tester_level": "level2"},
        ),
        ("TRIVIAL", "DEBUG", {"base": "single-worker"}),
    ],
)
def test_get_config_routes_like_zeroshot(
    complexity: str, task_type: str, expected: dict[str, Any]
) -> None:
    run = Run()
    run.publish("ISSUE_OPENED", "system")

    routed = value(f"return helpers.getConfig({complexity!r}, {task_type!r});", run)

    assert routed["params"]["complexity"] == complexity
    assert routed["params"]["task_type"] == task_type
    assert routed["params"]["max_iterations"] == 100
    flat = {"base": routed["base"], **routed["params"]}
    assert {key: flat[key] for key in expected} == expected


def test_get_config_with_auto_pr_validates_trivial_tasks() -> None:
    run = Run()
    run.publish("ISSUE_OPENED", "system")

    assert value("return helpers.getConfig('TRIVIAL', 'TASK', { autoPr: true }).base;", run) == (
        "worker-validator"
    )
    assert value("return helpers.getConfig('TRIVIAL', 'INQUIRY', { autoPr: true }).base;", run) == (
        "single-worker"
    )


# --- what scripts return ------------------------------------------------------------------------


def test_a_stop_cluster_reason_comes_from_the_returned_object() -> None:
    run = validation_run()
    cluster = cluster_of(AGENTS)

    given = trigger_logic_evaluate(
        "return { reason: 'tests_green' };", message=run.last, view=run.view(), cluster=cluster
    )
    plain = trigger_logic_evaluate(
        "return true;", message=run.last, view=run.view(), cluster=cluster
    )

    assert given == TriggerOutcome(passed=True, reason="tests_green")
    assert given.stop_reason == "tests_green"
    assert isinstance(plain, TriggerOutcome)
    assert plain.stop_reason == "all_validators_approved"


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        ("undefined", None),
        ("null", None),
        (
            "{ topic: 'WORKER_PROGRESS', content: { data: { n: [1, 2] } } }",
            {"topic": "WORKER_PROGRESS", "content": {"data": {"n": [1, 2]}}},
        ),
    ],
)
def test_hook_logic_returns_nothing_or_a_patch(returned: str, expected: Any) -> None:
    run = Run()
    run.publish("PLAN_READY", "planner")

    outcome = hook_logic_evaluate(
        f"return {returned};",
        result={},
        agent=WORKER,
        message=run.last,
        view=LedgerView(),
        cluster=cluster_of(AGENTS),
    )

    assert outcome == expected


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ("true", "not a boolean"),
        ("'WORKER_PROGRESS'", "not a string"),
        ("[1]", "not an array"),
        ("() => 1", "not a function"),
        ("{ big: 10n }", "not JSON: TypeError"),
    ],
)
def test_any_other_hook_logic_return_is_an_error(returned: str, message: str) -> None:
    run = Run()
    run.publish("PLAN_READY", "planner")

    outcome = hook_logic_evaluate(
        f"return {returned};",
        result={},
        agent=WORKER,
        message=run.last,
        view=LedgerView(),
        cluster=cluster_of(AGENTS),
    )

    assert isinstance(outcome, LogicError)
    assert outcome.kind == "return"
    assert message in outcome.message


def test_a_transform_returns_the_whole_message() -> None:
    run = Run()
    run.publish("ISSUE_OPENED", "system", text="the task")

    outcome = transform_evaluate(
        "return { topic: 'CONDUCTOR_ESCALATE', receiver: 'senior', metadata: { why: 1 },"
        " content: { text: triggeringMessage.content.text, data: { c: result.complexity } } };",
        result={"complexity": "UNCERTAIN"},
        triggering_message=run.last,
        view=run.view(),
        cluster=cluster_of(AGENTS),
    )

    assert outcome == TransformMessage(
        topic="CONDUCTOR_ESCALATE",
        content={"text": "the task", "data": {"c": "UNCERTAIN"}},
        receiver="senior",
        metadata={"why": 1},
    )


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ("undefined", "not an undefined"),
        ("'TOPIC'", "not a string"),
        ("{ content: {} }", "it returned nothing"),
        ("{ topic: 'lower', content: {} }", 'it returned "lower"'),
        ("{ topic: 'OK' }", "content object"),
        ("{ topic: 'OK', content: 'text' }", "content object"),
        ("{ topic: 'OK', content: {}, receiver: 3 }", "receiver"),
        ("{ topic: 'OK', content: {}, metadata: [] }", "metadata"),
    ],
)
def test_a_transform_without_topic_and_content_is_an_error(returned: str, message: str) -> None:
    run = Run()
    run.publish("ISSUE_OPENED", "system")

    outcome = transform_evaluate(
        f"return {returned};",
        result={},
        triggering_message=run.last,
        view=run.view(),
        cluster=cluster_of(AGENTS),
    )

    assert isinstance(outcome, LogicError)
    assert outcome.kind == "return"
    assert message in outcome.message
