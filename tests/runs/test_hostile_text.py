"""Text from scripts, hooks and agents is made storable before it becomes a draft (issue 17,
items 3, 4, 12): half an emoji, a NUL or a megabyte never loses the message that reports it."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.interfaces import (
    MessageDraft,
    MessageFilter,
    cluster_create,
    cluster_get,
    message_publish,
    message_query,
)
from runs.models import Task
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

# 300 UTF-16 units, then an emoji: JavaScript's slice(0, 301) keeps half of it.
HALF_EMOJI_TEXT = "a" * 300 + "\U0001f600 and more"


def agent(agent_id: str, *triggers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": extra.pop("role", "implementation"),
        "prompt": "Work.",
        "triggers": list(triggers),
        "contextStrategy": {"sources": [{"topic": "GO", "amount": 1}], "maxTokens": 4000},
        **extra,
    }


def running(*agents: dict[str, Any], cluster_id: str = "c1") -> str:
    return cluster_create(
        cluster_id=cluster_id, config={"agents": list(agents)}, state="running"
    ).id


def publish(cluster_id: str, topic: str = "GO", text: str = "go") -> None:
    message_publish(
        cluster_id=cluster_id,
        draft=MessageDraft(topic=topic, sender="system", content={"text": text}),
    )


def messages(cluster_id: str, topic: str) -> list[Any]:
    return message_query(cluster_id=cluster_id, where=MessageFilter(topic=topic), limit=None)


def script(source: str) -> dict[str, str]:
    return {"engine": "javascript", "script": source}


def test_a_trigger_script_throwing_half_an_emoji_is_reported_and_the_sibling_still_runs(
    db: None,
) -> None:
    # given an agent whose trigger logic throws the first 301 UTF-16 units of the text, and a
    # sibling agent on the same topic
    cid = running(
        agent(
            "thrower",
            {
                "topic": "GO",
                "logic": script(
                    "throw new Error('too long: ' + message.content.text.slice(0, 301))"
                ),
            },
        ),
        agent("sibling", {"topic": "GO"}),
    )
    # when a text whose 301st unit is half an emoji arrives
    publish(cid, text=HALF_EMOJI_TEXT)
    # then the failure is reported, with the half emoji replaced, and the sibling's task queued
    [error] = messages(cid, "AGENT_ERROR")
    assert error.sender == "thrower"
    assert error.data["phase"] == "trigger_logic"
    assert "too long: " + "a" * 300 + "\ufffd" in error.data["error"]
    assert list(Task.objects.filter(cluster_id=cid).values_list("agent_id", "state")) == [
        ("sibling", "queued")
    ]
    assert cluster_get(cluster_id=cid).state == "running"


@pytest.mark.parametrize(
    "reason_js",
    [
        "'x'.repeat(1100 * 1024)",  # over 1 MiB
        "'done\\u0000here'",  # a NUL
        "'half \\ud83d'",  # a lone surrogate
    ],
)
def test_a_stop_cluster_reason_that_cannot_be_stored_still_completes_the_cluster(
    db: None, reason_js: str
) -> None:
    # given a stop_cluster trigger whose logic returns a reason no database would store
    cid = running(
        agent(
            "stopper",
            {
                "topic": "GO",
                "action": "stop_cluster",
                "logic": script(f"return {{ reason: {reason_js} }};"),
            },
        )
    )
    # when its topic arrives
    publish(cid)
    # then the cluster completes, with the reason made storable and cut to its bound
    [complete] = messages(cid, "CLUSTER_COMPLETE")
    reason = complete.data["reason"]
    assert "\x00" not in reason
    assert len(reason) <= 2000
    assert all(not 0xD800 <= ord(c) <= 0xDFFF for c in reason)
    assert cluster_get(cluster_id=cid).state == "completed"


def test_a_hook_error_with_half_an_emoji_completes_the_task_and_names_the_hook(
    api: ApiClient,
) -> None:
    # given an agent whose transform throws half an emoji
    cid = running(
        agent(
            "worker",
            {"topic": "GO"},
            hooks={
                "onComplete": {
                    "action": "publish_message",
                    "transform": script(
                        "throw new Error('bad: ' + triggeringMessage.content.text.slice(0, 301))"
                    ),
                }
            },
        )
    )
    publish(cid, text=HALF_EMOJI_TEXT)
    claim = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
    # when the worker completes it
    done = api.post(
        f"/api/v1/tasks/{claim['id']}/complete",
        {"lease_id": claim["lease_id"], "result": {"summary": "ok"}},
    )
    # then the completion is accepted, and the error names the hook, not the task
    assert done.status_code == 200, done.content
    assert Task.objects.get(pk=claim["id"]).state == "completed"
    [error] = messages(cid, "AGENT_ERROR")
    assert error.data["phase"] == "hook_transform"
    assert error.data["hook"] == "onComplete"
    assert "bad: " + "a" * 300 + "\ufffd" in error.data["error"]


@pytest.mark.parametrize(
    ("receiver", "stored"),
    [(["a", "b"], None), ({"to": "x"}, None), (42, "42"), ("validator", "validator")],
)
def test_a_hook_receiver_that_is_not_a_string_is_refused_or_converted(
    api: ApiClient, receiver: Any, stored: str | None
) -> None:
    # given a hook whose receiver comes from the result
    cid = running(
        agent(
            "worker",
            {"topic": "GO"},
            hooks={
                "onComplete": {
                    "action": "publish_message",
                    "config": {"topic": "DONE", "receiver": "{{result.to}}"},
                }
            },
        )
    )
    publish(cid)
    claim = api.post("/api/v1/tasks/claim", {"wait": 0}).json()["task"]
    # when the result names a receiver of another type
    done = api.post(
        f"/api/v1/tasks/{claim['id']}/complete",
        {"lease_id": claim["lease_id"], "result": {"to": receiver}},
    )
    assert done.status_code == 200, done.content
    published = messages(cid, "DONE")
    if stored is None:
        # then a list or an object is no address: refused, and said so
        assert published == []
        [error] = messages(cid, "AGENT_ERROR")
        assert "receiver must be a string" in error.data["error"]
    else:
        # and a number is its JSON text, never a Python repr
        assert [m.receiver for m in published] == [stored]
