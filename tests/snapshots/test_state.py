"""The state snapshot fold (SPEC §5): pure, no database."""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.interfaces import MessageRecord
from snapshots.state import (
    LIMITS,
    SNAPSHOT_TRIGGER_TOPICS,
    snapshot_apply,
    snapshot_content,
    snapshot_equal,
    snapshot_fold,
    snapshot_summary,
)

CLUSTER = "emerald-prism-4"
_sequence = itertools.count(1)


def message(
    topic: str,
    *,
    text: str | None = None,
    data: Any = None,
    metadata: Any = None,
    timestamp: int = 1_000,
    ident: str | None = None,
    no_data: bool = False,
) -> MessageRecord:
    content: dict[str, Any] = {}
    if text is not None:
        content["text"] = text
    if not no_data:
        content["data"] = data
    seq = next(_sequence)
    return MessageRecord(
        id=ident or f"msg_{seq:032x}",
        cluster_id=CLUSTER,
        sequence=seq,
        timestamp=timestamp,
        topic=topic,
        sender="agent",
        content=content,
        metadata=metadata,
    )


def apply(state: dict[str, Any] | None, msg: MessageRecord) -> dict[str, Any]:
    return snapshot_apply(state, msg, cluster_id=CLUSTER)


def test_issue_opened_matches_the_snapshot_zeroshot_wrote() -> None:
    # given the ISSUE_OPENED of the fixture ledger emerald-prism-4.db
    issue = MessageRecord(
        id="msg_2a6776e437ef8610b6031e7faeab9d20",
        cluster_id=CLUSTER,
        sequence=3,
        timestamp=1770023875561,
        topic="ISSUE_OPENED",
        sender="system",
        content={
            "text": "# Manual Input\n\nAdd a login button\n",
            "data": {"issue_number": None, "title": "Manual Input"},
        },
        metadata={"source": "text"},
    )
    # when
    state = apply(None, issue)
    # then it is the STATE_SNAPSHOT zeroshot stored, key order included
    expected = (
        '{"version":1,"updatedAt":1770023875561,"clusterId":"emerald-prism-4",'
        '"sourceMessageId":"msg_2a6776e437ef8610b6031e7faeab9d20","task":{"raw":"# Manual Input'
        '\\n\\nAdd a login button","title":"Manual Input","source":"text"}}'
    )
    assert json.dumps(state, separators=(",", ":")) == expected
    assert snapshot_summary(state) == "Task: Manual Input"


def test_task_title_falls_back_to_the_first_line_and_source_to_data() -> None:
    state = apply(
        None,
        message(
            "ISSUE_OPENED",
            text="\n\n## Fix   the login\nmore",
            data={"issueNumber": 42, "source": "github"},
        ),
    )
    assert state["task"] == {
        "raw": "## Fix   the login\nmore",
        "title": "Fix the login",
        "issueNumber": 42,
        "source": "github",
    }


def test_plan_ready_v2_replaces_v1() -> None:
    # given a first plan
    v1 = message(
        "PLAN_READY",
        text="Plan v1",
        data={
            "summary": "first",
            "acceptanceCriteria": [{"id": "AC0", "priority": "SHOULD", "criterion": "Old"}],
            "filesAffected": ["old.js", "older.js"],
        },
        timestamp=1_000,
    )
    state = apply(None, v1)
    # when a second plan arrives
    v2 = message(
        "PLAN_READY",
        text="Plan v2",
        data={
            "acceptanceCriteria": [{"id": "AC1", "priority": "MUST", "criterion": "New criteria"}],
            "filesAffected": ["new.js"],
        },
        timestamp=2_000,
    )
    state = apply(state, v2)
    # then the whole section is the new one (no stale summary)
    assert state["plan"] == {
        "text": "Plan v2",
        "acceptanceCriteria": ["AC1 (MUST): New criteria"],
        "filesAffected": ["new.js"],
        "updatedAt": 2_000,
    }
    assert state["updatedAt"] == 2_000
    assert state["sourceMessageId"] == v2.id


