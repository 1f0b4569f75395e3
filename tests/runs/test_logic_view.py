"""The ledger view scripts read: message shape, order, bounds, and the view as of a sequence."""

from __future__ import annotations

import json

import pytest

from runs.logic import VIEW_MAX_BYTES, VIEW_MAX_MESSAGES, LedgerView, script_message
from tests.runs.ledger_data import Run


def test_script_message_has_a_numeric_sequence_and_always_a_content_object() -> None:
    # given a stored message as the API shows it, without content
    wire = {
        "id": "msg_1",
        "sequence": "42",
        "timestamp": 1_700_000_000_000,
        "cluster_id": "c",
        "topic": "ISSUE_OPENED",
        "sender": "system",
        "metadata": None,
    }

    # when it is shaped for a script
    shaped = script_message(wire)

    # then the sequence is a number, content an empty object and the receiver broadcast
    assert shaped == {
        "id": "msg_1",
        "sequence": 42,
        "timestamp": 1_700_000_000_000,
        "cluster_id": "c",
        "topic": "ISSUE_OPENED",
        "sender": "system",
        "receiver": "broadcast",
        "content": {},
        "metadata": None,
    }


def test_content_keeps_falsy_data_and_unicode_text() -> None:
    run = Run()
    run.publish("VALIDATION_RESULT", "validator", text="naïve ✓ 😀", data=False)

    [message] = run.view().messages

    assert message["content"] == {"text": "naïve ✓ 😀", "data": False}


def test_agent_output_is_in_the_view_and_order_is_kept() -> None:
    # given a run with raw output lines between its messages (zeroshot's ledger holds them)
    run = Run()
    run.publish("ISSUE_OPENED", "system", text="fix it")
    run.publish("AGENT_OUTPUT", "worker", text="thinking...")
    run.publish("IMPLEMENTATION_READY", "worker", text="done")

    # when they are appended to a view
    view = run.view()

    # then the output line is there, oldest first
    assert [m["topic"] for m in view.messages] == [
        "ISSUE_OPENED",
        "AGENT_OUTPUT",
        "IMPLEMENTATION_READY",
    ]
    assert view.last_sequence == 3
    output = view.get(2)
    assert output is not None
    assert output["content"]["text"] == "thinking..."
    assert view.get(4) is None


def test_agent_output_has_its_own_bound_and_never_pushes_other_messages_out() -> None:
    # given a view that holds at most 3 output messages (and 200 bytes of them) among 10
    run = Run()
    run.publish("ISSUE_OPENED", "system", text="fix it")
    for n in range(6):
        run.publish("AGENT_OUTPUT", "worker", text=f"line {n}")
    run.publish("IMPLEMENTATION_READY", "worker", text="done")
    view = LedgerView(max_messages=10, max_output_messages=3)
    view.extend(run.messages)

    # then the oldest outputs went first; the issue and the handoff stayed
    texts = [m["content"]["text"] for m in view.messages]
    assert texts == ["fix it", "line 3", "line 4", "line 5", "done"]
    assert view.size_bytes == sum(len(json.dumps(m, separators=(",", ":"))) for m in view.messages)
    # the byte bound of outputs works the same way; the newest output always stays
    small = LedgerView(max_output_bytes=1)
    small.extend(run.messages)
    assert [m["topic"] for m in small.messages] == [
        "ISSUE_OPENED",
        "AGENT_OUTPUT",
        "IMPLEMENTATION_READY",
    ]
    assert small.messages[1]["content"]["text"] == "line 5"
    # and a view as of an earlier sequence counts its own outputs
    earlier = view.as_of(6)
    assert [m["content"]["text"] for m in earlier.messages] == ["fix it", "line 3", "line 4"]


def test_append_refuses_a_sequence_that_does_not_follow() -> None:
    run = Run()
    first = run.publish("ISSUE_OPENED", "system")
    view = run.view()

    with pytest.raises(ValueError, match="does not follow"):
        view.append(first)


def test_the_message_bound_drops_the_oldest() -> None:
    # given a view that holds three messages at most
    run = Run()
    for n in range(5):
        run.publish("AGENT_LIFECYCLE", "worker", text=f"event {n}")

    # when five are appended
    view = LedgerView(run.messages, max_messages=3)

    # then the newest three remain
    assert [m["content"]["text"] for m in view.messages] == ["event 2", "event 3", "event 4"]
    assert len(view) == 3


def test_the_byte_bound_drops_the_oldest_but_keeps_the_newest() -> None:
    # given messages of about 1,000 bytes each and a bound of 2,500 bytes
    run = Run()
    for n in range(4):
        run.publish("PLAN_READY", "planner", text=f"{n}" * 800)
    view = LedgerView(run.messages, max_bytes=2_500)

    # then only as many of the newest as fit are kept
    assert [m["sequence"] for m in view.messages] == [3, 4]
    assert view.size_bytes <= 2_500

    # and a single message larger than the bound is still kept on its own
    run.publish("PLAN_READY", "planner", text="x" * 5_000)
    view.append(run.last)
    assert [m["sequence"] for m in view.messages] == [5]


def test_the_documented_bounds() -> None:
    assert VIEW_MAX_MESSAGES == 10_000
    assert VIEW_MAX_BYTES == 16 * 1024 * 1024
    view = LedgerView()
    assert (view.max_messages, view.max_bytes) == (VIEW_MAX_MESSAGES, VIEW_MAX_BYTES)


def test_as_of_holds_the_messages_up_to_that_sequence() -> None:
    # given a view read ahead to sequence 5
    run = Run()
    for n in range(5):
        run.publish("AGENT_LIFECYCLE", "worker", text=f"event {n}")
    view = run.view()

    # when it is asked as of sequence 3
    earlier = view.as_of(3)

    # then it holds 1..3 and the original is untouched
    assert [m["sequence"] for m in earlier.messages] == [1, 2, 3]
    assert earlier.last_sequence == 3
    assert len(view) == 5
    assert view.as_of(0).messages == []


def test_the_payload_indexes_every_message_by_topic() -> None:
    # given a view of three messages on two topics
    run = Run()
    run.publish("ISSUE_OPENED", "system", text="é")
    run.publish("VALIDATION_RESULT", "validator", data={"approved": True})
    run.publish("VALIDATION_RESULT", "validator-2", data={"approved": False})

    # when its payload is built
    payload = run.view().payload()
    index = json.loads(payload.index_json)

    # then each slice of the ASCII blob is one message, and topics list positions
    assert payload.blob.isascii()
    slices = [json.loads(payload.blob[index["start"][i] : index["start"][i + 1]]) for i in range(3)]
    assert [m["sequence"] for m in slices] == [1, 2, 3]
    assert slices[0]["content"]["text"] == "é"
    assert index["topics"] == {"ISSUE_OPENED": [0], "VALIDATION_RESULT": [1, 2]}
    assert [index["names"][code] for code in index["sender"]] == [
        "system",
        "validator",
        "validator-2",
    ]


def test_the_payload_is_rebuilt_after_an_append() -> None:
    run = Run()
    run.publish("ISSUE_OPENED", "system")
    view = run.view()
    before = view.payload()
    assert view.payload() is before

    view.append(run.publish("PLAN_READY", "planner"))

    assert view.payload() is not before
    assert json.loads(view.payload().index_json)["topics"]["PLAN_READY"] == [1]
