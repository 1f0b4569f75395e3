"""The agents of a cluster config, parsed once into frozen values (SPEC §4, §7).

A config enters as JSON (a template resolved, or a config given whole); ``agents_parse`` turns
its ``agents`` into ``AgentSpec`` values, checking every field it reads and every number against
its bound, or raises ``AgentConfigError`` naming the field. Dispatch, hooks, the inspector, the
topology, the demo and validation read these values, never the dict: one reading of each field,
one default, one topic matcher (``Trigger.matches``).

Fields the server does not read (``modelLevel``, ``contextRules``, anything zeroshot adds) are
kept in ``raw`` and travel to the worker unchanged. ``contextStrategy`` is checked by
``context.strategy`` and kept here as written.

Django-free: a pure core (see pyproject's import contracts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

from ledger.records import TOPIC_PATTERN
from ledger.topics import Topic
from ledger.validation import AGENT_ID_RE, text_problem

JSON = Any

TriggerAction = Literal["execute_task", "stop_cluster"]
OutputFormat = Literal["json", "text", "stream-json"]
HookName = Literal["onStart", "onComplete", "onError"]

TRIGGER_ACTIONS: Final[tuple[TriggerAction, ...]] = ("execute_task", "stop_cluster")
OUTPUT_FORMATS: Final[tuple[OutputFormat, ...]] = ("json", "text", "stream-json")
HOOK_NAMES: Final[tuple[HookName, ...]] = ("onStart", "onComplete", "onError")

# The bounds of SPEC §7 (docs/decisions/0081-config-bounds.md): each fits a 32-bit column and
# every worker's arithmetic, and lies far past any real cluster.
MAX_ITERATIONS_MAX: Final = 1_000_000
DEFAULT_MAX_ITERATIONS: Final = 100
MAX_RETRIES_MAX: Final = 100
DEFAULT_MAX_RETRIES: Final = 3
TIMEOUT_MAX_MS: Final = 7 * 24 * 3600 * 1000  # a week; 0 means no limit
MAX_TRIGGERS: Final = 100
SCRIPT_MAX_CHARS: Final = 100_000
NAME_MAX_CHARS: Final = 200

# zeroshot's schema for a json agent that names none (src/agent/agent-config.ts,
# applyOutputDefaults): its results are checked against it (SPEC §7.5).
DEFAULT_JSON_SCHEMA: Final[Mapping[str, JSON]] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "description": "Brief summary of what was done"},
        "result": {"type": "string", "description": "Detailed result or output"},
    },
    "required": ["summary", "result"],
}

_TOPIC: Final = re.compile(TOPIC_PATTERN)
# A trigger's topic: a topic, ``*`` (everything) or a topic's prefix then ``*``.
_TOPIC_PREFIX: Final = re.compile(r"^[A-Z][A-Z0-9_]{0,62}\*$")


class AgentConfigError(ValueError):
    """An agent config the server cannot run: ``field`` says where (``agents[1].timeout``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem
        self.message = f"{field} {problem}"


@dataclass(frozen=True, slots=True)
class Script:
    """A script of a trigger or a hook (``{engine?, script}``), run in the sandbox."""

    source: str


@dataclass(frozen=True, slots=True)
class Trigger:
    """One of an agent's triggers: the messages it answers and what it does then."""

    topic: str
    action: TriggerAction = "execute_task"
    logic: Script | None = None

    def matches(self, topic: str) -> bool:
        """The only topic matcher (zeroshot's): the same topic, ``*`` every topic, ``PREFIX_*``
        every topic that starts with ``PREFIX_``."""
        if self.topic == topic or self.topic == "*":
            return True
        return self.topic.endswith("*") and topic.startswith(self.topic[:-1])


@dataclass(frozen=True, slots=True)
class Hook:
    """A hook (``hooks.onComplete`` …): its action and the message it builds.

    ``config`` is the message template with placeholders; ``logic`` may patch it, ``transform``
    replaces it with what the script returns.
    """

    action: str = "publish_message"
    config: Mapping[str, JSON] | None = None
    logic: Script | None = None
    transform: Script | None = None

    @property
    def declared_topic(self) -> str | None:
        """The topic the hook's config names, when no script may change it; else ``None``.

        A transform returns its whole message and hook logic may patch the topic, so what such
        a hook publishes is known only when it runs.
        """
        if self.transform is not None or self.logic is not None or self.config is None:
            return None
        topic = self.config.get("topic")
        return topic if isinstance(topic, str) and topic else None

    @property
    def config_topic(self) -> str | None:
        """The topic written in the hook's config (before any script), if one is."""
        topic = self.config.get("topic") if self.config is not None else None
        return topic if isinstance(topic, str) and topic else None


@dataclass(frozen=True, slots=True)
class Hooks:
    on_start: Hook | None = None
    on_complete: Hook | None = None
    on_error: Hook | None = None

    def all(self) -> tuple[Hook, ...]:
        return tuple(h for h in (self.on_start, self.on_complete, self.on_error) if h is not None)


@dataclass(frozen=True, slots=True)
class Limits:
    """How often and how long an agent may run, each within its bound."""

    max_iterations: int = DEFAULT_MAX_ITERATIONS
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout_ms: int = 0  # 0: no limit


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """One agent of a cluster config, parsed; ``raw`` is the config as written."""

    id: str
    role: str = ""
    model: str | None = None
    provider: str | None = None
    prompt: JSON = None
    output_format: OutputFormat = "json"
    # The agent's jsonSchema; zeroshot's default one for a json agent that names none.
    json_schema: JSON = None
    # zeroshot's strictSchema (default true): the runner asks a provider that can enforce the
    # schema natively to do so (SPEC §7.5).
    strict_schema: bool = True
    limits: Limits = field(default_factory=Limits)
    triggers: tuple[Trigger, ...] = ()
    hooks: Hooks = field(default_factory=Hooks)
    context_strategy: Mapping[str, JSON] | None = None
    raw: Mapping[str, JSON] = field(default_factory=dict, compare=False, repr=False)

    def trigger_topics(self) -> list[str]:
        """The topics of the agent's triggers as written (patterns included), once each."""
        return list(dict.fromkeys(t.topic for t in self.triggers))

    def triggered_by(self, topic: str) -> bool:
        """Whether any of the agent's triggers matches ``topic`` (its logic not run)."""
        return any(t.matches(topic) for t in self.triggers)

    @property
    def ends_cluster(self) -> bool:
        """Whether the config says this agent ends its cluster: a ``stop_cluster`` trigger, or
        an ``onComplete`` hook whose config names ``CLUSTER_COMPLETE`` (zeroshot's reading).

        A hook whose transform or logic could publish ``CLUSTER_COMPLETE`` is not counted: a
        script's output is known only when it runs (docs/decisions/0080-typed-agent-model.md).
        """
        if any(t.action == "stop_cluster" for t in self.triggers):
            return True
        hook = self.hooks.on_complete
        return hook is not None and hook.config_topic == Topic.CLUSTER_COMPLETE


def config_ends_cluster(agents: Sequence[AgentSpec]) -> bool:
    """Whether a config ends its cluster itself (``context.completion`` adds zeroshot's agent
    names to this test when it decides whether the completion-detector joins)."""
    return any(agent.ends_cluster for agent in agents)


# --- parsing -------------------------------------------------------------------------------------


def agents_parse(agents: JSON, *, where: str = "agents") -> tuple[AgentSpec, ...]:
    """Every agent of a config's ``agents`` list, or ``AgentConfigError`` at the first problem."""
    if agents is None:
        return ()
    if not isinstance(agents, list):
        raise AgentConfigError(where, f"must be a list of agents, got {_kind(agents)}")
    parsed = tuple(agent_parse(a, where=f"{where}[{i}]") for i, a in enumerate(agents))
    seen: set[str] = set()
    for index, agent in enumerate(parsed):
        if agent.id in seen:
            raise AgentConfigError(f"{where}[{index}].id", f"{agent.id!r} is used by another agent")
        seen.add(agent.id)
    return parsed


def config_agents(config: Mapping[str, JSON] | None) -> tuple[AgentSpec, ...]:
    """The agents of a cluster config (``{agents: [...]}``)."""
    if not config:
        return ()
    return agents_parse(config.get("agents"), where="agents")


def agent_parse(raw: JSON, *, where: str = "agent") -> AgentSpec:
    """One agent config, or ``AgentConfigError`` naming the first field that is wrong."""
    if not isinstance(raw, Mapping):
        raise AgentConfigError(where, f"must be an object, got {_kind(raw)}")
    agent_id = raw.get("id")
    if not isinstance(agent_id, str) or AGENT_ID_RE.fullmatch(agent_id) is None:
        raise AgentConfigError(
            f"{where}.id",
            "must be 1-64 letters, digits or _.- characters, starting with a letter or a digit",
        )
    strategy = raw.get("contextStrategy")
    if strategy is not None and not isinstance(strategy, Mapping):
        raise AgentConfigError(f"{where}.contextStrategy", "must be an object")
    output_format = raw.get("outputFormat", "json")
    if output_format is None:
        output_format = "json"
    if output_format not in OUTPUT_FORMATS:
        raise AgentConfigError(
            f"{where}.outputFormat", f"must be one of {', '.join(OUTPUT_FORMATS)}"
        )
    prompt = _prompt(raw.get("prompt"), field=f"{where}.prompt")
    schema = raw.get("jsonSchema")
    if schema is not None and not isinstance(schema, Mapping | bool | str):
        raise AgentConfigError(f"{where}.jsonSchema", "must be an object (a JSON Schema)")
    return AgentSpec(
        id=agent_id,
        role=_name(raw.get("role"), field=f"{where}.role") or "",
        model=_name(raw.get("model"), field=f"{where}.model"),
        provider=_name(raw.get("provider"), field=f"{where}.provider"),
        prompt=prompt,
        output_format=cast(OutputFormat, output_format),
        json_schema=DEFAULT_JSON_SCHEMA if schema is None and output_format == "json" else schema,
        strict_schema=_flag(raw.get("strictSchema"), field=f"{where}.strictSchema", default=True),
        limits=Limits(
            max_iterations=_bounded(
                raw.get("maxIterations"),
                field=f"{where}.maxIterations",
                low=1,
                high=MAX_ITERATIONS_MAX,
                default=DEFAULT_MAX_ITERATIONS,
            ),
            max_retries=_bounded(
                raw.get("maxRetries"),
                field=f"{where}.maxRetries",
                low=0,
                high=MAX_RETRIES_MAX,
                default=DEFAULT_MAX_RETRIES,
            ),
            timeout_ms=_bounded(
                raw.get("timeout"),
                field=f"{where}.timeout",
                low=0,
                high=TIMEOUT_MAX_MS,
                default=0,
            ),
        ),
        triggers=_triggers(raw.get("triggers"), where=f"{where}.triggers"),
        hooks=_hooks(raw.get("hooks"), where=f"{where}.hooks"),
        context_strategy=strategy,
        raw=raw,
    )


def _prompt(value: JSON, *, field: str) -> JSON:
    """A prompt as a build reads it (``context.packs.prompt_text``): a string, an object with a
    string ``system``, or zeroshot's ``{initial, subsequent?}`` of strings."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if isinstance(value.get("system"), str):
            return value
        later = value.get("subsequent")
        if isinstance(value.get("initial"), str) and (later is None or isinstance(later, str)):
            return value
    raise AgentConfigError(
        field,
        "must be a string, an object with a string system, or an object with string initial "
        "(and subsequent) prompts",
    )


def _triggers(value: JSON, *, where: str) -> tuple[Trigger, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise AgentConfigError(where, f"must be a list, got {_kind(value)}")
    if len(value) > MAX_TRIGGERS:
        raise AgentConfigError(where, f"holds at most {MAX_TRIGGERS} triggers, got {len(value)}")
    return tuple(_trigger(t, where=f"{where}[{i}]") for i, t in enumerate(value))


def _trigger(value: JSON, *, where: str) -> Trigger:
    if not isinstance(value, Mapping):
        raise AgentConfigError(where, f"must be an object, got {_kind(value)}")
    topic = value.get("topic")
    if not isinstance(topic, str) or not (
        topic == "*" or _TOPIC.fullmatch(topic) or _TOPIC_PREFIX.fullmatch(topic)
    ):
        raise AgentConfigError(
            f"{where}.topic",
            "must be a topic (^[A-Z][A-Z0-9_]{0,63}$), '*', or a topic's prefix ending in '*' "
            f"such as 'VALIDATION_*', got {_shown(topic)}",
        )
    action = value.get("action", "execute_task")
    if action is None:
        action = "execute_task"
    if action not in TRIGGER_ACTIONS:
        raise AgentConfigError(
            f"{where}.action", f"must be execute_task or stop_cluster, got {_shown(action)}"
        )
    return Trigger(
        topic=topic,
        action=cast(TriggerAction, action),
        logic=_script(value.get("logic"), field=f"{where}.logic"),
    )


def _hooks(value: JSON, *, where: str) -> Hooks:
    if value is None:
        return Hooks()
    if not isinstance(value, Mapping):
        raise AgentConfigError(where, f"must be an object, got {_kind(value)}")
    parsed = {name: _hook(value.get(name), where=f"{where}.{name}") for name in HOOK_NAMES}
    return Hooks(
        on_start=parsed["onStart"], on_complete=parsed["onComplete"], on_error=parsed["onError"]
    )


def _hook(value: JSON, *, where: str) -> Hook | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise AgentConfigError(where, f"must be an object, got {_kind(value)}")
    action = value.get("action", "publish_message")
    if not isinstance(action, str) or not action:
        raise AgentConfigError(f"{where}.action", "must be a string such as publish_message")
    config = value.get("config")
    if config is not None and not isinstance(config, Mapping):
        raise AgentConfigError(f"{where}.config", f"must be an object, got {_kind(config)}")
    return Hook(
        action=action,
        config=config,
        logic=_script(value.get("logic"), field=f"{where}.logic"),
        transform=_script(value.get("transform"), field=f"{where}.transform"),
    )


def _script(value: JSON, *, field: str) -> Script | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise AgentConfigError(field, "must be an object {engine?, script}")
    engine = value.get("engine")
    if engine is not None and engine != "javascript":
        # As zeroshot's config validator (src/config-validator.js, trigger and hook logic).
        raise AgentConfigError(
            f"{field}.engine",
            f"must be 'javascript' (the only engine scripts run in), got {_shown(engine)}",
        )
    source = value.get("script")
    if source is None:
        return None
    if not isinstance(source, str):
        raise AgentConfigError(f"{field}.script", f"must be a string, got {_kind(source)}")
    if len(source) > SCRIPT_MAX_CHARS:
        raise AgentConfigError(f"{field}.script", f"is longer than {SCRIPT_MAX_CHARS:,} characters")
    if (problem := text_problem(source)) is not None:
        raise AgentConfigError(f"{field}.script", problem)
    return Script(source=source)


def _name(value: JSON, *, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise AgentConfigError(field, f"must be a string, got {_kind(value)}")
    if len(value) > NAME_MAX_CHARS:
        raise AgentConfigError(field, f"is longer than {NAME_MAX_CHARS} characters")
    return value


def _flag(value: JSON, *, field: str, default: bool = False) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise AgentConfigError(field, f"must be true or false, got {_kind(value)}")
    return value


def _bounded(value: JSON, *, field: str, low: int, high: int, default: int) -> int:
    """A whole number within ``low`` … ``high``: an integer, an integral float (JSON has one
    number type) or a string of digits (a template placeholder's text); absent is ``default``."""
    if value is None:
        return default
    number = _whole(value)
    if number is None:
        raise AgentConfigError(field, f"must be a whole number, got {_shown(value)}")
    if not low <= number <= high:
        raise AgentConfigError(field, f"must be between {low} and {high:,}, got {_shown(value)}")
    return number


def _whole(value: JSON) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 12:
        return int(value)
    return None


def _kind(value: JSON) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, Mapping) else type(value).__name__


def _shown(value: JSON) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        # str() of a huge int is slow, and refused past 4,300 digits.
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