def test_acceptance_criteria_render_every_shape() -> None:
    criteria = [
        "Plain text",
        {"id": "AC2", "text": "From text"},
        {"priority": "NICE", "summary": "No id"},
        {"id": "AC4", "priority": "MUST"},
        None,
        7,
    ]
    state = apply(None, message("PLAN_READY", data={"acceptanceCriteria": criteria}))
    assert state["plan"]["acceptanceCriteria"] == [
        "Plain text",
        "AC2: From text",
        "No id",
        "AC4 (MUST):",
        "7",
    ]


def test_worker_progress_from_completion_status_keeps_false() -> None:
    status = {"canValidate": False, "percentComplete": 45, "nextSteps": ["Write tests", "Run lint"]}
    state = apply(
        None, message("WORKER_PROGRESS", text="Halfway", data={"completionStatus": status})
    )
    assert state["progress"] == {
        "canValidate": False,
        "percentComplete": 45,
        "nextSteps": ["Write tests", "Run lint"],
        "lastSummary": "Halfway",
        "updatedAt": 1_000,
    }
    assert snapshot_summary(state) == "Progress: 45% | canValidate=false | next: Write tests"


def test_progress_from_data_itself_and_zero_percent_kept() -> None:
    state = apply(
        None, message("IMPLEMENTATION_READY", data={"percentComplete": 0, "blockers": ["CI down"]})
    )
    assert state["progress"] == {"percentComplete": 0, "blockers": ["CI down"], "updatedAt": 1_000}


def test_progress_without_progress_fields_is_left_as_it_was() -> None:
    # given a progress section
    first = {"completionStatus": {"canValidate": True, "percentComplete": 100}}
    state = apply(None, message("IMPLEMENTATION_READY", data=first, timestamp=1_000))
    # when a later message carries no progress fields
    later = apply(state, message("WORKER_PROGRESS", text="chatter", data={"note": 1}, timestamp=5))
    # then progress is untouched and the snapshot counts as unchanged
    assert later["progress"] == state["progress"]
    assert snapshot_equal(state, later)


def test_validation_result_errors_stored_as_is() -> None:
    state = apply(
        None,
        message(
            "VALIDATION_RESULT", data={"approved": False, "errors": ["Missing tests", "Type error"]}
        ),
    )
    assert state["validation"] == {
        "approved": False,
        "errors": ["Missing tests", "Type error"],
        "updatedAt": 1_000,
    }
    assert snapshot_summary(state) == "Validation: rejected (2 errors)"


def test_validation_errors_from_issues_and_criteria_results() -> None:
    issues = [
        {"bug": "First"},
        {"bug": "Null deref"},
        {"message": "Bad name"},
        {"error": "Crash"},
        {"summary": "Slow"},
        {"other": "ignored"},
        "plain",
    ]
    results = [
        {
            "id": "AC1",
            "status": "PASS",
            "reason": "x" * 500,
            "evidence": {"command": "pytest", "exitCode": 0, "output": "long"},
        },
        {"id": "AC2", "status": "FAIL", "evidence": "not an object"},
        "junk",
    ]
    data = {"approved": "true", "issues": issues, "criteriaResults": results}
    state = apply(None, message("VALIDATION_RESULT", data=data))
    validation = state["validation"]
    assert validation["approved"] is True
    # the last five of the six issues that map to a text ({"other": ...} maps to nothing)
    assert validation["errors"] == ["Null deref", "Bad name", "Crash", "Slow", "plain"]
    assert validation["criteriaResults"] == [
        {
            "id": "AC1",
            "status": "PASS",
            "reason": "x" * 197 + "...",
            "evidence": {"command": "pytest", "exitCode": 0},
        },
        {"id": "AC2", "status": "FAIL"},
    ]


def test_investigation_complete_fills_debug() -> None:
    data = {
        "successCriteria": "tests pass\nand lint",
        "rootCauses": ["a", {"cause": "b"}, {"summary": "c"}, {"description": "d"}, "e", "f"],
    }
    state = apply(
        None, message("INVESTIGATION_COMPLETE", text="1. Fix parser\n2. Add test", data=data)
    )
    assert state["debug"] == {
        "fixPlan": "1. Fix parser\n2. Add test",
        "successCriteria": "tests pass and lint",
        "rootCauses": ["b", "c", "d", "e", "f"],
        "updatedAt": 1_000,
    }
    assert snapshot_summary(state) == "Debug: 1. Fix parser"


