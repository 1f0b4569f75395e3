"""What the agents of a cluster are doing: their state, current task and last build's load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from context.agents import AgentConfigError, agents_parse
from context.completion import (
    COMPLETION_DETECTOR_ID,
    agents_with_completion,
    has_completion_handler,
)
from context.selectors import BuildRecord, build_latest_by_agent
from context.strategy import agent_max_tokens
from dashboard.templatetags.dashboard_ui import inspector_url
from ledger import interfaces as ledger
from ledger.interfaces import ClusterRecord, ClusterState
from runs import selectors as tasks
from runs.dispatch import VALIDATOR_ROLE

# The agents panel looks again this often while the cluster runs (ms).
AGENTS_REFRESH_MS = 1500


@dataclass(frozen=True, slots=True)
class Usage:
    """The most loaded of some agents' last builds against its budget, the others in words."""

    agent_id: str
    tokens: int
    budget: int
    agents: int  # how many agents' builds were weighed
    detail: str

    @property
    def over(self) -> bool:
        return self.tokens > self.budget

    @property
    def percent(self) -> int:
        return round(100 * self.tokens / self.budget) if self.budget else 0


def _load(build: BuildRecord) -> float:
    return build.final_tokens / build.max_tokens if build.max_tokens else float("inf")


def usage_of(builds: list[BuildRecord]) -> Usage | None:
    """The agent whose last build uses the largest share of its budget.

    Budgets differ by orders of magnitude across agents (100,000 for one, 650 for another):
    a sum would hide the agent about to overflow behind the one with room to spare.
    """
    if not builds:
        return None
    ordered = sorted(builds, key=lambda b: (-_load(b), b.agent_id))
    top = ordered[0]
    detail = "; ".join(
        f"{b.agent_id}: {b.final_tokens:,} / {b.max_tokens:,} ({round(100 * _load(b))}%)"
        for b in ordered
    )
    return Usage(
        agent_id=top.agent_id,
        tokens=top.final_tokens,
        budget=top.max_tokens,
        agents=len(builds),
        detail=detail,
    )


def agents_context(
    cluster: ClusterRecord, *, version: ledger.ConfigVersionRecord | None = None
) -> dict[str, Any]:
    """Each agent with its state, current task and last build (four queries, none of them for
    a config without agents, and one more that waits, when it lags, for the pipeline to pass
    the cluster's newest message).

    The agents are those the cluster runs now (zeroshot's completion-detector included when
    it joins), or those of an earlier config ``version`` (SPEC §7.7).
    """
    ledger.pipeline.caught_up(cluster.id)
    configured = agents_with_completion(version.agents if version else cluster.agents)
    ids = [str(a.get("id", "")) for a in configured]
    activity = tasks.agent_activity(cluster_id=cluster.id, agent_ids=ids)
    # A config without agents shows none: no builds to read for them.
    latest = build_latest_by_agent(cluster_ids=[cluster.id]) if ids else {}
    agents = []
    for agent in configured:
        agent_id = str(agent.get("id", ""))
        build = latest.get((cluster.id, agent_id))
        agents.append(
            {
                "id": agent_id,
                "role": agent.get("role", ""),
                "max_tokens": agent_max_tokens(agent),
                "usage": usage_of([build] if build else []),
                "inspector": inspector_url(cluster.id, agent_id),
                "activity": activity[agent_id],
            }
        )
    return {
        "cluster": cluster,
        "condition": tasks.cluster_conditions([cluster])[cluster.id],
        "agents": agents,
        "config_version": version.version if version else cluster.config_version,
        "past_version": version is not None and version.version != cluster.config_version,
        "live_agents": version is None
        and cluster.state in (ClusterState.RUNNING, ClusterState.STOPPING),
        "refresh_ms": AGENTS_REFRESH_MS,
        "now_ms": ledger.now_ms(),
    }


def completion_of(agents: list[dict[str, Any]]) -> str:
    """How the cluster ends, in words: by its own config, or by zeroshot's completion-detector,
    which joins a config without a completion handler (SPEC §7.1)."""
    if not agents:
        return ""
    try:
        parsed = agents_parse(agents)
    except AgentConfigError as error:
        return f"Its config cannot run: {error.message}"
    if any(a.id == COMPLETION_DETECTOR_ID for a in parsed) or not has_completion_handler(agents):
        validators = [a.id for a in parsed if a.role == VALIDATOR_ROLE]
        waits = (
            "every validator (" + ", ".join(validators) + ") or a consensus VALIDATION_RESULT"
            if validators
            else "the first VALIDATION_RESULT"
        )
        return (
            "Ends by zeroshot's completion-detector: CLUSTER_COMPLETE once "
            + waits
            + " approves the newest IMPLEMENTATION_READY, with evidence for each passed criterion."
        )
    return (
        "Ends when one of its agents publishes CLUSTER_COMPLETE (a stop_cluster trigger or a hook)."
    )
