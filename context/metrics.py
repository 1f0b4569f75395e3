"""Build metrics (SPEC §6.2): numbers, ids and names about a build, never prompt text."""

from __future__ import annotations

import json
from typing import Any

from context.budget import BudgetResult, estimate_tokens

METRICS_LINE_PREFIX = "[ContextMetrics] "


def build_metrics(
    *,
    cluster_id: str,
    agent_id: str,
    role: str | None,
    iteration: int,
    triggered_by: str | None,
    trigger_from: str | None,
    max_tokens: int,
    sources_count: int,
    result: BudgetResult,
) -> dict[str, Any]:
    """Return the SPEC §6.2 metrics object of one build; max_tokens is the resolved budget."""
    sections: dict[str, dict[str, int]] = {}
    for decision in result.decisions:
        if decision.status != "included":
            continue
        section = sections.setdefault(decision.section, {"chars": 0, "estimatedTokens": 0})
        section["chars"] += decision.chars
        section["estimatedTokens"] += decision.estimated_tokens
    return {
        "clusterId": cluster_id,
        "agentId": agent_id,
        "role": role,
        "iteration": iteration,
        "triggeredBy": triggered_by,
        "triggerFrom": trigger_from,
        "strategy": {"maxTokens": max_tokens, "sourcesCount": sources_count},
        "budget": result.budget.to_dict(),
        "packs": [decision.to_dict() for decision in result.decisions],
        "sections": sections,
        "total": {
            "chars": len(result.context),
            "estimatedTokens": estimate_tokens(result.context),
        },
        "truncation": {"maxContextChars": result.truncation.to_dict()},
    }


def metrics_line(metrics: dict[str, Any]) -> str:
    """Return the one stdout line printed per build when ZEROSHOT_CONTEXT_METRICS=1."""
    return METRICS_LINE_PREFIX + json.dumps(metrics, separators=(",", ":"), ensure_ascii=False)


def build_total(metrics: dict[str, Any]) -> tuple[int, int | None, int]:
    """A build's one total (SPEC §3.6): ``(tokens, budget, over)`` from its metrics.

    ``tokens`` is ``total.estimatedTokens``, which is ``budget.finalTokens``; ``over`` is how
    far it lies past the budget. Pack estimates round up one by one, so the budget walk's
    ``overBudgetTokens`` can be a few tokens higher; every total shown is this one.
    """
    budget = metrics.get("budget") or {}
    total = metrics.get("total") or {}
    tokens = int(total.get("estimatedTokens", budget.get("finalTokens", 0)) or 0)
    max_tokens = budget.get("maxTokens")
    limit = int(max_tokens) if isinstance(max_tokens, int) and max_tokens > 0 else None
    return tokens, limit, max(0, tokens - limit) if limit is not None else 0


def build_summary(metrics: dict[str, Any], *, iteration: int) -> str:
    """One line about a build's size: ``478 tokens of 200 · 278 over · iteration 3``."""
    tokens, limit, over = build_total(metrics)
    size = f"{tokens:,} tokens" + (f" of {limit:,}" if limit is not None else "")
    return size + (f" · {over:,} over budget" if over else "") + f" · iteration {iteration}"