def test_identical_republish_is_equal_despite_new_timestamps() -> None:
    plan = {"summary": "s", "acceptanceCriteria": ["a"], "filesAffected": ["f.py"]}
    first = apply(None, message("PLAN_READY", text="Plan", data=plan, timestamp=1_000))
    second = apply(first, message("PLAN_READY", text="Plan", data=plan, timestamp=9_000))
    assert first["plan"]["updatedAt"] != second["plan"]["updatedAt"]
    assert snapshot_equal(first, second)
    changed = apply(second, message("PLAN_READY", text="Plan 2", data=plan, timestamp=9_001))
    assert not snapshot_equal(second, changed)


def test_equality_is_strict_about_json_types() -> None:
    base = {"version": 1, "progress": {"canValidate": True}}
    assert not snapshot_equal(base, {"version": 1, "progress": {"canValidate": 1}})
    assert snapshot_equal(None, None)
    assert not snapshot_equal(base, None)


def test_summary_has_all_five_lines_in_order() -> None:
    state: dict[str, Any] | None = None
    for msg in [
        message("ISSUE_OPENED", text="# Add login\nbody", data={}),
        message("PLAN_READY", text="First line of plan\nsecond"),
        message("WORKER_PROGRESS", data={"canValidate": True}),
        message("VALIDATION_RESULT", data={"errors": ["No test for logout"]}),
        message("INVESTIGATION_COMPLETE", data={"successCriteria": "green build"}),
    ]:
        state = apply(state, msg)
    assert snapshot_summary(state) == "\n".join(
        [
            "Task: Add login",
            "Plan: First line of plan",
            "Progress: canValidate=true",
            "Validation: pending (1 errors)",
            "Debug: green build",
        ]
    )


def test_summary_edge_forms() -> None:
    assert snapshot_summary(None) == ""
    assert snapshot_summary({"version": 1}) == ""
    only_summary = {"progress": {"lastSummary": "Still reading", "updatedAt": 1}}
    assert snapshot_summary(only_summary) == "Progress: Still reading"
    assert snapshot_summary({"progress": {"percentComplete": 12.5}}) == "Progress: 12.5%"
    assert snapshot_summary({"validation": {"approved": True}}) == "Validation: approved"
    assert snapshot_summary({"plan": {"summary": "Short", "text": "Long"}}) == "Plan: Short"


def test_snapshot_content_carries_summary_and_state() -> None:
    state = apply(None, message("ISSUE_OPENED", text="Do it", data={"title": "T"}))
    assert snapshot_content(state) == {"text": "Task: T", "data": state}


def test_truncation_keeps_the_limit_with_dots() -> None:
    long = "word " * 2000
    state = apply(None, message("ISSUE_OPENED", text=long, data={"title": "t" * 400}))
    assert len(state["task"]["raw"]) == 2000
    assert state["task"]["raw"].endswith("...")
    assert state["task"]["title"] == "t" * 297 + "..."
    plan = apply(state, message("PLAN_READY", text="p" * 3000, data={"summary": "s" * 301}))
    assert plan["plan"]["text"] == "p" * 2497 + "..."
    assert plan["plan"]["summary"] == "s" * 297 + "..."
    exact = apply(None, message("PLAN_READY", text="p" * 2500))
    assert exact["plan"]["text"] == "p" * 2500


def test_list_limits_keep_the_last_items() -> None:
    data = {
        "filesAffected": [f"f{i}" for i in range(30)],
        "acceptanceCriteria": list("abcdefghijkl"),
    }
    state = apply(None, message("PLAN_READY", data=data))
    assert state["plan"]["filesAffected"] == [f"f{i}" for i in range(10, 30)]
    assert state["plan"]["acceptanceCriteria"] == list("cdefghijkl")


