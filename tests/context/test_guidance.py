"""The guidance mailbox in a prompt (SPEC §7.8): zeroshot's ``## Guidance (Queued)`` section,
byte for byte, as a required pack after the instructions, each message delivered once."""

from __future__ import annotations

from typing import Any

import pytest

from context.guidance import GUIDANCE_PER_BUILD, guidance_block
from context.models import ContextBuild
from context.services import build_guidance_delivered, context_build
from ledger.interfaces import MessageDraft, cluster_create, message_publish
from ledger.records import MessageRecord

pytestmark = pytest.mark.django_db


def record(sequence: int, timestamp: int, topic: str, sender: str, receiver: str, **content: Any):  # type: ignore[no-untyped-def]
    return MessageRecord(
        id=f"m{sequence}",
        cluster_id="c1",
        sequence=sequence,
        timestamp=timestamp,
        topic=topic,
        sender=sender,
        receiver=receiver,
        content=content,
    )


# Produced by zeroshot's own formatGuidanceBlock (src/agent/guidance-queue.ts:56-109, with
# orderBySequence as agent-wrapper.js:465-471 calls it) for the four messages below, run under
# Node. It pins what Python and JavaScript do differently: trimEnd keeps U+001C and strips
# U+00A0, U+FEFF and U+2028 at the very end only; `data` 0 is not written, `{...}` is, with
# non-ASCII as it is; an empty sender is "unknown"; a broadcast names its receiver.
ZEROSHOT_BLOCK = (
    "## Guidance (Queued)\n\n<<GUIDANCE_QUEUE_START>>\n"
    "[2026-01-01T00:00:00.123Z] user (USER_GUIDANCE_CLUSTER -> broadcast)\n"
    "Prefer small commits.\n\n"
    "[2026-01-01T00:00:01.000Z] user (USER_GUIDANCE_AGENT -> worker)\n"
    "Use approach B — not A.\u00a0\ufeff\n"
    '{\n  "files": [\n    "a.py"\n  ],\n  "n": 0,\n  "ok": true,\n  "nested": {\n'
    '    "é": null\n  }\n}\n\n'
    "[2026-01-01T00:00:02.500Z] unknown (USER_GUIDANCE_AGENT -> worker)\n"
    "keep \x1c\n\n"
    "[2026-01-01T00:00:03.000Z] user (USER_GUIDANCE_CLUSTER -> broadcast)\n"
    "Stop after the tests pass.\n\n"
    "<<GUIDANCE_QUEUE_END>>\n\n"
)


def test_the_section_is_zeroshots_byte_for_byte() -> None:
    messages = [
        record(
            7,
            1767225600123,
            "USER_GUIDANCE_CLUSTER",
            "user",
            "broadcast",
            text="Prefer small commits.\n\n",
        ),
        record(
            9,
            1767225601000,
            "USER_GUIDANCE_AGENT",
            "user",
            "worker",
            text="Use approach B — not A.\u00a0\ufeff",
            data={"files": ["a.py"], "n": 0, "ok": True, "nested": {"é": None}},
        ),
        record(11, 1767225602500, "USER_GUIDANCE_AGENT", "", "worker", text="keep \x1c", data=0),
        record(
            12,
            1767225603000,
            "USER_GUIDANCE_CLUSTER",
            "user",
            "broadcast",
            text="Stop after the tests pass.\u00a0\ufeff\u2028 ",
        ),
    ]

    # in sequence order whatever order they come in (guidance-queue.ts:77-87)
    assert guidance_block(list(reversed(messages))) == ZEROSHOT_BLOCK
    # no guidance, no section (guidance-queue.ts:93)
    assert guidance_block([]) == ""


T0 = 4_102_444_800_000


@pytest.fixture(autouse=True)
def _clock_far_behind(settings: Any) -> None:
    settings.LEDGER_MAX_CLOCK_SKEW_MS = 200 * 365 * 86_400_000


SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def worker(agent_id: str = "worker", **extra: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": "implementation",
        "prompt": "Do the work.",
        "jsonSchema": SCHEMA,
        "triggers": [{"topic": "ISSUE_OPENED"}],
        "contextStrategy": {"sources": [{"topic": "ISSUE_OPENED", "amount": 1}]},
        **extra,
    }


def publish(cluster_id: str, topic: str, text: str, receiver: str = "broadcast") -> MessageRecord:
    return message_publish(
        cluster_id=cluster_id,
        draft=MessageDraft(topic=topic, sender="user", receiver=receiver, content={"text": text}),
    )


def cluster(*agents: dict[str, Any]) -> str:
    cid = cluster_create(cluster_id="c1", config={"agents": list(agents)}, created_at=T0).id
    publish(cid, "ISSUE_OPENED", "Implement feature X")
    return cid


def pack_ids(outcome: Any) -> list[str]:
    return [d.id for d in outcome.result.decisions if d.status == "included"]


