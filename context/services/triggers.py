"""The two choices a build makes before it reads sources: its as-of point and its trigger."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from context.agents import AgentConfigError, Trigger, agent_parse
from ledger import interfaces as ledger
from ledger.interfaces import InvalidInput, MessageFilter, MessageRecord, text_check
from ledger.records import TOPIC_PATTERN

TOPIC_RE = re.compile(TOPIC_PATTERN)


def as_of_filter(*, cluster_id: str, sequence: int | None, timestamp: int | None) -> MessageFilter:
    """The point a build is asked as of (SPEC §3.7): later messages do not exist for it."""
    if sequence is not None and timestamp is not None:
        raise InvalidInput(
            "give as_of_sequence or as_of_timestamp, not both",
            details={"field": "as_of_sequence"},
        )
    if sequence is not None:
        anchor = ledger.message_at_sequence(cluster_id=cluster_id, sequence=sequence)
        return MessageFilter(until=anchor.timestamp, up_to_sequence=sequence)
    if timestamp is not None:
        return MessageFilter(until=timestamp)
    return MessageFilter()


def _inline_trigger(*, cluster_id: str, raw: Mapping[str, Any]) -> MessageRecord:
    topic, sender = raw.get("topic"), raw.get("sender")
    if not isinstance(topic, str) or not isinstance(sender, str) or not 1 <= len(sender) <= 128:
        raise InvalidInput(
            "triggering_message needs a topic and a sender of 1-128 characters",
            details={"field": "triggering_message"},
        )
    # The topic is recorded with the build; it must be a topic a message could have.
    if not TOPIC_RE.match(topic):
        raise InvalidInput(
            f"triggering_message.topic must match {TOPIC_PATTERN}, got {topic!r}",
            details={"field": "triggering_message.topic"},
        )
    text_check(sender, field="triggering_message.sender")
    content = raw.get("content") or {}
    if not isinstance(content, Mapping):
        raise InvalidInput(
            "triggering_message.content must be an object",
            details={"field": "triggering_message.content"},
        )
    return MessageRecord(
        id=str(raw.get("id") or "inline-trigger"),
        cluster_id=cluster_id,
        sequence=0,
        timestamp=int(raw.get("timestamp") or ledger.now_ms()),
        topic=topic,
        sender=sender,
        receiver=str(raw.get("receiver") or "broadcast"),
        content=dict(content),
        metadata=raw.get("metadata"),
    )


def agent_triggers(agent: Mapping[str, Any]) -> tuple[Trigger, ...]:
    """An agent's triggers, parsed (``context.agents``). An inline agent of a preview may not
    be a config that could run; its triggers that have a topic are read alone then."""
    try:
        return agent_parse(agent).triggers
    except AgentConfigError:
        listed = agent.get("triggers")
        return tuple(
            Trigger(topic=t["topic"])
            for t in (listed if isinstance(listed, list) else [])
            if isinstance(t, Mapping) and isinstance(t.get("topic"), str)
        )


def agent_trigger_topics(agent: Mapping[str, Any]) -> list[str]:
    """The topics of an agent's ``triggers``, as written (patterns with ``*`` included)."""
    return [t.topic for t in agent_triggers(agent)]


def trigger_matches(agent: Mapping[str, Any], topic: str) -> bool:
    """Whether a message of ``topic`` is one the agent triggers on: ``Trigger.matches``, the
    matcher dispatch uses, so that the inspector never names a trigger that queues no task."""
    return any(t.matches(topic) for t in agent_triggers(agent))


def trigger_choose(
    *,
    cluster_id: str,
    agent: Mapping[str, Any],
    message_id: str | None,
    inline: Mapping[str, Any] | None,
    as_of: MessageFilter,
) -> MessageRecord:
    if message_id is not None:
        return ledger.message_get(cluster_id=cluster_id, message_id=message_id)
    if inline is not None:
        return _inline_trigger(cluster_id=cluster_id, raw=inline)
    # Without one, the build answers the newest message this agent triggers on, else the newest
    # message of all (``BuildOutcome.trigger_fallback`` tells the two apart).
    topics = [topic for topic in agent_trigger_topics(agent) if "*" not in topic]
    newest = None
    if topics:
        newest = ledger.message_latest(cluster_id=cluster_id, topics=topics, where=as_of)
    if newest is None:
        newest = ledger.message_latest(cluster_id=cluster_id, where=as_of)
    if newest is None:
        raise InvalidInput(
            "the cluster has no message to trigger a build; publish one or pass triggering_message",
            details={"field": "triggering_message_id"},
        )
    return newest