def test_empty_values_are_removed_but_false_and_zero_stay() -> None:
    state = apply(
        None,
        message(
            "VALIDATION_RESULT",
            data={"approved": False, "errors": ["", "  ", None], "criteriaResults": [{}]},
        ),
    )
    assert state["validation"] == {"approved": False, "updatedAt": 1_000}
    issue = apply(
        None, message("ISSUE_OPENED", text="   ", data={"title": "", "issue_number": None})
    )
    assert "task" not in issue
    assert set(issue) == {"version", "updatedAt", "clusterId", "sourceMessageId"}


def test_empty_new_section_replaces_the_old_one() -> None:
    state = apply(None, message("PLAN_READY", text="Plan"))
    state = apply(state, message("PLAN_READY", text="", data={}))
    assert "plan" not in state
    state = apply(state, message("VALIDATION_RESULT", data={"errors": [], "approved": "maybe"}))
    assert "validation" not in state
    assert snapshot_summary(state) == ""


@pytest.mark.parametrize("topic", SNAPSHOT_TRIGGER_TOPICS)
@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        ["a"],
        3,
        2.5,
        "text",
        True,
        {"completionStatus": [1]},
        {"errors": "x"},
        {"issues": [None, 3, []]},
        {"acceptanceCriteria": {"id": 1}},
        {"rootCauses": [[], {}]},
        {"criteriaResults": [{"evidence": {"exitCode": float("nan"), "command": ["ls"]}}]},
        {"title": {"a": 1}, "issue_number": True, "summary": [1, 2]},
    ],
)
def test_malformed_data_never_crashes(topic: str, data: Any) -> None:
    state = apply(None, message(topic, text="x", data=data, metadata=[1, 2]))
    assert state["version"] == 1
    assert isinstance(snapshot_summary(state), str)
    json.dumps(state, allow_nan=False)


def test_message_without_content_and_garbage_state() -> None:
    msg = message("PLAN_READY", no_data=True)
    state = snapshot_apply({"plan": "not a section", "task": []}, msg, cluster_id=CLUSTER)
    assert set(state) == {"version", "updatedAt", "clusterId", "sourceMessageId"}


def test_apply_never_mutates_its_input() -> None:
    state = apply(None, message("PLAN_READY", text="Plan", data={"filesAffected": ["a"]}))
    before = copy.deepcopy(state)
    after = apply(state, message("ISSUE_OPENED", text="Issue"))
    after["plan"]["filesAffected"].append("mutated")
    assert state == before


def test_non_trigger_topic_is_refused() -> None:
    with pytest.raises(ValueError, match="AGENT_OUTPUT"):
        apply(None, message("AGENT_OUTPUT", text="raw"))


def test_fold_skips_other_topics_and_equals_step_by_step() -> None:
    msgs = [
        message("AGENT_LIFECYCLE", data={"event": "STARTED"}),
        message("ISSUE_OPENED", text="Issue", timestamp=1),
        message("PLAN_READY", text="Plan", timestamp=2),
        message("AGENT_OUTPUT", text="noise", timestamp=3),
        message("VALIDATION_RESULT", data={"approved": True}, timestamp=4),
    ]
    folded = snapshot_fold(msgs, cluster_id=CLUSTER)
    state = apply(apply(apply(None, msgs[1]), msgs[2]), msgs[4])
    assert folded == state
    assert snapshot_fold([msgs[0]], cluster_id=CLUSTER) is None