def test_guidance_is_a_required_pack_between_the_instructions_and_the_output_schema() -> None:
    # zeroshot: tests/unit/guidance-queue.test.js:136 ("injects guidance between instructions
    # and JSON output schema"); its pack is required, as all its fixed packs are
    # (src/agent/agent-context-packs.ts:66-88)
    cid = cluster(worker(contextStrategy={"sources": [{"topic": "ISSUE_OPENED"}], "maxTokens": 1}))
    note = publish(cid, "USER_GUIDANCE_CLUSTER", "Use approach B")

    outcome = context_build(cluster_id=cid, agent_id="worker", preview=True)

    assert pack_ids(outcome)[:4] == ["header", "instructions", "queuedGuidance", "outputSchema"]
    decision = next(d for d in outcome.result.decisions if d.id == "queuedGuidance")
    assert (decision.section, decision.priority, decision.required) == (
        "queuedGuidance",
        "required",
        True,
    )
    # kept past a budget of one token: guidance delivered once must never be dropped
    assert decision.status == "included"
    assert decision.variant == "full"
    assert guidance_block([note]) in outcome.context


def test_the_mailbox_holds_broadcasts_and_this_agents_guidance_only() -> None:
    # zeroshot: src/ledger.js:655-700 (queryGuidanceMailbox: topic USER_GUIDANCE_CLUSTER, or
    # USER_GUIDANCE_AGENT with receiver = the agent)
    cid = cluster(worker("worker"), worker("reviewer"))
    publish(cid, "USER_GUIDANCE_CLUSTER", "To all")
    publish(cid, "USER_GUIDANCE_AGENT", "To the worker", receiver="worker")
    publish(cid, "USER_GUIDANCE_AGENT", "To the reviewer", receiver="reviewer")
    publish(cid, "NOTES", "Not guidance")

    prompt = context_build(cluster_id=cid, agent_id="worker", preview=True).context

    assert "To all" in prompt
    assert "To the worker" in prompt
    assert "To the reviewer" not in prompt
    assert "Not guidance" not in prompt
    assert prompt.index("To all") < prompt.index("To the worker")


def test_a_build_made_over_the_api_delivers_its_guidance_once() -> None:
    # zeroshot: tests/integration/guidance-queue-context.test.js:52-78 (no block before, the
    # block on the next run, not repeated on the one after)
    cid = cluster(worker())
    first = context_build(cluster_id=cid, agent_id="worker")
    note = publish(cid, "USER_GUIDANCE_AGENT", "Use approach B", receiver="worker")

    second = context_build(cluster_id=cid, agent_id="worker")
    third = context_build(cluster_id=cid, agent_id="worker")

    assert "## Guidance (Queued)" not in first.context
    assert "Use approach B" in second.context
    assert "## Guidance (Queued)" not in third.context
    rows = ContextBuild.objects.order_by("id").values_list("guidance_through", "guidance_delivered")
    assert list(rows) == [(None, False), (note.sequence, True), (None, False)]


def test_a_previews_guidance_stays_queued() -> None:
    cid = cluster(worker())
    publish(cid, "USER_GUIDANCE_CLUSTER", "Use approach B")

    assert (
        "Use approach B" in context_build(cluster_id=cid, agent_id="worker", preview=True).context
    )
    assert "Use approach B" in context_build(cluster_id=cid, agent_id="worker").context


def test_a_tasks_build_delivers_its_guidance_only_when_the_task_completes() -> None:
    # zeroshot moves its cursor once the task's hook succeeded (agent-lifecycle.js:700-710)
    cid = cluster(worker())
    publish(cid, "USER_GUIDANCE_CLUSTER", "Use approach B")

    unused = context_build(cluster_id=cid, agent_id="worker", guidance_on_completion=True)
    retried = context_build(cluster_id=cid, agent_id="worker", guidance_on_completion=True)
    assert "Use approach B" in unused.context
    assert "Use approach B" in retried.context

    assert retried.build_id is not None
    build_guidance_delivered(build_id=retried.build_id)
    assert "Use approach B" not in context_build(cluster_id=cid, agent_id="worker").context


def test_a_prompt_carries_at_most_the_oldest_queued_and_the_rest_waits() -> None:
    cid = cluster(worker())
    for i in range(GUIDANCE_PER_BUILD + 2):
        publish(cid, "USER_GUIDANCE_CLUSTER", f"note {i:02d}")

    first = context_build(cluster_id=cid, agent_id="worker").context
    second = context_build(cluster_id=cid, agent_id="worker").context

    assert [f"note {i:02d}" in first for i in range(GUIDANCE_PER_BUILD + 2)] == [True] * (
        GUIDANCE_PER_BUILD
    ) + [False, False]
    assert "note 00" not in second
    assert f"note {GUIDANCE_PER_BUILD:02d}" in second
    assert f"note {GUIDANCE_PER_BUILD + 1:02d}" in second


def test_guidance_topics_need_no_publisher_in_the_config() -> None:
    # zeroshot: src/config-validator.js:456-463 (GUIDANCE_TOPICS are external topics)
    from context.strategy import strategy_validate_agents

    sources = [{"topic": "USER_GUIDANCE_AGENT"}, {"topic": "USER_GUIDANCE_CLUSTER"}]
    report = strategy_validate_agents([worker(contextStrategy={"sources": sources})])

    assert [w for w in report.warnings if w.field == "topic"] == []
