"""Validating ``contextStrategy`` objects (SPEC §2.1): errors that reject, warnings that advise."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from context.strategy.spec import (
    MAX_TOKENS_MAX,
    PRIORITIES,
    REQUIRED_TOPICS,
    SINCE_FORMS,
    SOURCE_COUNT_MAX,
    STRATEGIES,
    UNPUBLISHED_OK_TOPICS,
    is_number,
    is_positive_integer,
    is_since_valid,
)

_PLACEHOLDER: Final = re.compile(r"\{\{\s*[^{}]*\}\}")
# `topic: 'NAME'` inside a hook script: scripts are never run here, this only spots literals.
_SCRIPT_TOPIC: Final = re.compile(r"""\btopic\s*:\s*(['"`])([A-Z][A-Z0-9_]*)\1""")


@dataclass(frozen=True, slots=True)
class Issue:
    """One validation error or warning, located by agent, source index and field."""

    agent: str | None
    source: int | None
    field: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        """Return the issue as the JSON object of SPEC §2.1."""
        return {
            "agent": self.agent,
            "source": self.source,
            "field": self.field,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """The result of validating strategies: ``valid`` is true when there is no error."""

    valid: bool
    errors: list[Issue]
    warnings: list[Issue]

    def to_dict(self) -> dict[str, Any]:
        """Return ``{valid, errors, warnings}`` as SPEC §2.1 shapes it."""
        return {
            "valid": self.valid,
            "errors": [issue.to_dict() for issue in self.errors],
            "warnings": [issue.to_dict() for issue in self.warnings],
        }


def strategy_validate(
    strategy_raw: Any,
    *,
    agent_id: str | None = None,
    agents: Sequence[Any] | None = None,
) -> ValidationReport:
    """Validate one strategy; with ``agents`` also check publishers and the agent's triggers."""
    published = _published_topics(agents) if agents is not None else None
    agent = _find_agent(agents, agent_id) if agents is not None else None
    triggers = agent.get("triggers") if agent is not None else None
    errors = list(strategy_errors(strategy_raw, agent=agent_id))
    warnings = list(
        _strategy_warnings(strategy_raw, agent=agent_id, published=published, triggers=triggers)
    )
    return ValidationReport(valid=not errors, errors=errors, warnings=warnings)


def strategy_validate_agents(agents: Sequence[Any]) -> ValidationReport:
    """Validate the ``contextStrategy`` of every agent of a cluster config (SPEC §2.1)."""
    published = _published_topics(agents)
    errors: list[Issue] = []
    warnings: list[Issue] = []
    for position, agent in enumerate(agents):
        if not isinstance(agent, Mapping):
            errors.append(_issue(None, None, f"agents[{position}]", "must be an object"))
            continue
        name = agent.get("id") if isinstance(agent.get("id"), str) else f"agents[{position}]"
        # An agent without a strategy builds no context (an orchestrator, say): nothing to check.
        if "contextStrategy" not in agent or agent["contextStrategy"] is None:
            continue
        raw = agent["contextStrategy"]
        errors.extend(strategy_errors(raw, agent=name))
        warnings.extend(
            _strategy_warnings(raw, agent=name, published=published, triggers=agent.get("triggers"))
        )
    return ValidationReport(valid=not errors, errors=errors, warnings=warnings)


# --- errors -----------------------------------------------------------------------------------


def _issue(agent: str | None, source: int | None, field: str, text: str) -> Issue:
    parts = [f'agent "{agent}"'] if agent is not None else []
    if source is not None:
        parts.append(f"source {source}")
    parts.append(f'field "{field}"')
    return Issue(agent=agent, source=source, field=field, message=f"{', '.join(parts)}: {text}")


def _show(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        # json.dumps of a huge int is slow, and refused past 4,300 digits.
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def strategy_errors(raw: Any, *, agent: str | None) -> Iterator[Issue]:
    if raw is None:
        return
    if not isinstance(raw, Mapping):
        yield _issue(agent, None, "contextStrategy", f"must be an object, got {_show(raw)}")
        return
    yield from _max_tokens_errors(raw.get("maxTokens"), agent=agent)
    sources = raw.get("sources")
    if sources is None:
        return
    if not isinstance(sources, list):
        yield _issue(agent, None, "sources", f"must be a list, got {_show(sources)}")
        return
    for index, source in enumerate(sources):
        yield from _source_errors(source, index=index, agent=agent)


def _max_tokens_errors(value: Any, *, agent: str | None) -> Iterator[Issue]:
    if value is None or (is_number(value) and value == 0):
        return
    if isinstance(value, str) and _PLACEHOLDER.search(value):
        yield _issue(
            agent,
            None,
            "maxTokens",
            f"unresolved template placeholder {_show(value)} (expected a positive integer)",
        )
    elif not is_positive_integer(value):
        yield _issue(agent, None, "maxTokens", f"must be a positive integer, got {_show(value)}")
    elif value > MAX_TOKENS_MAX:
        yield _issue(
            agent,
            None,
            "maxTokens",
            f"must be between 1 and {MAX_TOKENS_MAX:,}, got {_show(value)}",
        )


def _source_errors(source: Any, *, index: int, agent: str | None) -> Iterator[Issue]:
    if not isinstance(source, Mapping):
        yield _issue(agent, index, "sources", f"must be an object, got {_show(source)}")
        return
    topic = source.get("topic")
    if topic is None or topic == "":
        yield _issue(agent, index, "topic", "missing topic")
    elif not isinstance(topic, str):
        yield _issue(agent, index, "topic", f"must be a string, got {_show(topic)}")
    sender = source.get("sender")
    if sender is not None and not isinstance(sender, str):
        yield _issue(agent, index, "sender", f"must be a string, got {_show(sender)}")
    for field in ("strategy", "compactStrategy"):
        value = source.get(field)
        if value is not None and value not in STRATEGIES:
            yield _issue(
                agent,
                index,
                field,
                f"unknown {field} {_show(value)} (expected latest, oldest or all)",
            )
    priority = source.get("priority")
    if priority is not None and priority not in PRIORITIES:
        yield _issue(
            agent,
            index,
            "priority",
            f"unknown priority {_show(priority)} (expected required, high, medium or low)",
        )
    for field in ("amount", "limit", "compactAmount"):
        value = source.get(field)
        if value is not None and not is_positive_integer(value):
            yield _issue(agent, index, field, f"must be a positive integer, got {_show(value)}")
        elif value is not None and value > SOURCE_COUNT_MAX:
            yield _issue(
                agent,
                index,
                field,
                f"must be between 1 and {SOURCE_COUNT_MAX:,}, got {_show(value)}",
            )
    since = source.get("since")
    if since is not None and not is_since_valid(since):
        where = f" for topic {topic}" if isinstance(topic, str) and topic else ""
        yield _issue(
            agent,
            index,
            "since",
            f"unknown since value {_show(since)}{where} (expected {SINCE_FORMS})",
        )


# --- warnings ---------------------------------------------------------------------------------


def _strategy_warnings(
    raw: Any,
    *,
    agent: str | None,
    published: frozenset[str] | None,
    triggers: Any,
) -> Iterator[Issue]:
    if not isinstance(raw, Mapping):
        return
    sources = raw.get("sources")
    has_required = False
    source_topics: list[str] = []
    for index, source in enumerate(sources if isinstance(sources, list) else []):
        if not isinstance(source, Mapping):
            continue
        topic = source.get("topic")
        topic = topic if isinstance(topic, str) and topic else None
        if topic is not None:
            source_topics.append(topic)
        strategy = source.get("strategy")
        if strategy in ("latest", "oldest") and all(
            source.get(key) is None for key in ("amount", "limit")
        ):
            yield _issue(
                agent,
                index,
                "amount",
                f'strategy "{strategy}" without an amount selects every message of the topic',
            )
        if (
            published is not None
            and topic is not None
            and topic not in published
            and topic not in UNPUBLISHED_OK_TOPICS
            and not topic.endswith("*")
        ):
            yield _issue(agent, index, "topic", f'no agent of the config publishes topic "{topic}"')
        priority = source.get("priority")
        if priority == "required" or (not priority and topic in REQUIRED_TOPICS):
            has_required = True
    yield from _trigger_warnings(triggers, agent=agent, source_topics=source_topics)
    if not has_required:
        yield _issue(
            agent,
            None,
            "sources",
            'no source has priority "required": under a tight budget every source may be dropped',
        )


def _trigger_warnings(
    triggers: Any, *, agent: str | None, source_topics: Sequence[str]
) -> Iterator[Issue]:
    if not isinstance(triggers, list):
        return
    for position, trigger in enumerate(triggers):
        topic = trigger.get("topic") if isinstance(trigger, Mapping) else None
        if not isinstance(topic, str) or not topic:
            continue
        if topic.endswith("*"):
            prefix = topic[:-1]
            covered = any(source.startswith(prefix) for source in source_topics)
        else:
            covered = topic in source_topics
        if not covered:
            yield _issue(
                agent,
                None,
                f"triggers[{position}].topic",
                f'the agent triggers on topic "{topic}" but no source reads it',
            )


def _find_agent(agents: Sequence[Any], agent_id: str | None) -> Mapping[str, Any] | None:
    for agent in agents:
        if isinstance(agent, Mapping) and agent_id is not None and agent.get("id") == agent_id:
            return agent
    return None


def _published_topics(agents: Iterable[Any]) -> frozenset[str]:
    topics: set[str] = set()
    for agent in agents:
        if isinstance(agent, Mapping):
            topics.update(_hook_topics(agent.get("hooks")))
    return frozenset(topics)


def _hook_topics(value: Any) -> Iterator[str]:
    """Every string under a ``topic`` key in a hook tree, and topic literals in its scripts."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "topic" and isinstance(item, str):
                yield item
            elif key == "script" and isinstance(item, str):
                yield from (match.group(2) for match in _SCRIPT_TOPIC.finditer(item))
            else:
                yield from _hook_topics(item)
    elif isinstance(value, list):
        for item in value:
            yield from _hook_topics(item)
