"""zeroshot's completion-detector (SPEC §7.1): the agent that ends a cluster without its own
completion handler.

zeroshot injects it (``orchestrator.js``, ``_injectCompletionAgent``) with the trigger script
its git-pusher shares (``src/agents/git-pusher-template.js``, ``SHARED_TRIGGER_SCRIPT``), kept
unchanged in ``completion_detector.js`` beside this module (zeroshot's work, MIT licence, Copyright
(c) 2026 The Open Engine Company; see ``builtin_templates/zeroshot/LICENSE``). The script runs in
the logic sandbox like every other trigger script; nothing of ours decides when a cluster ends.

Pure: configs in, configs out.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from context.agents import AgentSpec, config_agents

JSON = Any

COMPLETION_DETECTOR_ID: Final = "completion-detector"
GIT_PUSHER_ID: Final = "git-pusher"
DETECTOR_SCRIPT: Final = (Path(__file__).resolve().parent / "completion_detector.js").read_text(
    encoding="utf-8"
)


def completion_detector() -> dict[str, JSON]:
    """The agent zeroshot injects (``orchestrator.js`` ``_injectCompletionAgent``): it never
    runs a task; its ``stop_cluster`` trigger ends the cluster when the script passes."""
    return {
        "id": COMPLETION_DETECTOR_ID,
        "role": "orchestrator",
        "modelLevel": "level1",
        "timeout": 0,
        "triggers": [
            {
                "topic": "VALIDATION_RESULT",
                "logic": {"engine": "javascript", "script": DETECTOR_SCRIPT},
                "action": "stop_cluster",
            }
        ],
    }


def has_completion_handler(agents: Sequence[JSON]) -> bool:
    """zeroshot's test (``orchestrator.js`` ``_hasCompletionHandler``): an agent named
    ``completion-detector`` or ``git-pusher``, a hook whose config publishes
    ``CLUSTER_COMPLETE``, or a ``stop_cluster`` trigger."""
    for agent in agents:
        if not isinstance(agent, Mapping):
            continue
        if agent.get("id") in (COMPLETION_DETECTOR_ID, GIT_PUSHER_ID):
            return True
        hooks = agent.get("hooks")
        on_complete = hooks.get("onComplete") if isinstance(hooks, Mapping) else None
        config = on_complete.get("config") if isinstance(on_complete, Mapping) else None
        if isinstance(config, Mapping) and config.get("topic") == "CLUSTER_COMPLETE":
            return True
        triggers = agent.get("triggers")
        if isinstance(triggers, list) and any(
            isinstance(t, Mapping) and t.get("action") == "stop_cluster" for t in triggers
        ):
            return True
    return False


def config_with_completion(config: Mapping[str, JSON] | None) -> dict[str, JSON]:
    """The config as the cluster runs it: its own, plus zeroshot's completion-detector when it
    has no completion handler (and has agents at all). The stored config is not changed."""
    base = dict(config or {})
    agents = base.get("agents")
    if not isinstance(agents, list) or not agents or has_completion_handler(agents):
        return base
    return {**base, "agents": [*agents, completion_detector()]}


def running_agents(
    config: Mapping[str, JSON] | None, *, text: str | None = None
) -> tuple[AgentSpec, ...]:
    """The agents of ``config_with_completion(config)``, parsed (``AgentConfigError`` as
    ``config_agents`` raises it). Parsing is pure, and the post-commit pipeline asks for every
    batch of a cluster whose config rarely changes: the parse is kept per config text, so a
    changed config is parsed again and an unchanged one is parsed once. ``text`` is the JSON
    text ``config`` was read from, when the caller has it (``ClusterRecord.config_text``):
    then the config is not written out again to find its parse."""
    if text is not None:
        return _running_agents(text)
    try:
        text = json.dumps(config, separators=(",", ":"))
    except (TypeError, ValueError):
        return config_agents(config_with_completion(config))
    return _running_agents(text)


@functools.lru_cache(maxsize=64)
def _running_agents(text: str) -> tuple[AgentSpec, ...]:
    # Parsed from the text: the specs share nothing with a caller's dicts.
    return config_agents(config_with_completion(json.loads(text)))


def agents_with_completion(agents: Sequence[JSON]) -> list[JSON]:
    """``config_with_completion`` on an agents list (a copy)."""
    ran = config_with_completion({"agents": copy.copy(list(agents))})
    listed = ran.get("agents")
    return list(listed) if isinstance(listed, list) else []