# --- property: any sequence of trigger messages ----------------------------------------------

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.text(alphabet="ab \n#", min_size=150, max_size=3200),
)
json_value = st.recursive(
    json_leaf,
    lambda children: (
        st.lists(children, max_size=25) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=60,
)
known_keys = st.sampled_from(
    [
        "title", "issue_number", "issueNumber", "source", "summary", "acceptanceCriteria",
        "filesAffected", "completionStatus", "canValidate", "percentComplete", "blockers",
        "nextSteps", "approved", "errors", "issues", "criteriaResults", "successCriteria",
        "rootCauses", "id", "priority", "criterion", "text", "reason", "status", "evidence",
        "command", "exitCode", "bug", "message", "error", "cause", "description",
    ]
)  # fmt: skip
structured = st.recursive(
    json_leaf,
    lambda children: (
        st.lists(children, max_size=25) | st.dictionaries(known_keys, children, max_size=8)
    ),
    max_leaves=80,
)
trigger_message = st.builds(
    lambda topic, text, data, metadata, ts: message(
        topic, text=text, data=data, metadata=metadata, timestamp=ts
    ),
    st.sampled_from(SNAPSHOT_TRIGGER_TOPICS),
    st.one_of(st.none(), st.text(max_size=50), st.text(alphabet="xy \n#", max_size=3000)),
    st.one_of(structured, json_value),
    st.one_of(st.none(), st.dictionaries(st.just("source"), json_leaf)),
    st.integers(min_value=0, max_value=2**45),
)


def _assert_limits(state: dict[str, Any]) -> None:
    def text_ok(value: Any, limit: int, *, one_line: bool = False) -> None:
        if value is None:
            return
        assert isinstance(value, str)
        assert value
        assert len(value) <= limit
        if one_line:
            assert "\n" not in value

    def list_ok(value: Any, max_items: int) -> None:
        if value is None:
            return
        assert isinstance(value, list)
        assert 0 < len(value) <= max_items
        for item in value:
            text_ok(item, LIMITS.list_item, one_line=True)

    task = state.get("task", {})
    text_ok(task.get("raw"), LIMITS.task_text)
    text_ok(task.get("title"), LIMITS.summary, one_line=True)
    plan = state.get("plan", {})
    text_ok(plan.get("text"), LIMITS.plan_text)
    text_ok(plan.get("summary"), LIMITS.summary, one_line=True)
    list_ok(plan.get("acceptanceCriteria"), LIMITS.acceptance_criteria)
    list_ok(plan.get("filesAffected"), LIMITS.files_affected)
    progress = state.get("progress", {})
    assert progress.get("canValidate") in (None, True, False)
    list_ok(progress.get("blockers"), LIMITS.blockers)
    list_ok(progress.get("nextSteps"), LIMITS.next_steps)
    text_ok(progress.get("lastSummary"), LIMITS.summary, one_line=True)
    validation = state.get("validation", {})
    list_ok(validation.get("errors"), LIMITS.errors)
    results = validation.get("criteriaResults")
    if results is not None:
        assert 0 < len(results) <= LIMITS.criteria_results
        for result in results:
            text_ok(result.get("reason"), LIMITS.list_item, one_line=True)
            text_ok(result.get("evidence", {}).get("command"), LIMITS.list_item, one_line=True)
    debug = state.get("debug", {})
    text_ok(debug.get("fixPlan"), LIMITS.fix_plan)
    text_ok(debug.get("successCriteria"), LIMITS.summary, one_line=True)
    list_ok(debug.get("rootCauses"), LIMITS.root_causes)

    def no_empty(value: Any) -> None:
        assert value not in (None, "", [], {})
        if isinstance(value, dict):
            for item in value.values():
                no_empty(item)
        elif isinstance(value, list):
            for item in value:
                no_empty(item)

    no_empty(state)


@settings(max_examples=300, deadline=None)
@given(st.lists(trigger_message, max_size=12))
def test_fold_of_random_triggers_never_raises_and_respects_limits(
    msgs: list[MessageRecord],
) -> None:
    state = snapshot_fold(msgs, cluster_id=CLUSTER)
    if not msgs:
        assert state is None
        return
    assert state is not None
    assert state["updatedAt"] == msgs[-1].timestamp
    assert state["sourceMessageId"] == msgs[-1].id
    _assert_limits(state)
    json.dumps(state, allow_nan=False)
    summary = snapshot_summary(state)
    lines = summary.splitlines() if summary else []
    assert len(lines) <= 5
    # a label, at most a 300-char value, and the progress decorations
    assert all(len(line) <= 400 and "\n" not in line for line in lines)
    assert snapshot_equal(state, copy.deepcopy(state))
